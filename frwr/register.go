package frwr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/nfsrdma/nfsrdma/rpcrdma"
	"github.com/nfsrdma/nfsrdma/verbs"
)

// State is the exact state of a window (windows mode) or of a
// registration. See the package documentation for the transitions.
type State int

const (
	// StateFree: in the pool; no peer can reach memory through it.
	StateFree State = iota
	// StateBound: its bind WR was handed to the transport (and is posted,
	// or about to be): the peer may reach the segment.
	StateBound
	// StateInvalidatedRemotely: the server's Send With Invalidate named
	// its rkey; it is invalid and must not be invalidated again.
	StateInvalidatedRemotely
	// StateLocalInvPosted: its LOCAL_INV WR was handed to the transport;
	// it is invalid once that WR's (or a later signaled WR's) completion
	// has been reaped.
	StateLocalInvPosted
	// StateDead: destroyed because its state was unknown after an error
	// (ConnectionLost) or Close; never reused.
	StateDead
	// StateRegistered: register mode: the segment has its own MR with
	// remote access until Release deregisters it.
	StateRegistered
)

var stateNames = [...]string{"Free", "Bound", "InvalidatedRemotely", "LocalInvPosted", "Dead", "Registered"}

func (s State) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// exposes reports whether the peer may still reach memory in this state.
func (s State) exposes() bool {
	return s == StateBound || s == StateLocalInvPosted || s == StateRegistered
}

// window is one type-2 memory window of the pool.
type window struct {
	mw    verbs.MW
	slot  int
	state State         // guarded by Registry.mu
	reg   *Registration // the registration holding it, when not Free
	// recent are the key bytes of its last binds: a new bind avoids them
	// all, so a late access with an rkey this window carried recently
	// (a misbehaving or slow peer) never matches its current binding.
	recent  [recentKeys]uint8
	nextKey int
}

// recentKeys is how many of a window's last key bytes a bind avoids.
const recentKeys = 16

// Registration is one chunk segment exposed to the peer: a bound window
// (windows mode) or a registered MR (register mode). Registrations are
// reused from a free list after Release: drop every reference to one when
// releasing it (Release clears the entries of the slice it is given).
type Registration struct {
	r        *Registry
	nextFree *Registration

	// Set by Register, constant until release.
	buf  *Buffer
	dir  Direction
	seg  rpcrdma.Segment
	bind verbs.SendWR // windows mode
	w    *window      // windows mode
	mr   verbs.MR     // register mode

	// Guarded by r.mu.
	inUse     bool
	state     State
	activeIdx int
}

// Segment is the segment to advertise in the chunk (RFC 8166 §3.4.3):
// Handle is the rkey, Length the byte count, and Offset the address of the
// first byte as the rkey names it (the buffer MR's Addr()+off in windows
// mode; the segment MR's Addr() in register mode, which on real devices is
// the same virtual address).
func (g *Registration) Segment() rpcrdma.Segment { return g.seg }

// Direction is the direction the segment was registered for.
func (g *Registration) Direction() Direction { return g.dir }

// BindWR returns the BIND_MW work request to post before the SEND that
// advertises the segment: unsignaled, ID 0 for the transport to set. ok is
// false in register mode and once the registration is no longer Bound
// (after ConnectionLost, for one): never post a bind WR then.
func (g *Registration) BindWR() (wr verbs.SendWR, ok bool) {
	r := g.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if !g.inUse || g.w == nil || g.state != StateBound || r.closed {
		return verbs.SendWR{}, false
	}
	return g.bind, true
}

// State returns the registration's current state (StateFree once it has
// been released).
func (g *Registration) State() State {
	g.r.mu.Lock()
	defer g.r.mu.Unlock()
	if !g.inUse {
		return StateFree
	}
	return g.state
}

