package frwr

import (
	"errors"
	"fmt"

	"github.com/nfsrdma/nfsrdma/verbs"
)

// MatchRemoteInvalidation is the reply handler's first step: it checks the
// receive completion of an RPC's reply for the server's Send With
// Invalidate (offered in the RFC 8797 §4 private data; the server
// invalidates at most one rkey per reply). If wc has WCWithInv and its InvalidatedRKey is the rkey of one
// of regs in StateBound, that registration becomes InvalidatedRemotely and
// MatchRemoteInvalidation returns true.
//
// A WCWithInv naming no rkey of regs (or arriving in register mode) is
// counted in UnmatchedRemoteInvalidations and reported with false: the
// transport treats it as a protocol error. The device did invalidate that
// rkey, so if it is another RPC's Bound window it is recorded as
// InvalidatedRemotely too: no LOCAL_INV will ever name it.
//
// Call it for every successful receive completion with WCWithInv, as soon
// as it is polled and whatever the message carries (regs nil when it
// answers no known RPC): an invalidation is recorded wherever it comes
// from, before any LOCAL_INV could name the same window.
func (r *Registry) MatchRemoteInvalidation(regs []*Registration, wc verbs.Completion) bool {
	if wc.Status != verbs.StatusSuccess || wc.Flags&verbs.WCWithInv == 0 {
		return false
	}
	rkey := wc.InvalidatedRKey
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	if r.mode == ModeWindows {
		for _, g := range regs {
			if g == nil || g.r != r || !g.inUse || g.w == nil || g.seg.Handle != rkey {
				continue
			}
			if g.state != StateBound {
				r.c.RefusedTransitions++ // matched twice, or after LOCAL_INV was posted
				return false
			}
			r.setStateLocked(g, StateInvalidatedRemotely)
			r.c.RemoteInvalidations++
			return true
		}
		if w := r.byIndex[rkey>>8]; w != nil && w.state == StateBound && w.reg.seg.Handle == rkey && w.mw.RKey() == rkey {
			r.setStateLocked(w.reg, StateInvalidatedRemotely)
		}
	}
	r.c.UnmatchedRemoteInvalidations++
	return false
}

// ValidWindows returns how many of regs are windows the peer may still
// reach and that only a LOCAL_INV (or ConnectionLost) can close: Bound,
// with their bind posted or about to be. A transport that is resetting its
// connection leaves an RPC with such windows to ConnectionLost rather than
// invalidating them or completing it. In register mode it is 0:
// deregistration in Release closes a segment on any connection.
func (r *Registry) ValidWindows(regs []*Registration) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.mode != ModeWindows {
		return 0
	}
	n := 0
	for _, g := range regs {
		if g != nil && g.r == r && g.inUse && g.w != nil && g.state == StateBound {
			n++
		}
	}
	return n
}

// AppendLocalInvalidations is the reply handler's second step: it appends
// to dst a LOCAL_INV WR (unsignaled, ID 0: the transport sets the IDs and
// signals the last) for each of regs still Bound, moves those to
// LocalInvPosted, and returns the extended slice. It never emits one for a
// registration already invalid or already being invalidated: a second
// LOCAL_INV of an rkey panics the rxe kernel driver, so such a request is
// skipped and counted in DoubleInvalidationsPrevented. A Bound
// registration whose bind was never posted gets no LOCAL_INV either (its
// window is not valid): it is counted in BindsNotPosted and stays Bound,
// so Release refuses it until the caller Aborts it. In register mode it
// appends nothing: deregistration in Release is the invalidation.
//
// The transport must post the chain and reap its completion before
// Release. If the post fails or a completion is in error, the windows'
// state is unknown: call ConnectionLost, not Release.
func (r *Registry) AppendLocalInvalidations(regs []*Registration, dst []verbs.SendWR) []verbs.SendWR {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.mode != ModeWindows {
		return dst
	}
	for _, g := range regs {
		if g == nil {
			continue
		}
		if g.r != r || !g.inUse {
			r.c.RefusedTransitions++
			continue
		}
		switch g.state {
		case StateBound:
			if g.w.mw.RKey() != g.seg.Handle {
				r.c.BindsNotPosted++
				continue
			}
			dst = append(dst, verbs.SendWR{Opcode: verbs.OpLocalInv, InvalidateRKey: g.seg.Handle})
			r.setStateLocked(g, StateLocalInvPosted)
			r.c.LocalInvalidations++
		case StateLocalInvPosted:
			r.c.DoubleInvalidationsPrevented++
		}
		// InvalidatedRemotely and Dead: nothing to invalidate.
	}
	return dst
}

// Release is the reply handler's last registration step, after the
// LOCAL_INV completions were reaped (or at once when nothing needed local
// invalidation). Windows in LocalInvPosted or InvalidatedRemotely become
// Free and return to the pool; Dead registrations (after ConnectionLost)
// are simply dropped; in register mode each segment's MR is deregistered.
// Each released entry of regs is set to nil (the Registration is reused).
//
// Release of a registration still Bound is refused with a
// *TransitionError, counted, and leaves that entry in place: releasing it
// would leave memory exposed to the peer. Entries that are not held from
// this registry give ErrNotOwned. The other entries are released.
func (r *Registry) Release(regs []*Registration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	var errs []error
	for i, g := range regs {
		if g == nil {
			continue
		}
		if g.r != r || !g.inUse {
			r.c.RefusedTransitions++
			errs = append(errs, fmt.Errorf("frwr: Release: %w", ErrNotOwned))
			continue
		}
		if err := r.releaseLocked(g); err != nil {
			errs = append(errs, err)
			continue
		}
		regs[i] = nil
	}
	return errors.Join(errs...)
}

