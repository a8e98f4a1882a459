package frwr

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/nfsrdma/nfsrdma/rpcrdma"
	"github.com/nfsrdma/nfsrdma/verbs"
)

// Registrations made ahead (register mode).
//
// In register mode each segment costs an ibv_reg_mr before its call is
// sent and an ibv_dereg_mr after its reply. The deregistration is the
// invalidation and must stay where it is (rule: nothing the peer can reach
// survives the call); the registration need not be on the call's path.
// For small segments (at most Config.ReadyMax bytes) the registry keeps,
// per recently used (size, direction), up to Config.Ready registrations
// made ahead: each over its own page-aligned memory of exactly that many
// bytes (its own mapping: never a pool buffer, never another segment's
// neighbour), zeroed before it is registered, with only the access the
// direction needs. TakeReady hands one to a call, with its memory as the
// call's buffer; the call lays its data out there (ToPeer) or the peer
// writes there (FromPeer), and Release deregisters it as any other. The
// memory then returns to its size's spares, to be zeroed and registered
// again by Refill, which the transport runs while its caller waits for a
// reply (time the caller would spend asleep).
//
// A registration made ahead has no remote access until TakeReady hands it
// to a call: Refill registers it for local access only, and TakeReady adds
// the one remote right the direction needs in place (ibv_rereg_mr with
// IBV_REREG_MR_CHANGE_ACCESS, verbs.AccessChanger) just before the call
// advertises it. No peer can reach it while it waits, whatever key it
// guesses, and it is never reachable by a peer before a call to that
// peer's server takes it (a registry is one transport's, on its own PD).
// So they outlive a lost connection (ConnectionLost deregisters only what
// calls took); Detach and Close deregister every one that was not taken.
// On a device that cannot change an MR's access the registry stops making
// registrations ahead at the first failure (Counters.ReadyUnsupported):
// segments are then registered at use.

// ReadyKeys is the most (size, direction) pairs the registry stocks at
// once. The least recently used one gives way to a new one if it was not
// asked for in the last ReadyIdle asks (of any size).
const (
	ReadyKeys = 8
	ReadyIdle = 4 * ReadyKeys
)

// readyKey is what a stock is of.
type readyKey struct {
	n   int
	dir Direction
}

// readyStock is the registrations made ahead for one (size, direction),
// and the memory of that size.
type readyStock struct {
	key     readyKey
	ready   []*Registration // made ahead, not taken: each exposes its own buffer
	spare   []*Buffer       // memory not registered, free
	all     []*Buffer       // every buffer mapped for it (Close unmaps them)
	out     int             // buffers held by calls (taken, not yet put back)
	filling int             // registrations being made by Refill outside the mutex
	used    uint64          // Registry.readyTick at the last TakeReady
	asks    int             // TakeReady calls for it (counted up to 2): Refill stocks sizes asked for twice
	want    int             // registrations asked for and not yet made: one per take, one per miss once asked twice
	gone    bool            // evicted or closed: its buffers are unmapped as they come back
}

// TakeReady returns a registration made ahead of exactly n bytes for dir,
// in StateRegistered, and the buffer it covers (whole: Bytes() is exactly
// n bytes; it has no MR of its own, so MR() is nil). The caller owns both
// as if it had called GetBuffer and Register: it Releases the registration
// (after the reply, or at once if the call is never sent) and puts the
// buffer back with PutBuffer. ok is false when none is made: outside
// register mode, when Config.Ready is 0, for n above Config.ReadyMax, or
// when the stock of that size is empty (counted in ReadyMisses; Refill
// will make some). A miss is cheap: register the usual way.
func (r *Registry) TakeReady(n int, dir Direction) (b *Buffer, g *Registration, ok bool) {
	if r.ready == 0 || n <= 0 || n > r.readyMax || (dir != ToPeer && dir != FromPeer) {
		return nil, nil, false
	}
	r.mu.Lock()
	if r.closed || r.pd == nil || r.readyOff {
		r.mu.Unlock()
		return nil, nil, false
	}
	b, g, ok = r.takeReadyLocked(n, dir)
	r.mu.Unlock()
	if !ok {
		return nil, nil, false
	}
	// The remote right, now that a call is about to advertise it. The
	// registration is the caller's already (active, its buffer out): a
	// failure releases it as any other.
	err := grantRemote(g.mr, accessFor(dir))
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		g.seg = rpcrdma.Segment{Handle: g.mr.RKey(), Length: uint32(len(b.mem)), Offset: g.mr.Addr()}
		r.c.ReadyGrants++
		return b, g, true
	}
	r.c.ReadyFailures++
	if !r.readyOff {
		// The device cannot (EOPNOTSUPP), or not reliably: register at
		// use from now on.
		r.readyOff = true
		r.c.ReadyUnsupported = true
		r.unstockAllLocked()
	}
	// Give the registration and its buffer back, as Abort and PutBuffer
	// would.
	if rerr := r.releaseLocked(g); rerr == nil {
		b.state = bufOut
		if b.exposed == 0 {
			r.putBufferLocked(b)
		} else {
			b.state = bufPutPending
		}
	}
	return nil, nil, false
}