// Register exposes b.Bytes()[off:off+n] for one chunk segment with only
// the access dir needs: REMOTE_READ for ToPeer, REMOTE_WRITE for FromPeer.
//
// Windows mode: it takes a free window (waiting in FIFO order while none
// is free; ctx ends the wait), picks the new rkey verbs.NextRKey(old, k)
// with k an unpredictable byte from Config.Rand different from the old key
// byte, and returns a Registration in StateBound whose BindWR the caller
// must post before the SEND (or give back with Abort if it cannot).
//
// Register mode: it registers that memory now (ibv_reg_mr) with the
// remote access; there is no WR to post.
func (r *Registry) Register(ctx context.Context, b *Buffer, off, n int, dir Direction) (*Registration, error) {
	var access verbs.Access
	switch dir {
	case ToPeer:
		access = verbs.AccessRemoteRead
	case FromPeer:
		access = verbs.AccessRemoteWrite
	default:
		return nil, fmt.Errorf("frwr: Register: unknown %v", dir)
	}
	r.mu.Lock()
	if err := r.checkSegmentLocked(b, off, n); err != nil {
		r.mu.Unlock()
		return nil, err
	}
	if r.pd == nil {
		r.mu.Unlock()
		return nil, ErrDetached
	}
	if r.mode == ModeRegister {
		pd := r.pd
		r.mu.Unlock()
		return r.registerMR(pd, b, off, n, dir, access)
	}
	defer r.mu.Unlock()
	w, err := r.takeWindowLocked(ctx)
	if err != nil {
		return nil, err
	}
	// The key the consumer holds: the last posted bind's (a bind handed
	// out and aborted unposted left it unchanged).
	old := w.mw.RKey()
	k, err := r.keyByteLocked(w, uint8(old))
	if err != nil {
		r.putWindowLocked(w)
		return nil, err
	}
	rkey := verbs.NextRKey(old, k)
	addr := b.mr.Addr() + uint64(off)
	g := r.newRegistrationLocked(b, dir)
	g.w = w
	g.seg = rpcrdma.Segment{Handle: rkey, Length: uint32(n), Offset: addr}
	g.bind = verbs.SendWR{Opcode: verbs.OpBindMW, MW: w.mw, BindMR: b.mr,
		BindAddr: addr, BindLength: uint64(n), BindAccess: access, BindRKey: rkey}
	w.reg = g
	r.setStateLocked(g, StateBound)
	r.c.Binds++
	return g, nil
}

// checkSegmentLocked validates a segment of a buffer the caller holds.
func (r *Registry) checkSegmentLocked(b *Buffer, off, n int) error {
	if r.closed {
		return ErrClosed
	}
	if b == nil || b.r != r || b.state != bufOut {
		return fmt.Errorf("frwr: Register: %w", ErrNotOwned)
	}
	if n <= 0 || off < 0 || off > len(b.mem) || n > len(b.mem)-off || uint64(n) > math.MaxUint32 {
		return fmt.Errorf("%w: [%d, %d+%d) of %d bytes", ErrSegment, off, off, n, len(b.mem))
	}
	return nil
}