// releaseLocked ends a registration: its window returns to the pool or
// its MR is deregistered, and it goes on the free list.
func (r *Registry) releaseLocked(g *Registration) error {
	switch g.state {
	case StateBound:
		r.c.RefusedTransitions++
		hint := "invalidate it first (AppendLocalInvalidations, then reap the completion)"
		if g.w != nil && g.w.mw.RKey() != g.seg.Handle {
			hint = "its bind was never posted: Abort it"
		}
		return &TransitionError{Op: "Release", State: g.state, RKey: g.seg.Handle, Hint: hint}
	case StateLocalInvPosted, StateInvalidatedRemotely:
		w := g.w
		r.setStateLocked(g, StateFree)
		if r.retire {
			r.retireWindowLocked(w)
		} else {
			r.putWindowLocked(w)
		}
	case StateRegistered:
		if err := g.mr.Close(); err != nil {
			return fmt.Errorf("frwr: deregistering segment rkey %#x: %w", g.seg.Handle, err)
		}
		r.c.Deregistrations++
		r.setStateLocked(g, StateFree)
	case StateDead:
	default:
		r.c.RefusedTransitions++
		return &TransitionError{Op: "Release", State: g.state, RKey: g.seg.Handle}
	}
	r.recycleLocked(g)
	return nil
}

// ConnectionLost handles an error completion or a lost connection: the QP
// is in the error state, so windows whose bind or LOCAL_INV may have been
// flushed have an unknown state. Call it once the QP is in the error state
// and its outstanding WRs have flushed (drained), and
// before the QP is closed (windows are freed before their QP, or rxe
// warns), with the transport's posting stopped: no BindWR or LOCAL_INV of
// a registration made before the call may be posted after it.
//
// The registry finds every affected registration itself, including those
// of RPCs the caller no longer tracks:
//   - windows mode: every window Bound or LocalInvPosted is destroyed
//     (MW.Close) and replaced by a new one (PD.AllocMW), never reused;
//     its registration becomes Dead. Windows InvalidatedRemotely are
//     known to be invalid and are kept.
//   - register mode: every segment MR still registered is deregistered
//     (an MR is reachable from any QP of the PD, so a new connection must
//     not inherit it); its registration becomes Dead.
//
// The registrations in regs (the RPCs the transport holds) are then
// released and their entries set to nil; others become Free on their
// eventual Release. A replacement window that cannot be allocated now is
// counted in WindowAllocFailures and allocated later by Register.
func (r *Registry) ConnectionLost(regs ...[]*Registration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	for _, g := range r.active {
		switch g.state {
		case StateBound, StateLocalInvPosted:
			if g.w == nil {
				continue
			}
			w := g.w
			r.setStateLocked(g, StateDead)
			r.destroyWindowLocked(w)
		case StateRegistered:
			if err := g.mr.Close(); err != nil {
				continue // still exposed: Release retries
			}
			r.c.Deregistrations++
			g.mr = nil
			r.setStateLocked(g, StateDead)
		}
	}
	// Registrations made ahead and not taken stay: they have no remote
	// access (TakeReady adds it), and cover only zeroed memory no call
	// holds.
	for _, list := range regs {
		for i, g := range list {
			if g == nil || g.r != r || !g.inUse {
				continue
			}
			if r.releaseLocked(g) == nil {
				list[i] = nil
			}
		}
	}
}

// destroyWindowLocked destroys a window in unknown state and puts a new
// one in its slot.
func (r *Registry) destroyWindowLocked(w *window) {
	idx := w.mw.RKey() >> 8 // before Close: the window's memory goes with it
	if r.byIndex[idx] == w {
		delete(r.byIndex, idx)
	}
	if err := w.mw.Close(); err != nil {
		r.c.WindowCloseErrors++
	}
	w.state = StateDead
	r.slots[w.slot] = nil
	r.deadSlots++
	r.c.WindowsReplaced++
	if r.retire && !r.winWaiters.waitingLocked() {
		return // Register allocates it when it needs it (RetireWindows)
	}
	if nw, _ := r.replaceOneLocked(); nw != nil {
		r.putWindowLocked(nw)
	}
}

// replaceOneLocked allocates a window for one destroyed slot and returns
// it (not yet in the pool).
func (r *Registry) replaceOneLocked() (*window, error) {
	if r.pd == nil {
		return nil, ErrDetached
	}
	for i, w := range r.slots {
		if w != nil {
			continue
		}
		mw, err := r.pd.AllocMW()
		if err != nil {
			r.c.WindowAllocFailures++
			return nil, err
		}
		nw := &window{mw: mw, slot: i, state: StateFree}
		r.slots[i] = nw
		r.byIndex[mw.RKey()>>8] = nw
		r.deadSlots--
		return nw, nil
	}
	return nil, errors.New("frwr: no destroyed window slot")
}
