// Package rcpair builds a connected pair of reliable-connected queue pairs
// on any verbs.Fabric, and registered buffers for them: what the verbs
// conformance suite (verbs/verbstest), other packages' tests and the
// benchmarks share. It does not import package testing, so that programs
// (the bench binary) can use it.
package rcpair

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/nfsrdma/nfsrdma/verbs"
)

// PairConfig shapes a connected pair. Zero fields take defaults.
type PairConfig struct {
	SendDepth, RecvDepth int // per QP; default 16 each
	SendSGE, RecvSGE     int // default 4 each
	MaxInlineData        int
	// SendCQDepth and RecvCQDepth default to the queue depths: enough,
	// since a completion retires at least one WR that still holds its slot.
	SendCQDepth, RecvCQDepth int
	// ClientParam and ServerParam are the rdma_cm parameters of Connect and
	// Accept; nil means DefaultConnParam().
	ClientParam, ServerParam *verbs.ConnParam
	// ClientPD and ServerPD, when set, are used instead of a PD of the
	// pair's own (the pair does not close them): two connections sharing
	// a PD.
	ClientPD, ServerPD verbs.PD
}

// DefaultConnParam offers RDMA READs both ways (16 responder resources),
// six transport retries and no RNR retry, as the Linux NFS client does.
func DefaultConnParam() verbs.ConnParam {
	return verbs.ConnParam{ResponderResources: 16, InitiatorDepth: 16, RetryCount: 6}
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c PairConfig) WithDefaults() PairConfig {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.SendDepth, 16)
	def(&c.RecvDepth, 16)
	def(&c.SendSGE, 4)
	def(&c.RecvSGE, 4)
	def(&c.SendCQDepth, c.SendDepth)
	def(&c.RecvCQDepth, c.RecvDepth)
	if c.ClientParam == nil {
		p := DefaultConnParam()
		c.ClientParam = &p
	}
	if c.ServerParam == nil {
		p := DefaultConnParam()
		c.ServerParam = &p
	}
	return c
}

// Side is one end of a connected pair.
type Side struct {
	Endpoint       verbs.Endpoint
	PD             verbs.PD
	SendCQ, RecvCQ verbs.CQ
	QP             verbs.QP
	// PeerPrivateData is what the other side sent: the server's accept
	// data on the client, the client's request data on the server. rdma_cm
	// may pad it with zeros to the CM message's size.
	PeerPrivateData []byte
	ownPD           bool
}

// NewSide creates the PD (unless given), CQs and QP on an endpoint.
func NewSide(ep verbs.Endpoint, pd verbs.PD, cfg PairConfig) (*Side, error) {
	s := &Side{Endpoint: ep, PD: pd}
	var err error
	if s.PD == nil {
		if s.PD, err = ep.Device().AllocPD(); err != nil {
			return s, err
		}
		s.ownPD = true
	}
	if s.SendCQ, err = ep.Device().CreateCQ(cfg.SendCQDepth); err != nil {
		return s, err
	}
	if s.RecvCQ, err = ep.Device().CreateCQ(cfg.RecvCQDepth); err != nil {
		return s, err
	}
	s.QP, err = ep.CreateQP(s.PD, verbs.QPConfig{SendCQ: s.SendCQ, RecvCQ: s.RecvCQ,
		MaxSendWR: cfg.SendDepth, MaxRecvWR: cfg.RecvDepth, MaxSendSGE: cfg.SendSGE, MaxRecvSGE: cfg.RecvSGE,
		MaxInlineData: cfg.MaxInlineData})
	return s, err
}

