package xprttest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/nfsrdma/nfsrdma/sunrpc/sunrpctest"
	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
)

// Stats counts what the server did. Counters are over the server's life,
// all connections together.
type Stats struct {
	Connections uint64 // connections accepted
	Disconnects uint64 // connections torn down, by either side

	Calls   uint64 // receives that carried a message (decodable or not)
	Replies uint64 // RDMA_MSG and RDMA_NOMSG replies sent (not counting UnknownXID copies)
	// RDMAErrors counts RDMA_ERROR replies sent (ERR_CHUNK and ERR_VERS),
	// for malformed calls and by Misbehavior.Error.
	RDMAErrors uint64
	// Malformed counts calls whose transport header or chunk lists could
	// not be used.
	Malformed uint64
	// Dropped counts calls never answered: Misbehavior.Drop, a handler that
	// returned nil, a header too short to answer.
	Dropped uint64

	ReadChunkBytes    uint64 // bytes pulled with RDMA READ from Read chunks
	WriteChunkBytes   uint64 // bytes pushed with RDMA WRITE into Write chunks
	ReplyChunkBytes   uint64 // bytes pushed with RDMA WRITE into Reply chunks
	ReplyChunkReplies uint64 // replies sent as RDMA_NOMSG through the Reply chunk
	SendWithInv       uint64 // replies sent with SEND_WITH_INV

	// MaxOutstanding is the most calls outstanding at once on one
	// connection: received and not yet answered (a dropped call stays
	// outstanding).
	MaxOutstanding uint64
	// OverCredit counts calls that arrived while their connection already
	// had as many calls outstanding as granted (1 before the connection's
	// first reply, then max(Credits, 1)): a client bug.
	OverCredit uint64

	// Misbehaviour outcomes.
	UnknownXIDReplies uint64 // replies sent with a flipped xid
	LateWrites        uint64 // late RDMA WRITEs attempted
	LateWritesFailed  uint64 // ... that failed at the device (the rkey was invalid: correct)
	LateWritesLanded  uint64 // ... that succeeded (the rkey was still valid: a client bug)
	StaleInvalidates  uint64 // replies sent with Send With Invalidate of an earlier call's rkey
	// ForeignInvalidates counts Send With Invalidate with an unknown xid
	// naming a window of a call not yet answered (InvalidateUnknownXID).
	ForeignInvalidates uint64
	// DuplicateInvalidates counts second Send With Invalidates of a
	// reply's rkey (DuplicateInvalidate).
	DuplicateInvalidates uint64
	OutOfBoundsTried     uint64 // accesses past a segment's end through its rkey
	OutOfBoundsLanded    uint64 // ... that succeeded (the device let the peer outside the segment)
}

// stats are the live counters behind Stats.
type stats struct {
	connections, disconnects                     atomic.Uint64
	calls, replies, rdmaErrors, malformed        atomic.Uint64
	dropped                                      atomic.Uint64
	readBytes, writeBytes, replyBytes            atomic.Uint64
	replyChunkReplies, sendWithInv               atomic.Uint64
	maxOutstanding, overCredit                   atomic.Uint64
	unknownXID, lateWrites, lateFailed, lateLand atomic.Uint64
	staleInv, oobTried, oobLanded                atomic.Uint64
	foreignInv, dupInv                           atomic.Uint64
}

func (s *stats) snapshot() Stats {
	return Stats{
		Connections: s.connections.Load(), Disconnects: s.disconnects.Load(),
		Calls: s.calls.Load(), Replies: s.replies.Load(), RDMAErrors: s.rdmaErrors.Load(),
		Malformed: s.malformed.Load(), Dropped: s.dropped.Load(),
		ReadChunkBytes: s.readBytes.Load(), WriteChunkBytes: s.writeBytes.Load(),
		ReplyChunkBytes: s.replyBytes.Load(), ReplyChunkReplies: s.replyChunkReplies.Load(),
		SendWithInv: s.sendWithInv.Load(), MaxOutstanding: s.maxOutstanding.Load(),
		OverCredit: s.overCredit.Load(), UnknownXIDReplies: s.unknownXID.Load(),
		LateWrites: s.lateWrites.Load(), LateWritesFailed: s.lateFailed.Load(), LateWritesLanded: s.lateLand.Load(),
		StaleInvalidates: s.staleInv.Load(), ForeignInvalidates: s.foreignInv.Load(), DuplicateInvalidates: s.dupInv.Load(), OutOfBoundsTried: s.oobTried.Load(), OutOfBoundsLanded: s.oobLanded.Load(),
	}
}

// noteOutstanding raises maxOutstanding to n.
func (s *stats) noteOutstanding(n uint64) {
	for {
		cur := s.maxOutstanding.Load()
		if n <= cur || s.maxOutstanding.CompareAndSwap(cur, n) {
			return
		}
	}
}

// Server is an RPC-over-RDMA version 1 server on a verbs fabric.
type Server struct {
	cfg Config
	log *slog.Logger
	ln  verbs.Listener
	st  stats
	seq atomic.Uint64 // calls received, for CallInfo.Seq

	ctx      context.Context
	cancel   context.CancelFunc
	acceptWG sync.WaitGroup
	connWG   sync.WaitGroup

	busy sunrpctest.InFlight // calls being served, for WaitIdle

	mu        sync.Mutex
	misbehave Misbehavior
	conns     map[*conn]struct{}
	nconns    uint64
	closed    bool
	closeOnce sync.Once
	closeErr  error
}

