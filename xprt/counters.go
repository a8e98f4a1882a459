package xprt

import (
	"fmt"
	"sync/atomic"
)

// Counters are the transport's event counts, in the spirit of the Linux
// client's xprt line in /proc/self/mountstats: operators see what the
// transport does, and the unusual paths are counted.
type Counters struct {
	Calls                uint64 // RPCs started
	Sends                uint64 // SEND WRs posted (retransmissions included)
	SignaledSends        uint64 // SEND WRs posted signaled (selective signaling: about one per half send queue)
	Receives             uint64 // receive completions
	BadXIDs              uint64 // replies matching no outstanding call
	MalformedReplies     uint64 // transport headers that did not decode or did not match the call
	ReadChunks           uint64 // calls that carried a Read chunk
	PositionZero         uint64 // calls sent whole in a position-zero Read chunk (RDMA_NOMSG)
	WriteChunks          uint64 // calls that offered a Write chunk
	ReplyChunks          uint64 // calls that offered a Reply chunk
	PullUpBytes          uint64 // bytes copied into send buffers (inline pull-up)
	PullUps              uint64 // inline pull-up copies
	Binds                uint64 // memory-window binds
	LocalInvalidations   uint64 // LOCAL_INV WRs posted
	RemoteInvalidations  uint64 // windows invalidated by the server (Send With Invalidate)
	CongestionWaits      uint64 // calls that waited for send-queue room
	CreditWaits          uint64 // calls that waited for a credit
	ReplyBeforeSend      uint64 // replies that arrived before their send completion
	Reconnects           uint64 // connections made after the first
	Retransmits          uint64 // calls sent again on a new connection
	Timeouts             uint64 // connection resets caused by a call's timeout
	RDMAErrors           uint64 // RDMA_ERROR replies
	ErrorCompletions     uint64 // work completions with an error status (flushes excluded)
	Disconnects          uint64 // connections lost or reset
	Credits              uint64 // the server's current grant (a gauge)
	MaxOutstanding       uint64 // the most calls outstanding at once
	WindowsReplaced      uint64 // windows destroyed after an error (state unknown)
	Registrations        uint64 // per-I/O registrations (fallback mode)
	ZeroCopyReads        uint64 // READ results placed straight into a borrowed buffer
	ZeroCopyWrites       uint64 // WRITE data read by the server straight from a borrowed buffer
	BusyPolls            uint64 // spins on the receive CQ (Config.BusyPoll)
	BusyPollHits         uint64 // spins that found a completion
	Abandoned            uint64 // posted calls without windows whose callers gave up (the reply is discarded)
	AbandonResets        uint64 // connections reset because a caller gave up on a call with windows exposed
	RetransmitResets     uint64 // connections reset to retransmit an abandoned call's xid on a new one
	BudgetWaits          uint64 // calls that waited for I/O buffers or windows
	PostFailures         uint64 // ibv_post_send failures (each resets the connection)
	ForeignInvalidations uint64 // replies whose Send With Invalidate named an rkey not of their call
	DeviceRemovals       uint64 // RDMA CM DEVICE_REMOVAL events
	RefusedTransitions   uint64 // call-state transitions refused (bugs; logged)
	AsyncEvents          uint64 // asynchronous device events seen
}

// String formats the counters as one line.
func (c Counters) String() string {
	return fmt.Sprintf("calls %d sends %d signaled %d recvs %d bad_xid %d malformed %d read_chunks %d pos0 %d write_chunks %d reply_chunks %d "+
		"pullups %d (%d bytes) binds %d local_inv %d remote_inv %d congestion_waits %d credit_waits %d reply_before_send %d "+
		"reconnects %d retransmits %d timeouts %d rdma_errors %d error_completions %d disconnects %d credits %d max_outstanding %d "+
		"windows_replaced %d registrations %d zero_copy_reads %d zero_copy_writes %d busy_polls %d busy_poll_hits %d "+
		"abandoned %d abandon_resets %d retransmit_resets %d budget_waits %d post_failures %d foreign_invalidations %d device_removals %d refused_transitions %d async_events %d",
		c.Calls, c.Sends, c.SignaledSends, c.Receives, c.BadXIDs, c.MalformedReplies, c.ReadChunks, c.PositionZero, c.WriteChunks, c.ReplyChunks,
		c.PullUps, c.PullUpBytes, c.Binds, c.LocalInvalidations, c.RemoteInvalidations, c.CongestionWaits, c.CreditWaits, c.ReplyBeforeSend,
		c.Reconnects, c.Retransmits, c.Timeouts, c.RDMAErrors, c.ErrorCompletions, c.Disconnects, c.Credits, c.MaxOutstanding,
		c.WindowsReplaced, c.Registrations, c.ZeroCopyReads, c.ZeroCopyWrites, c.BusyPolls, c.BusyPollHits,
		c.Abandoned, c.AbandonResets, c.RetransmitResets, c.BudgetWaits, c.PostFailures, c.ForeignInvalidations, c.DeviceRemovals, c.RefusedTransitions, c.AsyncEvents)
}

type counters struct {
	calls, sends, signaled, receives, badXIDs, malformed, readChunks, pos0, writeChunks, replyChunks        atomic.Uint64
	pullUps, pullUpBytes, congestionWaits, creditWaits, replyBeforeSend                                     atomic.Uint64
	reconnects, retransmits, timeouts, rdmaErrors, errorCompletions, disconnects, credits, maxOut, zeroCopy atomic.Uint64
	zeroCopyWrites, busyPolls, busyPollHits                                                                 atomic.Uint64
	abandoned, abandonResets, retransmitResets, budgetWaits, postFailures, foreignInvalidations             atomic.Uint64
	deviceRemovals, refusedTransitions, asyncEvents                                                         atomic.Uint64
}