// grantRemote adds access to a registration made ahead, in place.
func grantRemote(mr verbs.MR, access verbs.Access) error {
	ac, ok := mr.(verbs.AccessChanger)
	if !ok {
		return fmt.Errorf("frwr: changing an MR's access: %w", syscall.EOPNOTSUPP)
	}
	return ac.ChangeAccess(access)
}

// takeReadyLocked is TakeReady's bookkeeping: it takes a registration made
// ahead of the stock of (n, dir), not yet with remote access.
func (r *Registry) takeReadyLocked(n int, dir Direction) (b *Buffer, g *Registration, ok bool) {
	r.readyTick++
	k := readyKey{n, dir}
	s := r.stocks[k]
	if s == nil {
		if s = r.newStockLocked(k); s == nil {
			r.c.ReadyMisses++
			return nil, nil, false
		}
	}
	s.used = r.readyTick
	s.asks = min(s.asks+1, 2)
	if s.asks >= 2 {
		// Replace what is taken; grow the stock by what it lacked.
		s.want = min(s.want+1, r.ready)
	}
	last := len(s.ready) - 1
	if last < 0 {
		r.c.ReadyMisses++
		return nil, nil, false
	}
	g = s.ready[last]
	s.ready[last] = nil
	s.ready = s.ready[:last]
	g.activeIdx = len(r.active)
	r.active = append(r.active, g)
	g.buf.state = bufOut
	s.out++
	r.c.ReadyTaken++
	return g.buf, g, true
}

