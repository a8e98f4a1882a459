package fusefs

import (
	"bytes"
	"slices"
	"testing"
	"time"
)

func TestWriteBufs(t *testing.T) {
	const size = 64 << 10
	p := newWriteBufs(size, 4*size, size) // at most 7 free
	if p.maxFree != 7 {
		t.Fatalf("maxFree %d, want 7", p.maxFree)
	}
	// A small file's gathered writes grow from 4 KiB, doubling, to size.
	var pend []byte
	var caps []int
	for range 16 {
		pend = p.appendPend(pend, make([]byte, 4<<10))
		if len(caps) == 0 || caps[len(caps)-1] != cap(pend) {
			caps = append(caps, cap(pend))
		}
	}
	if want := []int{4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10}; !slices.Equal(caps, want) {
		t.Errorf("gathered writes grew through capacities %v, want %v", caps, want)
	}
	if p.made.Load() != 1 {
		t.Errorf("made %d after growing to size, want 1", p.made.Load())
	}
	p.put(pend)
	p.put(make([]byte, 10, size/2)) // not one of the pool's: dropped
	if p.freeCount() != 1 {
		t.Fatalf("%d free, want 1", p.freeCount())
	}
	// With a free buffer, gathering takes it at once, keeping what it had.
	b := p.appendPend([]byte("abc"), make([]byte, 5000))
	if cap(b) != size || !bytes.HasPrefix(b, []byte("abc")) || len(b) != 5003 || p.freeCount() != 0 {
		t.Errorf("appendPend with a free buffer: len %d cap %d, %d free", len(b), cap(b), p.freeCount())
	}
	c := p.clone([]byte("data"))
	if string(c) != "data" || cap(c) != size {
		t.Errorf("clone: %q, cap %d", c, cap(c))
	}
	if big := p.clone(make([]byte, size+1)); len(big) != size+1 {
		t.Errorf("clone of more than size: len %d", len(big))
	}

	// The free list is bounded, and trimmed to keepIdle once idle.
	p.idle = 20 * time.Millisecond
	for range 10 {
		p.put(make([]byte, 0, size))
	}
	if p.freeCount() != p.maxFree {
		t.Fatalf("%d free after 10 puts, want the bound %d", p.freeCount(), p.maxFree)
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.freeCount() > keepIdle && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if p.freeCount() != keepIdle {
		t.Errorf("%d free once idle, want %d", p.freeCount(), keepIdle)
	}
}
