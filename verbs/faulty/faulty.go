// Package faulty is a verbs.Fabric decorator that injects faults on
// command into the connections made through it: it wraps a real fabric
// (verbs/ibv) or a simulated one and, when told, moves the queue pairs of
// its connections to the error state, or makes the next posts of send work
// requests fail before they reach the device, as ibv_post_send does when
// the provider refuses a chain.
//
// Only the client side is decorated: Resolve returns endpoints whose QPs can
// be broken; devices, completion queues, listeners and everything else are
// the wrapped fabric's own, so the transport sees the same device
// capabilities (async events, busy polling) as without the decorator.
package faulty

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"syscall"

	"github.com/nfsrdma/nfsrdma/verbs"
)

// ErrInjected is the error of an injected post failure. It wraps ENOMEM,
// the errno providers return for a send queue they cannot take the chain
// into.
var ErrInjected = fmt.Errorf("faulty: injected post failure: %w", syscall.ENOMEM)

// Fabric decorates a verbs.Fabric with fault injection.
type Fabric struct {
	verbs.Fabric

	mu     sync.Mutex
	qps    map[*QP]struct{} // live QPs made through Resolve'd endpoints
	fails  []postFault      // armed post failures, oldest first
	stats  Stats
	onPost func([]verbs.SendWR)
}

// Stats counts what the decorator did.
type Stats struct {
	QPs         int // QPs created through the decorator
	QPsBroken   int // QPs moved to the error state by BreakQPs
	PostsFailed int // PostSend calls failed by an armed fault
	Posts       int // PostSend calls that reached the wrapped QP
}

type postFault struct {
	match func([]verbs.SendWR) bool
	fired chan struct{}
}

// New returns a decorator of f.
func New(f verbs.Fabric) *Fabric {
	return &Fabric{Fabric: f, qps: map[*QP]struct{}{}}
}

// Stats returns the decorator's counts.
func (f *Fabric) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

// LiveQPs returns how many QPs made through the decorator are not closed.
func (f *Fabric) LiveQPs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.qps)
}

// BreakQPs moves every live QP made through the decorator to the error
// state (ibv_modify_qp to ERR), as a fatal local error would: outstanding
// work requests flush and the connection is lost from the client's side
// while the peer's QP stays up. It returns how many QPs it broke.
func (f *Fabric) BreakQPs() (int, error) {
	f.mu.Lock()
	qps := make([]*QP, 0, len(f.qps))
	for q := range f.qps {
		qps = append(qps, q)
	}
	f.mu.Unlock()
	var errs []error
	n := 0
	for _, q := range qps {
		if err := q.QP.SetError(); err != nil {
			errs = append(errs, fmt.Errorf("QP %d: %w", q.Num(), err))
			continue
		}
		n++
	}
	f.mu.Lock()
	f.stats.QPsBroken += n
	f.mu.Unlock()
	return n, errors.Join(errs...)
}

// FailPostSend arms a fault: the next PostSend whose chain match accepts
// (any chain when match is nil) fails with ErrInjected and posts nothing.
// The returned channel is closed when the fault has fired. Armed faults
// fire in the order they were armed.
func (f *Fabric) FailPostSend(match func([]verbs.SendWR) bool) <-chan struct{} {
	pf := postFault{match: match, fired: make(chan struct{})}
	f.mu.Lock()
	f.fails = append(f.fails, pf)
	f.mu.Unlock()
	return pf.fired
}

// OnPost sets a function that sees every chain a decorated QP passes on
// to the wrapped QP, in the goroutine posting it, right before the post
// (nil: none). A test records the order in which work requests reach the
// device with it, or holds a post to widen a race window.
func (f *Fabric) OnPost(fn func(wrs []verbs.SendWR)) {
	f.mu.Lock()
	f.onPost = fn
	f.mu.Unlock()
}

// Disarm drops the armed post failures that have not fired and returns how
// many there were.
func (f *Fabric) Disarm() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.fails)
	f.fails = nil
	return n
}

// HasOpcode matches a chain holding a work request of opcode op (for
// FailPostSend).
func HasOpcode(op verbs.Opcode) func([]verbs.SendWR) bool {
	return func(wrs []verbs.SendWR) bool {
		for i := range wrs {
			if wrs[i].Opcode == op {
				return true
			}
		}
		return false
	}
}

// Resolve resolves through the wrapped fabric; the endpoint's QP is one
// the decorator can break.
func (f *Fabric) Resolve(ctx context.Context, addr netip.AddrPort) (verbs.Endpoint, error) {
	ep, err := f.Fabric.Resolve(ctx, addr)
	if err != nil {
		return nil, err
	}
	return &endpoint{Endpoint: ep, f: f}, nil
}

type endpoint struct {
	verbs.Endpoint
	f *Fabric
}

func (ep *endpoint) CreateQP(pd verbs.PD, cfg verbs.QPConfig) (verbs.QP, error) {
	qp, err := ep.Endpoint.CreateQP(pd, cfg)
	if err != nil {
		return nil, err
	}
	q := &QP{QP: qp, f: ep.f}
	ep.f.mu.Lock()
	ep.f.qps[q] = struct{}{}
	ep.f.stats.QPs++
	ep.f.mu.Unlock()
	return q, nil
}

// QP is a queue pair made through the decorator.
type QP struct {
	verbs.QP
	f *Fabric
}

// PostSend posts through the wrapped QP unless an armed fault matches the
// chain: then nothing is posted and the error is ErrInjected with bad 0.
func (q *QP) PostSend(wrs []verbs.SendWR) (int, error) {
	f := q.f
	f.mu.Lock()
	for i, pf := range f.fails {
		if pf.match == nil || pf.match(wrs) {
			f.fails = append(f.fails[:i:i], f.fails[i+1:]...)
			f.stats.PostsFailed++
			f.mu.Unlock()
			close(pf.fired)
			return 0, ErrInjected
		}
	}
	f.stats.Posts++
	fn := f.onPost
	f.mu.Unlock()
	if fn != nil {
		fn(wrs)
	}
	return q.QP.PostSend(wrs)
}

// Close closes the wrapped QP and forgets it.
func (q *QP) Close() error {
	q.f.mu.Lock()
	delete(q.f.qps, q)
	q.f.mu.Unlock()
	return q.QP.Close()
}
