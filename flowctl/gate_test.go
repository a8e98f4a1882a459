package flowctl

import (
	"math/rand/v2"
	"slices"
	"testing"
)

type admitted struct {
	id string
	n  int
}

func TestCongestionGate(t *testing.T) {
	type step struct {
		op    string // "admit", "free", "cancel", "reset"
		id    string
		n     int
		ok    bool       // admit: admitted at once; cancel: was waiting
		wake  []admitted // ids admitted by free, cancel or reset
		room  int
		queue int
	}
	tests := []struct {
		name     string
		capacity int
		steps    []step
		waits    uint64
	}{
		{"fits", 10, []step{
			{op: "admit", id: "a", n: 3, ok: true, room: 7},
			{op: "admit", id: "b", n: 7, ok: true, room: 0},
			{op: "free", n: 10, room: 10},
		}, 0},
		{"waits and is woken", 10, []step{
			{op: "admit", id: "a", n: 8, ok: true, room: 2},
			{op: "admit", id: "b", n: 4, ok: false, room: 2, queue: 1},
			{op: "free", n: 1, room: 3, queue: 1},
			{op: "free", n: 1, wake: []admitted{{"b", 4}}, room: 0},
		}, 1},
		{"no overtaking", 10, []step{
			{op: "admit", id: "a", n: 9, ok: true, room: 1},
			{op: "admit", id: "big", n: 6, ok: false, room: 1, queue: 1},
			{op: "admit", id: "small", n: 1, ok: false, room: 1, queue: 2}, // fits, but big is first
			{op: "free", n: 4, room: 5, queue: 2},                          // small still may not pass
			{op: "free", n: 2, wake: []admitted{{"big", 6}, {"small", 1}}, room: 0},
		}, 2},
		{"batch wake in order", 6, []step{
			{op: "admit", id: "a", n: 6, ok: true, room: 0},
			{op: "admit", id: "b", n: 2, ok: false, queue: 1},
			{op: "admit", id: "c", n: 2, ok: false, queue: 2},
			{op: "admit", id: "d", n: 3, ok: false, queue: 3},
			{op: "free", n: 6, wake: []admitted{{"b", 2}, {"c", 2}}, room: 2, queue: 1},
			{op: "free", n: 1, wake: []admitted{{"d", 3}}, room: 0},
		}, 3},
		{"cancel head admits the next", 10, []step{
			{op: "admit", id: "a", n: 7, ok: true, room: 3},
			{op: "admit", id: "big", n: 9, ok: false, room: 3, queue: 1},
			{op: "admit", id: "b", n: 2, ok: false, room: 3, queue: 2},
			{op: "admit", id: "c", n: 1, ok: false, room: 3, queue: 3},
			{op: "cancel", id: "big", ok: true, wake: []admitted{{"b", 2}, {"c", 1}}, room: 0},
			{op: "cancel", id: "big", ok: false, room: 0},
		}, 3},
		{"cancel in the middle", 4, []step{
			{op: "admit", id: "a", n: 4, ok: true},
			{op: "admit", id: "b", n: 2, ok: false, queue: 1},
			{op: "admit", id: "c", n: 3, ok: false, queue: 2},
			{op: "admit", id: "d", n: 1, ok: false, queue: 3},
			{op: "cancel", id: "c", ok: true, queue: 2},
			{op: "free", n: 3, wake: []admitted{{"b", 2}, {"d", 1}}, room: 0},
		}, 3},
		{"reset frees everything and keeps the order", 5, []step{
			{op: "admit", id: "a", n: 5, ok: true},
			{op: "admit", id: "b", n: 4, ok: false, queue: 1},
			{op: "admit", id: "c", n: 2, ok: false, queue: 2},
			{op: "reset", wake: []admitted{{"b", 4}}, room: 1, queue: 1},
			{op: "free", n: 4, wake: []admitted{{"c", 2}}, room: 3},
		}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewCongestionGate[string](tc.capacity)
			for i, s := range tc.steps {
				var woken []admitted
				wake := func(id string, n int) { woken = append(woken, admitted{id, n}) }
				switch s.op {
				case "admit":
					if got := g.Admit(s.id, s.n); got != s.ok {
						t.Fatalf("step %d: Admit(%s, %d) = %v", i, s.id, s.n, got)
					}
				case "free":
					if got := g.Free(s.n, wake); got != len(s.wake) {
						t.Fatalf("step %d: Free = %d, want %d", i, got, len(s.wake))
					}
				case "cancel":
					if got := g.Cancel(s.id, wake); got != s.ok {
						t.Fatalf("step %d: Cancel(%s) = %v", i, s.id, got)
					}
				case "reset":
					if got := g.Reset(wake); got != len(s.wake) {
						t.Fatalf("step %d: Reset = %d, want %d", i, got, len(s.wake))
					}
				}
				if !slices.Equal(woken, s.wake) {
					t.Fatalf("step %d (%s): woke %v, want %v", i, s.op, woken, s.wake)
				}
				if g.Room() != s.room || g.Waiting() != s.queue {
					t.Fatalf("step %d (%s): room %d waiting %d, want %d %d", i, s.op, g.Room(), g.Waiting(), s.room, s.queue)
				}
			}
			if g.Waits() != tc.waits {
				t.Fatalf("Waits %d, want %d", g.Waits(), tc.waits)
			}
		})
	}
}

