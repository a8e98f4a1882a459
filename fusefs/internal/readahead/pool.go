package readahead

import (
	"sync"
	"sync/atomic"
)

// Pool is the free segments' memory of a mount, kept for the next segments
// rather than left to the garbage collector: up to as many as were in use
// at once while windows were open; once the last window closes, one
// window's worth (its read-ahead and as many segments behind: 18 MiB with
// the default rsize and read-ahead). The zero Pool is ready to use; mu
// guards every field but made, and each Window's pooled.
type Pool struct {
	mu      sync.Mutex
	free    []*[]byte
	per     int // the most segments one window holds
	windows int // windows holding segments (Window.pooled)
	inUse   int // memory given out and not given back
	peak    int // the most in use at once since the windows opened
	made    atomic.Uint64
}

// Made returns how many segments' memory was allocated so far.
func (p *Pool) Made() uint64 { return p.made.Load() }

// Free returns how many segments' memory is free.
func (p *Pool) Free() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}

// get returns segment memory for w, SegSize bytes (its contents are left
// from an earlier segment: a segment exposes only what its READ wrote).
func (p *Pool) get(w *Window) *[]byte {
	size := w.segSize
	p.mu.Lock()
	p.per = max(p.per, 2*w.maxSegs+2)
	if !w.pooled {
		w.pooled = true
		p.windows++
	}
	p.inUse++
	p.peak = max(p.peak, p.inUse)
	for len(p.free) > 0 {
		last := len(p.free) - 1
		mem := p.free[last]
		p.free[last] = nil
		p.free = p.free[:last]
		if len(*mem) == size {
			p.mu.Unlock()
			return mem
		}
	}
	p.mu.Unlock()
	p.made.Add(1)
	b := make([]byte, size)
	return &b
}

// put gives segment memory back.
func (p *Pool) put(mem *[]byte) {
	p.mu.Lock()
	p.inUse--
	if len(p.free) < max(p.peak, p.per) {
		p.free = append(p.free, mem)
	}
	p.mu.Unlock()
}

// closed is w's window closing; with the last, what is kept shrinks to
// one window's worth.
func (p *Pool) closed(w *Window) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !w.pooled {
		return
	}
	w.pooled = false
	p.windows--
	if p.windows > 0 {
		return
	}
	p.peak = p.inUse
	if len(p.free) > p.per {
		clear(p.free[p.per:])
		p.free = p.free[:p.per]
	}
}
