package fusefs

import (
	"sync"
	"sync/atomic"
	"time"
)

// writeBufs is the memory of a mount's writes behind and kept UNSTABLE
// writes, wsize bytes a buffer, reused rather than left to the garbage
// collector. A buffered write's data must outlive its FUSE request (the
// WRITE goes out behind it, and an UNSTABLE one is kept until a COMMIT
// proves it durable), so each one was a fresh copy: on the test bed the
// page faults of fresh memory cost more than the copy itself (about a
// quarter of the mount server's CPU on a buffered sequential write).
//
// A buffer comes back (put) when what it holds is durable: its WRITE was
// answered FILE_SYNC or DATA_SYNC, or a COMMIT with the WRITE's verifier
// was answered. The pool keeps at most as many as the writes behind and
// dirty data allowed in flight can hold, and trims itself to keepIdle
// once no buffer was asked for in idleTrim.
type writeBufs struct {
	size    int // wsize
	maxFree int
	idle    time.Duration // idleTrim (shorter in tests)

	mu      sync.Mutex
	free    [][]byte
	lastGet time.Time
	trimmer *time.Timer // pending idle trim; nil when none

	made atomic.Uint64 // buffers allocated (tests)
}

const (
	keepIdle = 4               // free buffers kept once idle
	idleTrim = 2 * time.Second // no get for this long: idle
)

func newWriteBufs(wsize, writeBehind, maxDirty int) *writeBufs {
	return &writeBufs{size: wsize, maxFree: (writeBehind+2*maxDirty)/wsize + 1, idle: idleTrim}
}

// get returns an empty buffer of capacity size (its old contents stay
// beyond its length: only what is appended is ever read).
func (p *writeBufs) get() []byte {
	if b := p.take(true); b != nil {
		return b
	}
	p.made.Add(1)
	return make([]byte, 0, p.size)
}

// tryGet is get when a free buffer is there; nil otherwise.
func (p *writeBufs) tryGet() []byte { return p.take(false) }

// take pops a free buffer, nil when none; a get counts as a use of the
// pool (it stays busy) whether or not it finds one.
func (p *writeBufs) take(get bool) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.free)
	if get || n > 0 {
		p.lastGet = time.Now()
	}
	if n == 0 {
		return nil
	}
	b := p.free[n-1]
	p.free[n-1] = nil
	p.free = p.free[:n-1]
	return b[:0]
}

// clone returns a copy of data in a pooled buffer (callers pass at most
// size bytes; more would grow it past the pool's size, and put would drop
// it).
func (p *writeBufs) clone(data []byte) []byte {
	return append(p.get(), data...)
}

// put gives b back. Only a whole pooled buffer is taken (capacity size):
// the caller must hold the only reference to it.
func (p *writeBufs) put(b []byte) {
	if cap(b) != p.size {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) >= p.maxFree {
		return
	}
	p.free = append(p.free, b[:0])
	if len(p.free) > keepIdle && p.trimmer == nil {
		p.trimmer = time.AfterFunc(p.idle, p.trim)
	}
}

// trim drops free buffers beyond keepIdle once the pool is idle.
func (p *writeBufs) trim() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.trimmer = nil
	if len(p.free) <= keepIdle {
		return
	}
	if wait := p.idle - time.Since(p.lastGet); wait > 0 {
		p.trimmer = time.AfterFunc(wait, p.trim)
		return
	}
	clear(p.free[keepIdle:])
	p.free = p.free[:keepIdle]
}

// freeCount returns how many buffers are free (tests).
func (p *writeBufs) freeCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}

// appendPend appends data to the gathered writes pend. A free pooled
// buffer takes them when there is one; otherwise pend grows by doubling up
// to size, so that a small file's few writes take a buffer of their size,
// not wsize (a fresh megabyte for each small file costs its page faults
// and zeroing where CPU is scarce). len(pend)+len(data) is at most size.
func (p *writeBufs) appendPend(pend, data []byte) []byte {
	need := len(pend) + len(data)
	if need <= cap(pend) {
		return append(pend, data...)
	}
	if b := p.tryGet(); b != nil {
		return append(append(b, pend...), data...)
	}
	c := max(2*cap(pend), need, 4096)
	if need <= p.size {
		c = min(c, p.size)
	}
	if c == p.size {
		p.made.Add(1)
	}
	grown := make([]byte, len(pend), c)
	copy(grown, pend)
	return append(grown, data...)
}
