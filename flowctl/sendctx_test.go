package flowctl

import (
	"errors"
	"math/rand/v2"
	"testing"
)

func TestSignalerInterval(t *testing.T) {
	tests := []struct{ depth, maxChain, want int }{
		{128, 5, 64},
		{129, 5, 64},
		{64, 33, 32},
		{64, 40, 25}, // depth-maxChain+1 is smaller than half
		{8, 8, 1},
		{8, 6, 3},
		{10, 1, 5},
		{3, 2, 1},
		{2, 1, 1},
		{1, 1, 1},
	}
	for _, tc := range tests {
		s := NewSignaler(tc.depth, tc.maxChain)
		if s.Interval() != tc.want {
			t.Errorf("NewSignaler(%d, %d).Interval() = %d, want %d", tc.depth, tc.maxChain, s.Interval(), tc.want)
		}
	}
}

func TestSignalerChain(t *testing.T) {
	s := NewSignaler(8, 2) // interval 4
	steps := []struct {
		n          int
		prompt     bool
		signal     bool
		unsignaled int
	}{
		{1, false, false, 1},
		{2, false, false, 3},
		{1, false, true, 0}, // reaches the interval
		{2, false, false, 2},
		{1, true, true, 0}, // prompt
		{1, true, true, 0}, // prompt again, even right after a signal
		{3, false, false, 3},
		{2, false, true, 0}, // would pass the interval
	}
	for i, st := range steps {
		if got := s.Chain(st.n, st.prompt); got != st.signal || s.Unsignaled() != st.unsignaled {
			t.Fatalf("step %d: Chain(%d, %v) = %v with %d unsignaled, want %v with %d",
				i, st.n, st.prompt, got, s.Unsignaled(), st.signal, st.unsignaled)
		}
	}
	s.Chain(1, false)
	s.Reset()
	if s.Unsignaled() != 0 {
		t.Fatal("Reset kept unsignaled WRs")
	}
}

type wrMeta struct {
	wrid uint64
	buf  *[64]byte // stands for a send buffer to release
}

func TestRingBasic(t *testing.T) {
	r := NewSendContextRing[wrMeta](4, 3)
	if r.Depth() != 4 || r.MaxChain() != 3 || r.Room() != 4 || r.Outstanding() != 0 {
		t.Fatalf("new ring: depth %d maxChain %d room %d outstanding %d", r.Depth(), r.MaxChain(), r.Room(), r.Outstanding())
	}
	res, ok := r.Reserve(3, false)
	if !ok || res.First != 0 || res.N != 3 || res.Last() != 2 {
		t.Fatalf("Reserve(3) = %+v, %v", res, ok)
	}
	for w := res.First; w <= res.Last(); w++ {
		*r.Slot(w) = wrMeta{wrid: w, buf: new([64]byte)}
	}
	if _, ok := r.Reserve(2, false); ok {
		t.Fatal("Reserve(2) succeeded with room 1")
	}
	if r.Exhausted() != 1 {
		t.Fatalf("Exhausted %d", r.Exhausted())
	}
	res2, ok := r.Reserve(1, true)
	if !ok || res2.First != 3 || !res2.Signal {
		t.Fatalf("Reserve(1, prompt) = %+v, %v", res2, ok)
	}
	*r.Slot(3) = wrMeta{wrid: 3}

	var retired []uint64
	collect := func(w uint64, m *wrMeta) {
		if m.wrid != w {
			t.Fatalf("retired wrid %d holds metadata of %d", w, m.wrid)
		}
		retired = append(retired, w)
	}
	if n, err := r.Complete(1, collect); n != 2 || err != nil {
		t.Fatalf("Complete(1) = %d, %v", n, err)
	}
	if len(retired) != 2 || retired[0] != 0 || retired[1] != 1 || r.Room() != 2 {
		t.Fatalf("retired %v, room %d", retired, r.Room())
	}
	for _, w := range []uint64{0, 1, 4, 99, ^uint64(0)} {
		if n, err := r.Complete(w, collect); n != 0 || !errors.Is(err, ErrUnknownWRID) {
			t.Fatalf("Complete(%d) = %d, %v; want ErrUnknownWRID", w, n, err)
		}
	}
	if n, err := r.Complete(3, collect); n != 2 || err != nil || r.Room() != 4 {
		t.Fatalf("Complete(3) = %d, %v, room %d", n, err, r.Room())
	}
	// Retired slots are cleared, releasing what they referenced.
	for _, m := range r.meta {
		if m != (wrMeta{}) {
			t.Fatalf("slot not cleared: %+v", m)
		}
	}
	// A nil retire is allowed.
	res, _ = r.Reserve(2, false)
	if n, err := r.Complete(res.Last(), nil); n != 2 || err != nil {
		t.Fatalf("Complete with nil retire = %d, %v", n, err)
	}
}