// Close releases the side in reverse order: QP, CQs, PD (if its own),
// endpoint (which disconnects a live connection). It is idempotent.
func (s *Side) Close() error {
	if s == nil {
		return nil
	}
	var errs []error
	closeOne := func(c interface{ Close() error }) {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	if s.QP != nil {
		closeOne(s.QP)
	}
	if s.RecvCQ != nil {
		closeOne(s.RecvCQ)
	}
	if s.SendCQ != nil {
		closeOne(s.SendCQ)
	}
	if s.ownPD && s.PD != nil {
		closeOne(s.PD)
	}
	if s.Endpoint != nil {
		closeOne(s.Endpoint)
	}
	s.QP, s.RecvCQ, s.SendCQ, s.Endpoint = nil, nil, nil, nil
	if s.ownPD {
		s.PD = nil
	}
	return errors.Join(errs...)
}

// Pair is a connected client/server pair of RC QPs.
type Pair struct {
	Client, Server *Side
}

// Close closes the client side, then the server side.
func (p *Pair) Close() error {
	return errors.Join(p.Client.Close(), p.Server.Close())
}

// Connect builds a connected pair on f: a listener on listen, a client
// resolving connect (port 0: the listener's port) and connecting with
// cfg.ClientParam, the server accepting with cfg.ServerParam; each side
// with its PD, a send CQ, a receive CQ and its QP. The listener is closed
// before Connect returns; on error everything created is released.
func Connect(ctx context.Context, f verbs.Fabric, listen, connect netip.AddrPort, cfg PairConfig) (*Pair, error) {
	cfg = cfg.WithDefaults()
	l, err := f.Listen(listen)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	target := connect
	if target.Port() == 0 {
		target = netip.AddrPortFrom(connect.Addr(), l.Addr().Port())
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	type accepted struct {
		side *Side
		err  error
	}
	srv := make(chan accepted, 1)
	go func() {
		ep, err := l.Accept(ctx)
		if err != nil {
			srv <- accepted{err: fmt.Errorf("rcpair: listener accept: %w", err)}
			return
		}
		s, err := NewSide(ep, cfg.ServerPD, cfg)
		if err != nil {
			ep.Reject(nil)
			srv <- accepted{side: s, err: fmt.Errorf("rcpair: server side: %w", err)}
			return
		}
		s.PeerPrivateData = ep.PrivateData()
		if err := ep.Accept(ctx, *cfg.ServerParam); err != nil {
			srv <- accepted{side: s, err: fmt.Errorf("rcpair: accept: %w", err)}
			return
		}
		srv <- accepted{side: s}
	}()

	client, cerr := func() (*Side, error) {
		ep, err := f.Resolve(ctx, target)
		if err != nil {
			return nil, fmt.Errorf("rcpair: resolve: %w", err)
		}
		s, err := NewSide(ep, cfg.ClientPD, cfg)
		if err != nil {
			return s, fmt.Errorf("rcpair: client side: %w", err)
		}
		s.PeerPrivateData, err = ep.Connect(ctx, *cfg.ClientParam)
		if err != nil {
			return s, fmt.Errorf("rcpair: connect: %w", err)
		}
		return s, nil
	}()
	if cerr != nil {
		cancel()
	}
	a := <-srv
	if err := errors.Join(cerr, a.err); err != nil {
		return nil, errors.Join(err, client.Close(), a.side.Close())
	}
	return &Pair{Client: client, Server: a.side}, nil
}

// Buffer is registered memory from verbs.Map.
type Buffer struct {
	Mapping *verbs.Mapping
	MR      verbs.MR
}

// NewBuffer maps n bytes and registers them in pd with access.
func NewBuffer(pd verbs.PD, n int, access verbs.Access) (*Buffer, error) {
	m, err := verbs.Map(n)
	if err != nil {
		return nil, err
	}
	mr, err := pd.RegMR(m.Bytes()[:n], access)
	if err != nil {
		m.Close()
		return nil, err
	}
	return &Buffer{Mapping: m, MR: mr}, nil
}

// Bytes is the registered memory.
func (b *Buffer) Bytes() []byte { return b.MR.Bytes() }

// SGE is n bytes at off in the buffer.
func (b *Buffer) SGE(off uint64, n int) verbs.SGE {
	return verbs.SGE{MR: b.MR, Offset: off, Length: uint32(n)}
}

// Addr is the device address of the byte at off, for remote access.
func (b *Buffer) Addr(off uint64) uint64 { return b.MR.Addr() + off }

// Close deregisters the MR and unmaps the memory. It is idempotent.
func (b *Buffer) Close() error {
	if b.MR == nil {
		return nil
	}
	err := b.MR.Close()
	if err != nil {
		return err
	}
	b.MR = nil
	return b.Mapping.Close()
}

// Reap polls cq until it has n completions, waiting on the CQ (no
// spinning) in between, or until ctx is done (returning what it has).
func Reap(ctx context.Context, cq verbs.CQ, n int) ([]verbs.Completion, error) {
	wcs := make([]verbs.Completion, n)
	got := 0
	for got < n {
		k, err := cq.Poll(wcs[got:])
		if err != nil {
			return wcs[:got], err
		}
		got += k
		if got == n {
			break
		}
		if err := cq.Wait(ctx); err != nil {
			return wcs[:got], err
		}
	}
	return wcs, nil
}
