package xprt

import (
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
)

// Counters are the transport's event counts, in the spirit of the Linux
// client's xprt line in /proc/self/mountstats: operators see what the
// transport does, and the unusual paths are counted.
type Counters struct {
	Calls                uint64 `counter:"calls"`                 // RPCs started
	Sends                uint64 `counter:"sends"`                 // SEND WRs posted (retransmissions included)
	SignaledSends        uint64 `counter:"signaled"`              // SEND WRs posted signaled (selective signaling: about one per half send queue)
	Receives             uint64 `counter:"recvs"`                 // receive completions
	BadXIDs              uint64 `counter:"bad_xid"`               // replies matching no outstanding call
	MalformedReplies     uint64 `counter:"malformed"`             // transport headers that did not decode or did not match the call
	ReadChunks           uint64 `counter:"read_chunks"`           // calls that carried a Read chunk
	PositionZero         uint64 `counter:"pos0"`                  // calls sent whole in a position-zero Read chunk (RDMA_NOMSG)
	WriteChunks          uint64 `counter:"write_chunks"`          // calls that offered a Write chunk
	ReplyChunks          uint64 `counter:"reply_chunks"`          // calls that offered a Reply chunk
	PullUpBytes          uint64 `counter:"pullup_bytes"`          // bytes copied into send buffers (inline pull-up)
	PullUps              uint64 `counter:"pullups"`               // inline pull-up copies
	Binds                uint64 `counter:"binds"`                 // memory-window binds
	LocalInvalidations   uint64 `counter:"local_inv"`             // LOCAL_INV WRs posted
	RemoteInvalidations  uint64 `counter:"remote_inv"`            // windows invalidated by the server (Send With Invalidate)
	CongestionWaits      uint64 `counter:"congestion_waits"`      // calls that waited for send-queue room
	CreditWaits          uint64 `counter:"credit_waits"`          // calls that waited for a credit
	ReplyBeforeSend      uint64 `counter:"reply_before_send"`     // replies that arrived before their send completion
	Reconnects           uint64 `counter:"reconnects"`            // connections made after the first
	Retransmits          uint64 `counter:"retransmits"`           // calls sent again on a new connection
	Timeouts             uint64 `counter:"timeouts"`              // connection resets caused by a call's timeout
	RDMAErrors           uint64 `counter:"rdma_errors"`           // RDMA_ERROR replies
	ErrorCompletions     uint64 `counter:"error_completions"`     // work completions with an error status (flushes excluded)
	Disconnects          uint64 `counter:"disconnects"`           // connections lost or reset
	Credits              uint64 `counter:"credits"`               // the server's current grant (a gauge)
	MaxOutstanding       uint64 `counter:"max_outstanding"`       // the most calls outstanding at once
	WindowsReplaced      uint64 `counter:"windows_replaced"`      // windows destroyed after an error (state unknown)
	Registrations        uint64 `counter:"registrations"`         // per-I/O registrations (fallback mode)
	ReadyRegistrations   uint64 `counter:"ready_registrations"`   // segments exposed through a registration made ahead (fallback mode, Config.RegisterAhead)
	RegisteredAhead      uint64 `counter:"registered_ahead"`      // registrations made ahead and not yet taken, each an MR without remote access (a gauge)
	RegisterAheadRefused uint64 `counter:"ahead_refused"`         // 1 when the device cannot add remote access to an MR in place (ibv_rereg_mr): segments are registered at use
	ZeroCopyReads        uint64 `counter:"zero_copy_reads"`       // READ results placed straight into a borrowed buffer
	ZeroCopyWrites       uint64 `counter:"zero_copy_writes"`      // WRITE data read by the server straight from a borrowed buffer
	BusyPolls            uint64 `counter:"busy_polls"`            // spins on the receive CQ (Config.BusyPoll)
	BusyPollHits         uint64 `counter:"busy_poll_hits"`        // spins that found a completion
	OwnReplies           uint64 `counter:"own_replies"`           // calls whose caller reaped its reply itself (the rest are handed over by the reply loop)
	Abandoned            uint64 `counter:"abandoned"`             // posted calls without windows whose callers gave up (the reply is discarded)
	AbandonResets        uint64 `counter:"abandon_resets"`        // connections reset because a caller gave up on a call with windows exposed
	RetransmitResets     uint64 `counter:"retransmit_resets"`     // connections reset to retransmit an abandoned call's xid on a new one
	BudgetWaits          uint64 `counter:"budget_waits"`          // calls that waited for I/O buffers or windows
	PostFailures         uint64 `counter:"post_failures"`         // ibv_post_send failures (each resets the connection)
	Posts                uint64 `counter:"posts"`                 // ibv_post_send calls for SEND and LOCAL_INV chains
	PostsCombined        uint64 `counter:"posts_combined"`        // chains handed to another goroutine's post, sent with its next batch
	ForeignInvalidations uint64 `counter:"foreign_invalidations"` // replies whose Send With Invalidate named an rkey not of their call
	DeviceRemovals       uint64 `counter:"device_removals"`       // RDMA CM DEVICE_REMOVAL events
	RefusedTransitions   uint64 `counter:"refused_transitions"`   // call-state transitions refused (bugs; logged)
	AsyncEvents          uint64 `counter:"async_events"`          // asynchronous device events seen
	DeviceMoves          uint64 `counter:"device_moves"`          // I/O buffers registered again on another device (after a removal or a route change)
	WindowsRetired       uint64 `counter:"windows_retired"`       // windows replaced after use (devices where a stale Send With Invalidate crashes the driver)
}

// String formats the counters as one line of "name value" pairs, the
// names from the fields' counter tags.
func (c Counters) String() string {
	var b strings.Builder
	v := reflect.ValueOf(c)
	for i, f := range reflect.VisibleFields(v.Type()) {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s %d", f.Tag.Get("counter"), v.Field(i).Uint())
	}
	return b.String()
}

type counters struct {
	calls, sends, signaled, receives, badXIDs, malformed, readChunks, pos0, writeChunks, replyChunks        atomic.Uint64
	pullUps, pullUpBytes, congestionWaits, creditWaits, replyBeforeSend                                     atomic.Uint64
	reconnects, retransmits, timeouts, rdmaErrors, errorCompletions, disconnects, credits, maxOut, zeroCopy atomic.Uint64
	zeroCopyWrites, busyPolls, busyPollHits, ownReplies, readyRegistrations                                 atomic.Uint64
	abandoned, abandonResets, retransmitResets, budgetWaits, postFailures, foreignInvalidations             atomic.Uint64
	deviceRemovals, refusedTransitions, asyncEvents, deviceMoves                                            atomic.Uint64
	posts, postsCombined                                                                                    atomic.Uint64
}
