package xprt

//go:generate go run gencounters.go

import (
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
)

// counterInfo describes a counter: its field in Counters, its name in
// Counters.String (the mount helper's mountstats line) and what it counts.
type counterInfo struct{ field, name, doc string }

// counterTable is the one list of the transport's event counts. The
// constants that index them (ctrCalls...) and the fields of Counters are
// generated from it (go generate: counters_gen.go); String names them from
// it.
var counterTable = [numCounters]counterInfo{
	{"Calls", "calls", "RPCs started"},
	{"Sends", "sends", "SEND WRs posted (retransmissions included)"},
	{"SignaledSends", "signaled", "SEND WRs posted signaled (selective signaling: about one per half send queue)"},
	{"Receives", "recvs", "receive completions"},
	{"BadXIDs", "bad_xid", "replies matching no outstanding call"},
	{"MalformedReplies", "malformed", "transport headers that did not decode or did not match the call"},
	{"ReadChunks", "read_chunks", "calls that carried a Read chunk"},
	{"PositionZero", "pos0", "calls sent whole in a position-zero Read chunk (RDMA_NOMSG)"},
	{"WriteChunks", "write_chunks", "calls that offered a Write chunk"},
	{"ReplyChunks", "reply_chunks", "calls that offered a Reply chunk"},
	{"PullUpBytes", "pullup_bytes", "bytes copied into send buffers (inline pull-up)"},
	{"PullUps", "pullups", "inline pull-up copies"},
	{"Binds", "binds", "memory-window binds"},
	{"LocalInvalidations", "local_inv", "LOCAL_INV WRs posted"},
	{"RemoteInvalidations", "remote_inv", "windows invalidated by the server (Send With Invalidate)"},
	{"CongestionWaits", "congestion_waits", "calls that waited for send-queue room"},
	{"CreditWaits", "credit_waits", "calls that waited for a credit"},
	{"ReplyBeforeSend", "reply_before_send", "replies that arrived before their send completion"},
	{"Reconnects", "reconnects", "connections made after the first"},
	{"Retransmits", "retransmits", "calls sent again on a new connection"},
	{"Timeouts", "timeouts", "connection resets caused by a call's timeout"},
	{"RDMAErrors", "rdma_errors", "RDMA_ERROR replies"},
	{"ErrorCompletions", "error_completions", "work completions with an error status (flushes excluded)"},
	{"Disconnects", "disconnects", "connections lost or reset"},
	{"Credits", "credits", "the server's current grant (a gauge)"},
	{"MaxOutstanding", "max_outstanding", "the most calls outstanding at once"},
	{"WindowsReplaced", "windows_replaced", "windows destroyed after an error (state unknown)"},
	{"Registrations", "registrations", "per-I/O registrations (fallback mode)"},
	{"ReadyRegistrations", "ready_registrations", "segments exposed through a registration made ahead (fallback mode, Config.RegisterAhead)"},
	{"RegisteredAhead", "registered_ahead", "registrations made ahead and not yet taken, each an MR without remote access (a gauge)"},
	{"RegisterAheadRefused", "ahead_refused", "1 when the device cannot add remote access to an MR in place (ibv_rereg_mr): segments are registered at use"},
	{"ZeroCopyReads", "zero_copy_reads", "READ results placed straight into a borrowed buffer"},
	{"ZeroCopyWrites", "zero_copy_writes", "WRITE data read by the server straight from a borrowed buffer"},
	{"BusyPolls", "busy_polls", "spins on the receive CQ (Config.BusyPoll)"},
	{"BusyPollHits", "busy_poll_hits", "spins that found a completion"},
	{"OwnReplies", "own_replies", "calls whose caller reaped its reply itself (the rest are handed over by the reply loop)"},
	{"Abandoned", "abandoned", "posted calls without windows whose callers gave up (the reply is discarded)"},
	{"AbandonResets", "abandon_resets", "connections reset because a caller gave up on a call with windows exposed"},
	{"RetransmitResets", "retransmit_resets", "connections reset to retransmit an abandoned call's xid on a new one"},
	{"BudgetWaits", "budget_waits", "calls that waited for I/O buffers or windows"},
	{"PostFailures", "post_failures", "ibv_post_send failures (each resets the connection)"},
	{"Posts", "posts", "ibv_post_send calls for SEND and LOCAL_INV chains"},
	{"PostsCombined", "posts_combined", "chains handed to another goroutine's post, sent with its next batch"},
	{"ForeignInvalidations", "foreign_invalidations", "replies whose Send With Invalidate named an rkey not of their call"},
	{"DeviceRemovals", "device_removals", "RDMA CM DEVICE_REMOVAL events"},
	{"RefusedTransitions", "refused_transitions", "call-state transitions refused (bugs; logged)"},
	{"AsyncEvents", "async_events", "asynchronous device events seen"},
	{"DeviceMoves", "device_moves", "I/O buffers registered again on another device (after a removal or a route change)"},
	{"WindowsRetired", "windows_retired", "windows replaced after use (devices where a stale Send With Invalidate crashes the driver)"},
}

// String formats the counters as one line of "name value" pairs, in the
// order of counterTable.
func (c Counters) String() string {
	var b strings.Builder
	v := reflect.ValueOf(c)
	for i, e := range counterTable {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(e.name)
		b.WriteByte(' ')
		b.WriteString(strconv.FormatUint(v.Field(i).Uint(), 10))
	}
	return b.String()
}

// counters are the live counts, indexed by counter.
type counters [numCounters]atomic.Uint64

// snapshot returns the counts as Counters (whose fields are in the order of
// the counters).
func (ctr *counters) snapshot() Counters {
	var c Counters
	v := reflect.ValueOf(&c).Elem()
	for i := range ctr {
		v.Field(i).SetUint(ctr[i].Load())
	}
	return c
}
