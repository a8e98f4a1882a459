package wbuf

import (
	"bytes"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

func TestPool(t *testing.T) {
	const size = 64 << 10
	p := New(size, 4*size, size) // at most 7 free
	if p.MaxFree() != 7 {
		t.Fatalf("MaxFree %d, want 7", p.MaxFree())
	}
	// A small file's gathered writes grow from 4 KiB, doubling, to size.
	var pend []byte
	var caps []int
	for range 16 {
		pend = p.AppendPend(pend, make([]byte, 4<<10))
		if len(caps) == 0 || caps[len(caps)-1] != cap(pend) {
			caps = append(caps, cap(pend))
		}
	}
	if want := []int{4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10}; !slices.Equal(caps, want) {
		t.Errorf("gathered writes grew through capacities %v, want %v", caps, want)
	}
	if p.Made() != 1 {
		t.Errorf("made %d after growing to size, want 1", p.Made())
	}
	p.Put(pend)
	p.Put(make([]byte, 10, size/2)) // not one of the pool's: dropped
	if p.FreeCount() != 1 {
		t.Fatalf("%d free, want 1", p.FreeCount())
	}
	// With a free buffer, gathering takes it at once, keeping what it had.
	b := p.AppendPend([]byte("abc"), make([]byte, 5000))
	if cap(b) != size || !bytes.HasPrefix(b, []byte("abc")) || len(b) != 5003 || p.FreeCount() != 0 {
		t.Errorf("AppendPend with a free buffer: len %d cap %d, %d free", len(b), cap(b), p.FreeCount())
	}
	c := p.Clone([]byte("data"))
	if string(c) != "data" || cap(c) != size {
		t.Errorf("Clone: %q, cap %d", c, cap(c))
	}
	if big := p.Clone(make([]byte, size+1)); len(big) != size+1 {
		t.Errorf("Clone of more than size: len %d", len(big))
	}
	// A buffer put back is the next one given, emptied.
	p.Put(c)
	if g := p.Get(); cap(g) != size || len(g) != 0 || &g[:1][0] != &c[:1][0] {
		t.Errorf("Get after Put: len %d cap %d, not the buffer put back", len(g), cap(g))
	}
}

// TestPoolIdleTrim runs on synctest's fake clock: the free list is bounded,
// kept whole while the pool is in use, and trimmed to KeepIdle once no Get
// came for IdleTrim.
func TestPoolIdleTrim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const size = 4096
		p := New(size, 4*size, 4*size) // at most 13 free
		for range 20 {
			p.Put(make([]byte, 0, size))
		}
		if p.FreeCount() != p.MaxFree() {
			t.Fatalf("%d free after 20 puts, want the bound %d", p.FreeCount(), p.MaxFree())
		}
		// In use: a Get (and its Put) every half IdleTrim keeps it whole.
		for range 4 {
			time.Sleep(IdleTrim / 2)
			p.Put(p.Get())
			synctest.Wait()
			if p.FreeCount() != p.MaxFree() {
				t.Fatalf("%d free while in use, want %d", p.FreeCount(), p.MaxFree())
			}
		}
		time.Sleep(IdleTrim + time.Millisecond)
		synctest.Wait()
		if p.FreeCount() != KeepIdle {
			t.Errorf("%d free once idle, want %d", p.FreeCount(), KeepIdle)
		}
	})
}
