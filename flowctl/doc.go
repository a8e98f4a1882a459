// Package flowctl is the accounting of the RPC-over-RDMA client transport:
// how many calls the server lets us have outstanding, how full the send
// queue is, which work requests are signaled, which RPCs may start, and how
// many receives must be posted. It does no I/O and starts no goroutines: each
// type is a small state machine that takes its events as method calls, so the
// transport drives it under its own lock and tests drive it directly.
//
// The pieces and the rules they keep: send-queue room comes only from send
// completions; an RPC is admitted only when its whole compound fits; credits
// restart at 1 on each connection and are clamped; every receive completion
// consumes a posted receive:
//
//   - Credits counts outstanding calls against the server's grant
//     (RFC 8166 §3.3.1). The grant restarts at 1 on every connection and is
//     clamped to [1, slots].
//   - SendContextRing holds per-WR metadata in a ring as long as the send
//     queue, indexed by a wrapping wrid. Send-queue room is derived only from
//     send completions: one signaled completion retires every earlier
//     unsignaled WR with it. The ring decides with a Signaler which WRs are
//     signaled: about every half queue, whenever the caller needs a WR's
//     resources back promptly, and always often enough that the queue can
//     never fill with unsignaled WRs alone.
//   - CongestionGate admits an RPC only when the send queue has room for its
//     whole compound (BINDs, the SEND, and the LOCAL_INVs its reply may need);
//     other RPCs wait in FIFO order and are admitted, without overtaking, as
//     send completions free room.
//   - Receives keeps the receive queue stocked: every receive completion
//     consumes a posted receive, and reposting happens in batches, or at once
//     when fewer receives are posted than credits are granted.
//
// Wired together in a transport: the gate's capacity is the ring's depth.
// Before an RPC is marshaled it needs a credit (Credits.TryAcquire) and
// admission for its compound (CongestionGate.Admit). Its chain, and later
// its LOCAL_INVs, take wrids from SendContextRing.Reserve, which always has
// room for what the gate admitted. Each send completion goes to
// SendContextRing.Complete, whose count of retired WRs goes to
// CongestionGate.Free, together with any admitted room the RPC did not use.
// Each receive completion goes to Receives.Consume; each reply's credit
// value goes to Credits.Grant and Receives.SetCredits; and Receives.Need
// says how many receives to post. On reconnect, after the old queue pair is
// drained: Credits.Reset, SendContextRing.Flush, CongestionGate.Reset and
// Receives.Reset.
//
// None of the types is safe for concurrent use; the transport serializes
// calls, typically under the mutex that also guards its posting.
package flowctl