func TestRingFlush(t *testing.T) {
	r := NewSendContextRing[uint64](8, 4)
	var posted []uint64
	for range 3 {
		res, ok := r.Reserve(2, false)
		if !ok {
			t.Fatal("Reserve failed")
		}
		for w := res.First; w <= res.Last(); w++ {
			*r.Slot(w) = w + 1000
			posted = append(posted, w)
		}
	}
	var flushed []uint64
	n := r.Flush(func(w uint64, m *uint64) {
		if *m != w+1000 {
			t.Fatalf("wrid %d holds %d", w, *m)
		}
		flushed = append(flushed, w)
	})
	sig := r.Signaler()
	if n != 6 || len(flushed) != 6 || r.Outstanding() != 0 || sig.Unsignaled() != 0 {
		t.Fatalf("Flush = %d, flushed %v, outstanding %d, unsignaled %d", n, flushed, r.Outstanding(), sig.Unsignaled())
	}
	for i := range posted {
		if flushed[i] != posted[i] {
			t.Fatalf("flush order %v, posted %v", flushed, posted)
		}
	}
	// The sequence continues: a stale completion is unknown, new wrids follow on.
	if _, err := r.Complete(posted[5], nil); !errors.Is(err, ErrUnknownWRID) {
		t.Fatalf("stale completion after Flush: %v", err)
	}
	if res, _ := r.Reserve(1, false); res.First != 6 {
		t.Fatalf("first wrid after Flush %d, want 6", res.First)
	}
	if r.Flush(nil) != 1 || r.Flush(nil) != 0 {
		t.Fatal("Flush count")
	}
}

func TestRingPanics(t *testing.T) {
	expectPanic(t, "maxChain > depth", func() { NewSendContextRing[int](4, 5) })
	expectPanic(t, "maxChain 0", func() { NewSendContextRing[int](4, 0) })
	r := NewSendContextRing[int](4, 2)
	expectPanic(t, "Reserve(0)", func() { r.Reserve(0, false) })
	expectPanic(t, "Reserve(3)", func() { r.Reserve(3, false) })
	expectPanic(t, "Slot of a free wrid", func() { r.Slot(0) })
	r.Reserve(1, false)
	r.Slot(0)
	expectPanic(t, "Slot beyond head", func() { r.Slot(1) })
}