// registerMR is Register in register mode. The registration itself (a
// system call that pins memory) runs without the mutex.
func (r *Registry) registerMR(pd verbs.PD, b *Buffer, off, n int, dir Direction, access verbs.Access) (*Registration, error) {
	if dir == FromPeer {
		access |= verbs.AccessLocalWrite // ibv_reg_mr requires it with REMOTE_WRITE
	}
	mr, err := pd.RegMR(b.mem[off:off+n:off+n], access)
	if err != nil {
		return nil, fmt.Errorf("frwr: registering segment [%d, %d+%d): %w", off, off, n, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, errors.Join(ErrClosed, mr.Close())
	}
	if r.pd != pd { // detached meanwhile: the MR is of the old device
		return nil, errors.Join(ErrDetached, mr.Close())
	}
	g := r.newRegistrationLocked(b, dir)
	g.mr = mr
	g.seg = rpcrdma.Segment{Handle: mr.RKey(), Length: uint32(n), Offset: mr.Addr()}
	r.setStateLocked(g, StateRegistered)
	r.c.Registrations++
	return g, nil
}

// Abort gives back a registration whose peer never learned of it: in
// windows mode its BindWR was never posted, and the window returns to
// Free; in register mode its MR is deregistered. An Abort of a window
// whose bind was in fact posted (the window already carries the new rkey)
// is refused and counted: the window stays Bound until it is invalidated
// or ConnectionLost destroys it. It reports whether g was given back: then
// g is the registry's again (another Register may hand it out at once)
// and the caller must not use it any more, not even to ask its State.
func (g *Registration) Abort() (released bool) {
	r := g.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if !g.inUse || r.closed {
		r.c.RefusedTransitions++
		return false
	}
	switch {
	case g.w != nil && g.state == StateBound:
		if g.w.mw.RKey() == g.bind.BindRKey {
			r.c.RefusedTransitions++ // posted: its state is the device's now
			return false
		}
		r.c.Aborts++
		w := g.w
		r.setStateLocked(g, StateFree)
		r.putWindowLocked(w)
		r.recycleLocked(g)
		return true
	case g.mr != nil && g.state == StateRegistered:
		r.c.Aborts++
		if err := r.releaseLocked(g); err != nil {
			r.c.RefusedTransitions++
			return false
		}
		return true
	default:
		r.c.RefusedTransitions++
		return false
	}
}

// takeWindowLocked takes a free window, replacing destroyed ones if
// needed, or waits for one. It returns with the mutex held.
func (r *Registry) takeWindowLocked(ctx context.Context) (*window, error) {
	if n := len(r.freeWins); n > 0 {
		w := r.freeWins[n-1]
		r.freeWins[n-1] = nil
		r.freeWins = r.freeWins[:n-1]
		return w, nil
	}
	if r.deadSlots > 0 {
		w, err := r.replaceOneLocked()
		if w != nil {
			return w, nil
		}
		if r.deadSlots == len(r.slots) {
			// No window will ever come back to wait for.
			return nil, fmt.Errorf("frwr: no memory window: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ch := r.winWaiters.addLocked()
	r.c.WindowWaits++
	r.mu.Unlock()
	w, ok, err := wait(ctx, &r.winWaiters, ch, r.mu.Lock, r.mu.Unlock, r.putWindowLocked)
	r.mu.Lock()
	switch {
	case err != nil:
		return nil, err
	case !ok || r.closed:
		return nil, ErrClosed
	}
	return w, nil
}

// putWindowLocked makes w Free and hands it to the first waiter or puts it
// in the pool. With RetireWindows no window sits Free: one nobody waits
// for is deallocated, its slot left for Register to fill.
func (r *Registry) putWindowLocked(w *window) {
	w.state, w.reg = StateFree, nil
	if r.closed {
		return
	}
	if r.winWaiters.handLocked(w) {
		return
	}
	if r.retire {
		idx := w.mw.RKey() >> 8
		if r.byIndex[idx] == w {
			delete(r.byIndex, idx)
		}
		if err := w.mw.Close(); err != nil {
			r.c.WindowCloseErrors++
		}
		w.state = StateDead
		r.slots[w.slot] = nil
		r.deadSlots++
		return
	}
	r.freeWins = append(r.freeWins, w)
}

// keyByteLocked returns an unpredictable key byte for w's next bind,
// different from old (its current one) and from its recent ones, and
// records it.
func (r *Registry) keyByteLocked(w *window, old uint8) (uint8, error) {
	for range 64 {
		if r.keyPos == r.keyLen {
			n, err := r.rnd.Read(r.keys[:])
			if n <= 0 {
				if err == nil {
					err = io.ErrNoProgress
				}
				return 0, fmt.Errorf("frwr: reading a key byte: %w", err)
			}
			r.keyPos, r.keyLen = 0, n
		}
		k := r.keys[r.keyPos]
		r.keys[r.keyPos] = 0 // a used key byte does not linger
		r.keyPos++
		if k != old && !slices.Contains(w.recent[:min(w.nextKey, recentKeys)], k) {
			w.recent[w.nextKey%recentKeys] = k
			w.nextKey++
			return k, nil
		}
	}
	return 0, errors.New("frwr: Config.Rand gives nothing but the current key byte")
}

// newRegistrationLocked takes a Registration from the free list (or makes
// one) and records it as active.
func (r *Registry) newRegistrationLocked(b *Buffer, dir Direction) *Registration {
	g := r.freeRegs
	if g != nil {
		r.freeRegs = g.nextFree
		g.nextFree = nil
	} else {
		g = &Registration{r: r}
	}
	g.buf, g.dir, g.inUse, g.state = b, dir, true, StateFree
	g.activeIdx = len(r.active)
	r.active = append(r.active, g)
	return g
}

// setStateLocked moves g (and its window) to s, keeping the buffer's
// exposure count.
func (r *Registry) setStateLocked(g *Registration, s State) {
	was := g.state.exposes()
	g.state = s
	if g.w != nil {
		g.w.state = s
	}
	switch now := s.exposes(); {
	case now && !was:
		g.buf.exposed++
	case was && !now:
		r.unexposeLocked(g.buf)
	}
}

// recycleLocked removes g from the active list and puts it on the free
// list.
func (r *Registry) recycleLocked(g *Registration) {
	last := len(r.active) - 1
	r.active[g.activeIdx] = r.active[last]
	r.active[g.activeIdx].activeIdx = g.activeIdx
	r.active[last] = nil
	r.active = r.active[:last]
	*g = Registration{r: r, nextFree: r.freeRegs}
	r.freeRegs = g
}