// Refill makes one registration ahead, for the most recently used size
// whose stock is below Config.Ready and still asked for, and reports
// whether it made one. Stocks follow demand: each registration TakeReady
// hands out is replaced, and each miss adds one, once a size has been
// asked for twice (a size asked for once, the tail of a file, costs no
// registration); a size nobody asks for again is not stocked further. The
// registration (a system call) runs without the mutex. It is meant for
// time a goroutine would otherwise sleep.
func (r *Registry) Refill() bool {
	if r.ready == 0 {
		return false
	}
	r.mu.Lock()
	if r.closed || r.pd == nil || r.readyOff {
		r.mu.Unlock()
		return false
	}
	var s *readyStock
	for _, t := range r.stocks {
		if t.want > 0 && len(t.ready)+t.filling < r.ready && (s == nil || t.used > s.used) {
			s = t
		}
	}
	if s == nil {
		r.mu.Unlock()
		return false
	}
	var b *Buffer
	if last := len(s.spare) - 1; last >= 0 {
		b = s.spare[last]
		s.spare[last] = nil
		s.spare = s.spare[:last]
	}
	s.want--
	s.filling++
	r.fills++
	pd := r.pd
	r.mu.Unlock()

	var err error
	if b == nil {
		b, err = r.mapReady(s)
	} else {
		clear(b.mem) // nothing of an earlier call is exposed again
	}
	var mr verbs.MR
	if err == nil {
		// Local access only: TakeReady adds the remote right.
		mr, err = pd.RegMR(b.mem, localAccessFor(s.key.dir))
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	s.filling--
	defer r.fillEndLocked()
	if err != nil {
		r.c.ReadyFailures++
		if b != nil {
			r.spareLocked(s, b)
		}
		return false
	}
	if r.closed || r.pd != pd || s.gone || r.readyOff {
		// Closed, detached, evicted or refused meanwhile: never stock it.
		if cerr := mr.Close(); cerr != nil {
			r.c.ReadyFailures++
			return false // still registered: keep the memory mapped
		}
		r.spareLocked(s, b)
		return false
	}
	g := r.freeRegs
	if g != nil {
		r.freeRegs = g.nextFree
		g.nextFree = nil
	} else {
		g = &Registration{r: r}
	}
	g.buf, g.dir, g.inUse, g.state, g.activeIdx = b, s.key.dir, true, StateFree, -1
	g.mr = mr
	g.seg = rpcrdma.Segment{Length: uint32(len(b.mem)), Offset: mr.Addr()} // no rkey: no remote access yet
	b.state = bufReady
	r.setStateLocked(g, StateRegistered)
	s.ready = append(s.ready, g)
	r.c.Registrations++
	r.c.ReadyMade++
	return true
}

// fillEndLocked ends a Refill's use of the PD.
func (r *Registry) fillEndLocked() {
	r.fills--
	if r.fills == 0 {
		r.fillDone.Broadcast()
	}
}

// waitFillsLocked waits (releasing mu meanwhile) until no Refill is
// registering: Close and Detach must not release the PD's resources, nor
// unmap memory, under a registration being made.
func (r *Registry) waitFillsLocked() {
	for r.fills > 0 {
		r.fillDone.Wait()
	}
}

// accessFor is the access of a register-mode segment MR for dir.
func accessFor(dir Direction) verbs.Access {
	if dir == ToPeer {
		return verbs.AccessRemoteRead
	}
	return verbs.AccessRemoteWrite | verbs.AccessLocalWrite // ibv_reg_mr requires LOCAL_WRITE with REMOTE_WRITE
}

// localAccessFor is the access of a registration made ahead for dir
// before TakeReady: none remote.
func localAccessFor(dir Direction) verbs.Access {
	if dir == ToPeer {
		return 0
	}
	return verbs.AccessLocalWrite
}

// mapReady maps the memory of one more buffer of s's size, within
// Config.ReadyBytes.
func (r *Registry) mapReady(s *readyStock) (*Buffer, error) {
	r.mu.Lock()
	if r.readyBytes+s.key.n > r.readyCap {
		r.mu.Unlock()
		return nil, fmt.Errorf("frwr: registrations made ahead would take more than %d bytes", r.readyCap)
	}
	r.readyBytes += s.key.n
	r.mu.Unlock()
	m, err := verbs.Map(s.key.n)
	if err != nil {
		r.mu.Lock()
		r.readyBytes -= s.key.n
		r.mu.Unlock()
		return nil, err
	}
	n := s.key.n
	b := &Buffer{r: r, mapping: m, mem: m.Bytes()[:n:n], stock: s, state: bufFree}
	r.mu.Lock()
	s.all = append(s.all, b)
	r.mu.Unlock()
	return b, nil
}

// newStockLocked starts a stock for k, giving way to the least recently
// used one (idle for ReadyIdle asks, with no buffer out and no refill under
// way) when ReadyKeys are stocked. nil when none can give way.
func (r *Registry) newStockLocked(k readyKey) *readyStock {
	if len(r.stocks) >= ReadyKeys {
		var lru *readyStock
		for _, s := range r.stocks {
			if s.out == 0 && s.filling == 0 && (lru == nil || s.used < lru.used) {
				lru = s
			}
		}
		if lru == nil || r.readyTick-lru.used < ReadyIdle {
			return nil
		}
		r.dropStockLocked(lru)
	}
	if r.stocks == nil {
		r.stocks = make(map[readyKey]*readyStock, ReadyKeys)
	}
	s := &readyStock{key: k}
	r.stocks[k] = s
	return s
}

// dropStockLocked deregisters s's registrations and unmaps its memory;
// buffers still out are unmapped as they come back.
func (r *Registry) dropStockLocked(s *readyStock) error {
	err := r.unstockLocked(s)
	for _, b := range s.spare {
		err = errors.Join(err, r.unmapReadyLocked(b))
	}
	s.spare = nil
	s.gone = true
	delete(r.stocks, s.key)
	return err
}

// unstockLocked deregisters every registration of s made ahead and not
// taken; their memory becomes spare.
func (r *Registry) unstockLocked(s *readyStock) error {
	var errs []error
	kept := s.ready[:0]
	for _, g := range s.ready {
		if err := g.mr.Close(); err != nil {
			// Still registered: keep it (and its memory) stocked.
			errs = append(errs, fmt.Errorf("frwr: deregistering a registration made ahead (rkey %#x): %w", g.seg.Handle, err))
			kept = append(kept, g)
			continue
		}
		r.c.Deregistrations++
		r.c.ReadyDropped++
		b := g.buf
		g.mr = nil
		r.setStateLocked(g, StateFree)
		*g = Registration{r: r, nextFree: r.freeRegs}
		r.freeRegs = g
		b.state = bufFree
		s.spare = append(s.spare, b)
	}
	clear(s.ready[len(kept):])
	s.ready = kept
	return errors.Join(errs...)
}

// unstockAllLocked is unstockLocked for every stock.
func (r *Registry) unstockAllLocked() error {
	var errs []error
	for _, s := range r.stocks {
		errs = append(errs, r.unstockLocked(s))
	}
	return errors.Join(errs...)
}

// spareLocked makes b, not registered, spare memory of s (or unmaps it if
// s is gone or the registry closed).
func (r *Registry) spareLocked(s *readyStock, b *Buffer) {
	b.state = bufFree
	if s.gone || r.closed {
		r.unmapReadyLocked(b)
		return
	}
	s.spare = append(s.spare, b)
}

// putReadyLocked is PutBuffer for a buffer of a stock, once nothing
// exposes it.
func (r *Registry) putReadyLocked(b *Buffer) {
	s := b.stock
	s.out--
	r.spareLocked(s, b)
}

// unmapReadyLocked unmaps the memory of a buffer of a stock (registered
// no more).
func (r *Registry) unmapReadyLocked(b *Buffer) error {
	if b.mapping == nil {
		return nil
	}
	r.readyBytes -= len(b.mem)
	err := b.mapping.Close()
	b.mapping, b.mem = nil, nil
	return err
}