// TestRingWrap runs a ring of a depth that is not a power of two across the
// 64-bit wrap of the wrid sequence and many laps of its slots.
func TestRingWrap(t *testing.T) {
	const depth = 5
	r := NewSendContextRing[uint64](depth, 3)
	start := ^uint64(0) - 20
	r.head, r.tail = start, start
	next := start // next wrid expected to retire
	rng := rand.New(rand.NewPCG(3, 4))
	for range 10000 {
		if n := 1 + rng.IntN(3); rng.IntN(2) == 0 {
			if res, ok := r.Reserve(n, false); ok {
				for w := res.First; w != res.First+uint64(res.N); w++ {
					*r.Slot(w) = ^w
				}
			}
		} else if out := r.Outstanding(); out > 0 {
			w := r.tail + uint64(rng.IntN(out))
			_, err := r.Complete(w, func(got uint64, m *uint64) {
				if got != next || *m != ^got {
					t.Fatalf("retired %d holding %#x, want %d", got, *m, next)
				}
				next++
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if r.Outstanding() > depth || r.Outstanding() < 0 {
			t.Fatalf("outstanding %d", r.Outstanding())
		}
	}
	if next-start < 1000 || next > start {
		t.Fatalf("retired %d WRs and ended at %d: the wrap was not crossed", next-start, next)
	}
}

// TestRingSimulatedDevice posts chains through the ring to a model of a
// send queue: WRs execute in order, only signaled ones produce a
// completion, and now and then the queue pair fails and every remaining WR
// is flushed with a completion. It checks that
//   - the ring never has more WRs outstanding than the queue depth, and its
//     count matches the WRs the device has not completed;
//   - every WR is retired exactly once, in order, with its own metadata;
//   - whenever Reserve is refused, a signaled WR is outstanding, so a
//     completion that frees room is on its way (no deadlock);
//   - no more than depth-maxChain WRs ever follow the last signaled one.
func TestRingSimulatedDevice(t *testing.T) {
	for _, cfg := range []struct{ depth, maxChain int }{
		{16, 4}, {7, 7}, {128, 5}, {5, 1}, {9, 5}, {2, 2},
	} {
		rng := rand.New(rand.NewPCG(uint64(cfg.depth), uint64(cfg.maxChain)))
		r := NewSendContextRing[uint64](cfg.depth, cfg.maxChain)
		type wr struct {
			wrid     uint64
			signaled bool
		}
		var sq []wr          // posted, not yet executed
		var cq []uint64      // completions not yet polled
		var next uint64      // next wrid expected to retire
		var lastSignal int64 // wrid of the last signaled WR posted, -1 if none
		lastSignal = -1
		var posted uint64
		refusals := 0
		retire := func(w uint64, m *uint64) {
			if w != next || *m != w*3+1 {
				t.Fatalf("depth %d: retired %d holding %d, want %d", cfg.depth, w, *m, next)
			}
			next++
		}
		signaledOutstanding := func() bool {
			return lastSignal >= 0 && uint64(lastSignal) >= r.tail
		}
		for step := range 20000 {
			switch a := rng.IntN(10); {
			case a < 4: // post a chain
				n := 1 + rng.IntN(cfg.maxChain)
				res, ok := r.Reserve(n, rng.IntN(8) == 0)
				if !ok {
					refusals++
					if !signaledOutstanding() {
						t.Fatalf("depth %d step %d: Reserve(%d) refused with %d outstanding and no signaled WR among them",
							cfg.depth, step, n, r.Outstanding())
					}
					break
				}
				for i := range res.N {
					w := res.First + uint64(i)
					*r.Slot(w) = w*3 + 1
					sig := res.Signal && w == res.Last()
					sq = append(sq, wr{w, sig})
					if sig {
						lastSignal = int64(w)
					}
				}
				posted += uint64(res.N)
			case a < 7: // the device executes the oldest WR
				if len(sq) > 0 {
					if sq[0].signaled {
						cq = append(cq, sq[0].wrid)
					}
					sq = sq[1:]
				}
			case a < 9: // the transport polls one completion
				if len(cq) > 0 {
					if _, err := r.Complete(cq[0], retire); err != nil {
						t.Fatal(err)
					}
					cq = cq[1:]
				}
			default: // rarely, the QP fails: everything left completes flushed
				if rng.IntN(50) != 0 {
					break
				}
				for _, w := range sq {
					cq = append(cq, w.wrid)
				}
				sq = nil
				for _, w := range cq {
					if _, err := r.Complete(w, retire); err != nil {
						t.Fatal(err)
					}
				}
				cq = nil
				// Unsignaled WRs that executed before the failure produce
				// no completion; the sentinel's flush proves them done.
				r.Flush(retire)
				if r.Outstanding() != 0 || next != posted {
					t.Fatalf("%d WRs outstanding after the flush", r.Outstanding())
				}
			}
			if r.Outstanding() > cfg.depth {
				t.Fatalf("%d WRs outstanding on a queue of %d", r.Outstanding(), cfg.depth)
			}
			if uint64(r.Outstanding()) != posted-next {
				t.Fatalf("outstanding %d, model %d", r.Outstanding(), posted-next)
			}
			if trailing := int(posted - max(uint64(lastSignal+1), next)); trailing > cfg.depth-cfg.maxChain {
				t.Fatalf("%d WRs after the last signaled one (limit %d)", trailing, cfg.depth-cfg.maxChain)
			}
		}
		if next < 1000 {
			t.Errorf("depth %d: only %d WRs retired", cfg.depth, next)
		}
		if refusals == 0 && cfg.depth < 16 {
			t.Errorf("depth %d: the queue never filled; the test proves nothing", cfg.depth)
		}
	}
}

func TestRingNoAllocs(t *testing.T) {
	r := NewSendContextRing[wrMeta](64, 4)
	var released int
	allocs := testing.AllocsPerRun(1000, func() {
		res, ok := r.Reserve(3, true)
		if !ok {
			t.Fatal("no room")
		}
		r.Slot(res.Last()).wrid = res.Last()
		if _, err := r.Complete(res.Last(), func(w uint64, m *wrMeta) { released++ }); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per reserve/complete", allocs)
	}
}

func BenchmarkRingReserveComplete(b *testing.B) {
	r := NewSendContextRing[wrMeta](128, 4)
	var released int
	retire := func(w uint64, m *wrMeta) { released++ }
	b.ReportAllocs()
	for b.Loop() {
		res, _ := r.Reserve(3, false)
		*r.Slot(res.Last()) = wrMeta{wrid: res.Last()}
		if res.Signal {
			r.Complete(res.Last(), retire)
		}
	}
}
