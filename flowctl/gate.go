package flowctl

import (
	"fmt"
	"slices"
)

// CongestionGate admits RPCs to the send queue. An RPC is
// admitted only when the queue has room for its whole compound: every
// BIND, the SEND, and the LOCAL_INVs its reply may need. Reserving the
// LOCAL_INVs at admission means the reply handler always finds room for
// them, so work driven by receives never waits on the send queue.
//
// An RPC that does not fit is not failed: it waits in FIFO order and is
// admitted, strictly in order, as Free returns room. A small compound never
// overtakes a larger one queued before it, so a large RPC cannot starve.
//
// The gate is plain accounting. The transport wraps it with its mutex and
// one channel (or condition) per waiter: Admit returning false means "wait",
// and the admit callbacks of Free, Cancel and Reset name the waiters to
// wake. K identifies an RPC (a slot index, an xid, a pointer); ids must be
// unique among waiters.
type CongestionGate[K comparable] struct {
	capacity int
	room     int
	waiters  []gateWaiter[K] // FIFO: waiters[0] is the oldest
	waits    uint64
	cancels  uint64
}

type gateWaiter[K comparable] struct {
	id K
	n  int
}

// NewCongestionGate returns a gate over a send queue of capacity WRs, all
// of them free. It panics if capacity is less than 1.
func NewCongestionGate[K comparable](capacity int) *CongestionGate[K] {
	if capacity < 1 {
		panic(fmt.Sprintf("flowctl: NewCongestionGate(%d): capacity must be at least 1", capacity))
	}
	return &CongestionGate[K]{capacity: capacity, room: capacity}
}

// Admit asks to admit RPC id, whose compound needs n WRs. If nothing is
// waiting and the queue has room for n, the room is taken and Admit returns
// true. Otherwise id joins the end of the queue, the wait is counted, and
// Admit returns false: id is admitted later by Free, Cancel or Reset, or
// leaves the queue by Cancel.
//
// It panics unless 1 <= n <= Capacity: a compound that can never fit would
// block every RPC behind it.
func (g *CongestionGate[K]) Admit(id K, n int) bool {
	if n < 1 || n > g.capacity {
		panic(fmt.Sprintf("flowctl: Admit of a %d-WR compound with capacity %d", n, g.capacity))
	}
	if len(g.waiters) == 0 && n <= g.room {
		g.room -= n
		return true
	}
	g.waiters = append(g.waiters, gateWaiter[K]{id: id, n: n})
	g.waits++
	return false
}

// Free returns n WRs of room: WRs retired by send completions, or reserved
// WRs an admitted RPC turned out not to need (a LOCAL_INV made unnecessary
// by remote invalidation, a chain that was never posted). It then admits
// waiters from the head of the queue while they fit, calling admit with
// each one's id and WR count in FIFO order, and returns how many it
// admitted. admit must not call back into the gate.
//
// It panics if the room would exceed the capacity: more was freed than was
// taken.
func (g *CongestionGate[K]) Free(n int, admit func(id K, n int)) int {
	if n < 0 || n > g.capacity-g.room {
		panic(fmt.Sprintf("flowctl: Free(%d) with %d of %d WRs in use", n, g.capacity-g.room, g.capacity))
	}
	g.room += n
	return g.admitWaiters(admit)
}

// Cancel removes id from the queue, for an RPC whose context ended while it
// waited, and reports whether it was waiting. Waiters behind it that now
// fit at the head are admitted through admit, as in Free.
func (g *CongestionGate[K]) Cancel(id K, admit func(id K, n int)) bool {
	for i := range g.waiters {
		if g.waiters[i].id == id {
			g.waiters = slices.Delete(g.waiters, i, i+1) // clears the vacated element
			g.cancels++
			if i == 0 {
				g.admitWaiters(admit)
			}
			return true
		}
	}
	return false
}

// Reset starts a new connection: the send queue is empty, so all its room
// is free. Admitted RPCs of the old connection are forgotten; they must not
// Free their room afterwards. Waiters keep their order and are admitted
// through admit while they fit. Reset returns how many it admitted.
func (g *CongestionGate[K]) Reset(admit func(id K, n int)) int {
	g.room = g.capacity
	return g.admitWaiters(admit)
}

func (g *CongestionGate[K]) admitWaiters(admit func(K, int)) int {
	k := 0
	for k < len(g.waiters) && g.waiters[k].n <= g.room {
		w := g.waiters[k]
		g.room -= w.n
		if admit != nil {
			admit(w.id, w.n)
		}
		k++
	}
	if k > 0 {
		rest := copy(g.waiters, g.waiters[k:])
		clear(g.waiters[rest:])
		g.waiters = g.waiters[:rest]
	}
	return k
}

// Capacity returns the send-queue size the gate admits against.
func (g *CongestionGate[K]) Capacity() int { return g.capacity }

// Room returns the WRs not taken by admitted RPCs.
func (g *CongestionGate[K]) Room() int { return g.room }

// Waiting returns the number of RPCs in the queue.
func (g *CongestionGate[K]) Waiting() int { return len(g.waiters) }

// Waits counts the RPCs that had to wait for room (congestion waits).
func (g *CongestionGate[K]) Waits() uint64 { return g.waits }

// Cancels counts the waiters removed by Cancel.
func (g *CongestionGate[K]) Cancels() uint64 { return g.cancels }