// Start listens on cfg.Addr and serves each connection on its own
// goroutines until Close.
func Start(cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ln, err := cfg.Fabric.Listen(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("xprttest: listen on %s: %w", cfg.Addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, log: cfg.Logger, ln: ln, ctx: ctx, cancel: cancel,
		misbehave: cfg.Misbehave, conns: make(map[*conn]struct{})}
	s.acceptWG.Add(1)
	go s.acceptLoop()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() netip.AddrPort { return s.ln.Addr() }

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats { return s.st.snapshot() }

// SetMisbehavior replaces the misbehaviour for calls received from now on.
func (s *Server) SetMisbehavior(m Misbehavior) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.misbehave = m
}

func (s *Server) misbehavior() Misbehavior {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.misbehave
}

// QPs returns the server-side QPs of the live connections, for fault
// injection (nil entries are left out: the fabric is not verbs/sim).
func (s *Server) QPs() []*sim.QP {
	s.mu.Lock()
	defer s.mu.Unlock()
	var qps []*sim.QP
	for c := range s.conns {
		if q, ok := c.qp.(*sim.QP); ok {
			qps = append(qps, q)
		}
	}
	return qps
}

// WaitIdle waits until every call whose receive the server has reaped so
// far has been served to the end: answered (its reply's Send completed, a
// late write included), dropped, or given up by a failed connection. A
// client that got the reply to its last call knows that every call it sent
// before is reaped (RC delivers in order), so WaitIdle then covers them
// all: their outcomes are in Stats. It returns ctx's error if ctx ends
// first (a handler still blocked, for one).
func (s *Server) WaitIdle(ctx context.Context) error { return s.busy.Wait(ctx) }

// Disconnect drops every live connection from the server's side.
func (s *Server) Disconnect() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.fail(errServerDisconnect)
	}
}

// Close stops listening, disconnects every connection and waits until all
// of the server's goroutines have ended and its resources are released.
// It is idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		err := s.ln.Close()
		s.acceptWG.Wait()
		s.mu.Lock()
		s.closed = true
		for c := range s.conns {
			c.fail(errServerClosed)
		}
		s.mu.Unlock()
		s.connWG.Wait()
		if errors.Is(err, verbs.ErrClosed) {
			err = nil
		}
		s.closeErr = err
	})
	return s.closeErr
}

var (
	errServerClosed     = errors.New("xprttest: server closed")
	errServerDisconnect = errors.New("xprttest: disconnected by the server")
)

func (s *Server) acceptLoop() {
	defer s.acceptWG.Done()
	for {
		ep, err := s.ln.Accept(s.ctx)
		if err != nil {
			if s.ctx.Err() == nil {
				s.log.Error("accept", "err", err)
			}
			return
		}
		s.connWG.Add(1)
		go s.serveConn(ep)
	}
}

// serveConn sets up a connection, serves it until it fails, and tears it
// down.
func (s *Server) serveConn(ep verbs.Endpoint) {
	defer s.connWG.Done()
	c, err := newConn(s, ep)
	if err != nil {
		s.log.Warn("connection setup", "peer", ep.RemoteAddr(), "err", err)
		return
	}
	// Registered before the accept, so that QPs lists it by the time the
	// client's connect returns.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.ep.Reject(nil)
		c.release()
		return
	}
	s.conns[c] = struct{}{}
	s.nconns++
	c.connSeq = s.nconns
	s.mu.Unlock()
	if err := c.accept(); err != nil {
		s.log.Warn("accept", "peer", ep.RemoteAddr(), "err", err)
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.release()
		return
	}
	s.st.connections.Add(1)
	c.run()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.st.disconnects.Add(1)
}

// Access is a rogue RDMA access from the server's side, on any fabric: on
// one live connection (the most recent, when several are), it RDMA-WRITEs
// n bytes of LateWriteByte (op verbs.OpRDMAWrite) or RDMA-READs n bytes
// (verbs.OpRDMARead) at addr with rkey, and returns the completion's
// status: success means the client's device let the access land. A
// failed access breaks that connection, as any error completion does.
// ErrNoConnection when none is live.
func (s *Server) Access(op verbs.Opcode, addr uint64, rkey uint32, n int) (verbs.Status, error) {
	s.mu.Lock()
	var c *conn
	for cc := range s.conns {
		if c == nil || cc.connSeq > c.connSeq {
			c = cc
		}
	}
	s.mu.Unlock()
	if c == nil {
		return 0, ErrNoConnection
	}
	buf, err := newScratch(c.pd, n)
	if err != nil {
		return 0, err
	}
	defer buf.close()
	for i := range buf.bytes {
		buf.bytes[i] = LateWriteByte
	}
	ch, posted, err := c.post([]verbs.SendWR{{Opcode: op, SGL: []verbs.SGE{buf.sge(0, n)}, RemoteAddr: addr, RKey: rkey}})
	if err != nil {
		return 0, err
	}
	wcs, err := c.complete(ch, posted)
	if len(wcs) == 0 {
		if err == nil {
			err = ErrNoConnection
		}
		return 0, err
	}
	if wc := wcs[0]; wc.Status != verbs.StatusSuccess && wc.Status != verbs.StatusWRFlushErr {
		c.fail(&verbs.CompletionError{Completion: wc, Opcode: op})
	}
	return wcs[0].Status, nil
}

// ErrNoConnection is returned by Access when no connection is live.
var ErrNoConnection = errors.New("xprttest: no live connection")
