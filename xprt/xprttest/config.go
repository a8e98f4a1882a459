package xprttest

import (
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/nfsrdma/nfsrdma/rpcrdma"
	"github.com/nfsrdma/nfsrdma/verbs"
)

// Defaults, as knfsd has them.
const (
	// DefaultCredits is the credit grant of every reply (knfsd: 64).
	DefaultCredits = 64
	// DefaultInline is the inline size the server advertises and uses in
	// both directions (knfsd: 4096).
	DefaultInline = 4096
)

// Limits of one connection's queues.
const (
	// maxReceives caps the receives posted per connection: a grant larger
	// than this (tests set 100000 to see the client clamp it) is not backed
	// by receives, which a client that honours its own slot limit never
	// notices.
	maxReceives = 1024
	// extraReceives are posted beyond the grant so that a client exceeding
	// its credits is seen and counted rather than failed with RNR at once.
	extraReceives = 32
	// sendQueueDepth is the send-queue depth in WRs; a call's largest
	// compound (every Write chunk segment, the Reply chunk, two Sends) fits
	// many times over.
	sendQueueDepth = 4096
	// abandonAfter is how long a teardown waits for the completions of the
	// calls in progress (the flushes come at once unless a test withholds
	// them).
	abandonAfter = 2 * time.Second
)

// ReplyChunkPolicy says when the server uses an offered Reply chunk.
type ReplyChunkPolicy int

const (
	// ReplyChunkWhenNeeded uses the Reply chunk only for a reply that does
	// not fit inline (RFC 8166 §3.5.3 lets the responder choose).
	ReplyChunkWhenNeeded ReplyChunkPolicy = iota
	// ReplyChunkAlways puts the whole reply, a DDP-eligible result
	// included, in the Reply chunk whenever one is offered, and answers
	// RDMA_NOMSG: what knfsd does (measured on Linux 6.1). An
	// offered Write chunk is then returned unused.
	ReplyChunkAlways
)

// Config configures a Server. The zero value of each field has the
// documented default.
type Config struct {
	// Fabric is the verbs implementation, a *sim.Fabric in tests (one that
	// runs by itself, not sim.Manual). Required.
	Fabric verbs.Fabric
	// Addr is the listen address; port 0 picks a free port. Default
	// 127.0.0.1:0 (addresses on the simulated fabric are only names).
	Addr netip.AddrPort
	// Credits is the credit grant in every reply (RFC 8166 §3.3); default
	// DefaultCredits. Set GrantZeroCredits to grant 0.
	Credits uint32
	// GrantZeroCredits makes every reply grant 0 credits, to see the client
	// clamp the grant to 1.
	GrantZeroCredits bool
	// Inline is the inline size in bytes: the server's receive buffers, the
	// largest Send it posts (further limited by the client's advertised
	// receive size), and the sizes in its RFC 8797 private data. It must be
	// a multiple of 1024 in [1024, 256 KiB]; default DefaultInline.
	Inline int
	// NoPrivateData makes the server accept with no private data at all
	// (the client must then assume 1024-byte inline sizes, RFC 8797 §5).
	NoPrivateData bool
	// ReplyChunk says when an offered Reply chunk is used.
	ReplyChunk ReplyChunkPolicy
	// Receives is the number of receives posted per connection; default
	// max(grant, 1) + 32, at most 1024 + 32.
	Receives int
	// Handler answers the calls; default NullHandler().
	Handler Handler
	// Misbehave selects calls to misbehave on and how.
	Misbehave Misbehavior
	// Logger receives the server's events; nil discards them.
	Logger *slog.Logger
	// Observe, when set, sees every decoded call header (on the calls'
	// goroutines, concurrently): tests read the chunk segments — rkeys,
	// lengths, addresses — the client offered.
	Observe func(CallInfo, *rpcrdma.Header)
}

