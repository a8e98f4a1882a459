// Package wbuf is the memory of a mount's writes behind and kept UNSTABLE
// writes: buffers of wsize bytes, reused rather than left to the garbage
// collector. A buffered write's data must outlive its FUSE request (the
// WRITE goes out behind it, and an UNSTABLE one is kept until a COMMIT
// proves it durable), so each one was a fresh copy: on the test bed the
// page faults of fresh memory cost more than the copy itself (about a
// quarter of the mount server's CPU on a buffered sequential write).
//
// A buffer comes back (Pool.Put) when what it holds is durable: its WRITE
// was answered FILE_SYNC or DATA_SYNC, or a COMMIT with the WRITE's
// verifier was answered. Who holds a buffer is the caller's to track; the
// pool only trusts that a buffer put back is held by no one else.
package wbuf

import (
	"sync"
	"sync/atomic"
	"time"
)

const (
	// KeepIdle is how many free buffers are kept once the pool is idle.
	KeepIdle = 4
	// IdleTrim is how long without a Get makes the pool idle.
	IdleTrim = 2 * time.Second
)

// Pool is a mount's free write buffers. It keeps at most as many as the
// writes behind and dirty data allowed in flight can hold (maxFree), and
// trims itself to KeepIdle once no buffer was asked for in IdleTrim. mu
// guards free, lastGet and trimmer; every buffer in free has capacity size
// and length 0.
type Pool struct {
	size    int // wsize
	maxFree int

	mu      sync.Mutex
	free    [][]byte
	lastGet time.Time
	trimmer *time.Timer // pending idle trim; nil when none

	made atomic.Uint64 // buffers of size allocated
}

// New returns the pool of a mount writing wsize bytes a WRITE, with up to
// writeBehind bytes written behind and maxDirty bytes kept UNSTABLE.
func New(wsize, writeBehind, maxDirty int) *Pool {
	return &Pool{size: wsize, maxFree: (writeBehind+2*maxDirty)/wsize + 1}
}

// Size returns the capacity of the pool's buffers.
func (p *Pool) Size() int { return p.size }

// MaxFree returns how many free buffers the pool keeps at most.
func (p *Pool) MaxFree() int { return p.maxFree }

// Made returns how many buffers of the pool's size were allocated so far.
func (p *Pool) Made() uint64 { return p.made.Load() }

// FreeCount returns how many buffers are free.
func (p *Pool) FreeCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}

// Get returns an empty buffer of capacity Size (its old contents stay
// beyond its length: only what is appended is ever read).
func (p *Pool) Get() []byte {
	if b := p.take(true); b != nil {
		return b
	}
	p.made.Add(1)
	return make([]byte, 0, p.size)
}

// take pops a free buffer, nil when none; a Get counts as a use of the
// pool (it stays busy) whether or not it finds one.
func (p *Pool) take(get bool) []byte {
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

// Clone returns a copy of data in a pooled buffer (callers pass at most
// Size bytes; more would grow it past the pool's size, and Put would drop
// it).
func (p *Pool) Clone(data []byte) []byte {
	return append(p.Get(), data...)
}

// Put gives b back. Only a whole pooled buffer is taken (capacity Size):
// the caller must hold the only reference to it.
func (p *Pool) Put(b []byte) {
	if cap(b) != p.size {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) >= p.maxFree {
		return
	}
	p.free = append(p.free, b[:0])
	if len(p.free) > KeepIdle && p.trimmer == nil {
		p.trimmer = time.AfterFunc(IdleTrim, p.trim)
	}
}

// trim drops free buffers beyond KeepIdle once the pool is idle.
func (p *Pool) trim() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.trimmer = nil
	if len(p.free) <= KeepIdle {
		return
	}
	if wait := IdleTrim - time.Since(p.lastGet); wait > 0 {
		p.trimmer = time.AfterFunc(wait, p.trim)
		return
	}
	clear(p.free[KeepIdle:])
	p.free = p.free[:KeepIdle]
}

// AppendPend appends data to the gathered writes pend. A free pooled
// buffer takes them when there is one; otherwise pend grows by doubling up
// to Size, so that a small file's few writes take a buffer of their size,
// not wsize (a fresh megabyte for each small file costs its page faults
// and zeroing where CPU is scarce). len(pend)+len(data) is at most Size.
func (p *Pool) AppendPend(pend, data []byte) []byte {
	need := len(pend) + len(data)
	if need <= cap(pend) {
		return append(pend, data...)
	}
	if b := p.take(false); b != nil {
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