func TestCongestionGatePanics(t *testing.T) {
	expectPanic(t, "capacity 0", func() { NewCongestionGate[int](0) })
	g := NewCongestionGate[int](4)
	expectPanic(t, "Admit 0", func() { g.Admit(1, 0) })
	expectPanic(t, "Admit beyond capacity", func() { g.Admit(1, 5) })
	expectPanic(t, "Free unused room", func() { g.Free(1, nil) })
	g.Admit(1, 2)
	expectPanic(t, "Free more than taken", func() { g.Free(3, nil) })
	expectPanic(t, "Free negative", func() { g.Free(-1, nil) })
}

// TestCongestionGateRandom checks the gate against a direct model: FIFO
// admission without overtaking, room never negative nor above capacity,
// and every id admitted exactly once unless cancelled.
func TestCongestionGateRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 20 {
		capacity := 1 + rng.IntN(40)
		g := NewCongestionGate[int](capacity)
		type call struct{ id, n int }
		var queue []call          // model of the waiters
		inflight := map[int]int{} // admitted id -> WRs still held
		room := capacity
		nextID := 0
		admittedSet := map[int]bool{}
		cancelled := map[int]bool{}
		wake := func(id, n int) {
			if len(queue) == 0 || queue[0].id != id || queue[0].n != n {
				t.Fatalf("admitted %d (%d WRs) out of FIFO order; queue head %v", id, n, queue[:min(1, len(queue))])
			}
			if admittedSet[id] || cancelled[id] {
				t.Fatalf("id %d admitted twice or after cancel", id)
			}
			queue = queue[1:]
			room -= n
			admittedSet[id] = true
			inflight[id] = n
		}
		for range 3000 {
			switch a := rng.IntN(10); {
			case a < 4:
				id, n := nextID, 1+rng.IntN(capacity)
				nextID++
				ok := g.Admit(id, n)
				want := len(queue) == 0 && n <= room
				if ok != want {
					t.Fatalf("Admit(%d, %d) = %v with room %d and %d waiting", id, n, ok, room, len(queue))
				}
				if ok {
					room -= n
					admittedSet[id] = true
					inflight[id] = n
				} else {
					queue = append(queue, call{id, n})
				}
			case a < 8:
				// An admitted RPC returns part or all of its room.
				for id, held := range inflight {
					n := 1 + rng.IntN(held)
					if held -= n; held == 0 {
						delete(inflight, id)
					} else {
						inflight[id] = held
					}
					room += n
					g.Free(n, wake)
					break
				}
			case a < 9:
				if len(queue) > 0 {
					i := rng.IntN(len(queue))
					c := queue[i]
					queue = slices.Delete(queue, i, i+1)
					cancelled[c.id] = true
					// Removing the head may admit the next ones; wake checks the model's new head.
					if !g.Cancel(c.id, wake) {
						t.Fatalf("Cancel(%d) of a waiter returned false", c.id)
					}
				} else if g.Cancel(-1, wake) {
					t.Fatal("Cancel of an unknown id returned true")
				}
			default:
				if rng.IntN(30) == 0 {
					clear(inflight)
					room = capacity
					g.Reset(wake)
				}
			}
			if g.Room() != room || g.Waiting() != len(queue) {
				t.Fatalf("gate room %d waiting %d, model %d %d", g.Room(), g.Waiting(), room, len(queue))
			}
			if room < 0 || room > capacity {
				t.Fatalf("room %d outside [0, %d]", room, capacity)
			}
			// Nothing waits that could have been admitted.
			if len(queue) > 0 && queue[0].n <= room {
				t.Fatalf("head %v waits with room %d", queue[0], room)
			}
		}
	}
}

func TestCongestionGateNoAllocs(t *testing.T) {
	g := NewCongestionGate[uint64](8)
	var woken int
	wake := func(uint64, int) { woken++ }
	// Warm up the waiter queue's capacity.
	g.Admit(0, 8)
	for i := range uint64(4) {
		g.Admit(i+1, 2)
	}
	g.Free(8, wake)
	g.Free(8, wake)
	allocs := testing.AllocsPerRun(1000, func() {
		g.Admit(1, 8)
		g.Admit(2, 3)
		g.Admit(3, 3)
		g.Free(8, wake)
		g.Free(6, wake)
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per admission cycle", allocs)
	}
}

func BenchmarkCongestionGate(b *testing.B) {
	g := NewCongestionGate[uint64](128)
	var woken int
	wake := func(uint64, int) { woken++ }
	b.ReportAllocs()
	var id uint64
	for b.Loop() {
		id++
		if g.Admit(id, 3) {
			g.Free(3, wake)
		}
	}
}