func (c Config) withDefaults() (Config, error) {
	if c.Fabric == nil {
		return c, fmt.Errorf("xprttest: Config.Fabric is nil")
	}
	if !c.Addr.IsValid() {
		c.Addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), 0)
	}
	if c.Credits == 0 {
		c.Credits = DefaultCredits
	}
	if c.GrantZeroCredits {
		c.Credits = 0
	}
	if c.Inline == 0 {
		c.Inline = DefaultInline
	}
	if c.Inline < rpcrdma.DefaultInlineSize || c.Inline > rpcrdma.MaxInlineSize || c.Inline%1024 != 0 {
		return c, fmt.Errorf("xprttest: inline size %d is not a multiple of 1024 in [%d, %d]",
			c.Inline, rpcrdma.DefaultInlineSize, rpcrdma.MaxInlineSize)
	}
	if c.Receives == 0 {
		c.Receives = int(min(max(c.Credits, 1), maxReceives)) + extraReceives
	}
	if c.Receives < 1 || c.Receives > maxReceives+extraReceives {
		return c, fmt.Errorf("xprttest: %d receives not in [1, %d]", c.Receives, maxReceives+extraReceives)
	}
	if c.Handler == nil {
		c.Handler = NullHandler()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// CallInfo describes a call for Misbehavior.Select.
type CallInfo struct {
	// Seq numbers the calls the server received, from 1, in arrival order
	// over all connections (calls with undecodable headers included).
	Seq uint64
	// ConnSeq numbers the calls of this connection, from 1.
	ConnSeq uint64
	// XID is the transport header's xid.
	XID uint32
	// Prog, Vers and Proc are the RPC call's (zero when the call message
	// could not be assembled or decoded).
	Prog, Vers, Proc uint32
}

// Misbehavior is what the server does wrong, to the calls it selects. The
// zero value behaves.
type Misbehavior struct {
	// OnCall selects only the n-th call the server receives (CallInfo.Seq);
	// 0 selects every call. Ignored when Select is set.
	OnCall uint64
	// Select, when set, decides which calls misbehave. It is called on the
	// calls' goroutines, concurrently.
	Select func(CallInfo) bool

	// Delay holds the reply (its RDMA WRITEs and Send) back this long.
	Delay time.Duration
	// Drop never answers: no RDMA WRITE, no Send. The call keeps its credit;
	// the client must time out.
	Drop bool
	// Disconnect drops the connection instead of answering.
	Disconnect bool
	// Error answers with RDMA_ERROR carrying this code instead of serving
	// the call (ERR_VERS with low = high = 1). The handler is not called.
	Error rpcrdma.ErrorCode
	// TruncateHeader, when > 0, sends only the first TruncateHeader bytes of
	// the reply's transport header (and nothing after it) instead of the
	// reply. RDMA WRITEs of the reply happen as usual.
	TruncateHeader int
	// ReplyVersion, when not 0, is written as rdma_vers in the reply's
	// transport header.
	ReplyVersion uint32
	// UnknownXID first sends a copy of the reply whose xid (in the transport
	// header and in the RPC message) has its top bit flipped, as a plain
	// SEND; with ThenReply the real reply follows it.
	UnknownXID bool
	ThenReply  bool
	// InvalidateUnknownXID sends the UnknownXID copy as a Send With
	// Invalidate of the call's last distinct rkey (after the reply's RDMA
	// WRITEs, and with ThenReply right before the real reply, so that the
	// client usually finds both in one poll): a peer invalidating a window
	// of a call it has not answered yet. Only with UnknownXID, and only for
	// a call with at least two distinct rkeys (the real reply then has no
	// Send With Invalidate of its own). Counted in Stats.ForeignInvalidates.
	InvalidateUnknownXID bool
	// DuplicateInvalidate follows a reply sent with Send With Invalidate
	// by a second Send With Invalidate of the same rkey, with the xid's
	// top bit flipped: the window is already invalid. Counted in
	// Stats.DuplicateInvalidates.
	DuplicateInvalidate bool
	// OverstateWrite adds this many bytes to the length returned for the
	// first segment of the first Write chunk: a length beyond what the
	// client offered.
	OverstateWrite uint32
	// SendWithInvUnasked uses Send With Invalidate by the one-rkey rule even
	// when the client's private data did not allow it.
	SendWithInvUnasked bool
	// LateWrite RDMA-WRITEs into the first segment of the first Write chunk
	// (or of the Reply chunk when there is no Write chunk) again after the
	// reply's Send completed and LateWriteDelay passed, with the rkey the
	// call offered. The client must have invalidated it by then: the write
	// fails with REM_ACCESS_ERR (the connection breaks) and the data the
	// client returned is unchanged. Stats.LateWrites* count the outcomes.
	LateWrite      bool
	LateWriteDelay time.Duration

	// StaleInvalidate sends the reply with Send With Invalidate naming an
	// rkey of an earlier call on this connection, one the client has
	// finished with (run the calls one at a time so that it has): a peer
	// that remembers rkeys. The client must reset the connection (a
	// foreign invalidation) and its device must survive it. Counted in
	// Stats.StaleInvalidates.
	StaleInvalidate bool
	// OutOfBounds, when > 0, accesses this many bytes just past the end of
	// the call's first chunk segment through the segment's own rkey
	// before replying: an RDMA WRITE past a Write or Reply chunk segment,
	// an RDMA READ past a Read chunk segment. The client's device must
	// refuse it (the connection breaks). Stats.OutOfBounds* count the
	// outcomes.
	OutOfBounds int

	// DisconnectAfter, when > 0, makes every connection disconnect when it
	// receives its (DisconnectAfter+1)-th call, instead of serving it. It
	// applies to all connections whatever OnCall and Select say.
	DisconnectAfter int
}

// applies reports whether the misbehaviour selects call.
func (m *Misbehavior) applies(ci CallInfo) bool {
	if m.Select != nil {
		return m.Select(ci)
	}
	return m.OnCall == 0 || m.OnCall == ci.Seq
}
