package flowctl

import (
	"errors"
	"fmt"
)

// Signaler decides which send work requests are posted signaled
// (IBV_SEND_SIGNALED). Signaling every WR costs a completion per WR; the
// transport instead signals about every half send queue, and one signaled
// completion then retires every earlier unsignaled WR.
//
// It decides per chain: only the last WR of a chain is ever signaled, so
// the signaled completion is the SEND's, whose buffer it releases. A chain
// is signaled when the caller needs its resources back promptly, or when
// the WRs posted unsignaled since the last signaled one would otherwise
// reach the interval.
//
// The interval is at most half the queue and at most depth-maxChain+1.
// Hence at most depth-maxChain WRs are ever outstanding with no signaled WR
// after them, and whenever a chain of up to maxChain WRs does not fit, some
// outstanding WR is signaled and its completion is on its way: the queue
// can never fill with unsignaled WRs alone.
type Signaler struct {
	interval   int
	unsignaled int // WRs posted since the last signaled one
}

// NewSignaler returns the Signaler for a send queue of depth WRs whose
// chains hold at most maxChain WRs. It panics unless 1 <= maxChain <= depth.
func NewSignaler(depth, maxChain int) Signaler {
	if maxChain < 1 || maxChain > depth {
		panic(fmt.Sprintf("flowctl: NewSignaler(%d, %d): need 1 <= maxChain <= depth", depth, maxChain))
	}
	return Signaler{interval: max(1, min(depth/2, depth-maxChain+1))}
}

// Chain records a chain of n WRs about to be posted and reports whether its
// last WR must be signaled. prompt asks for a signal regardless of the
// interval: the caller is waiting for the chain's completion (a LOCAL_INV
// before a reply can complete, a send buffer a finished RPC is waiting to
// release).
func (s *Signaler) Chain(n int, prompt bool) (signalLast bool) {
	if prompt || s.unsignaled+n >= s.interval {
		s.unsignaled = 0
		return true
	}
	s.unsignaled += n
	return false
}

// Reset forgets the unsignaled WRs, after they have all completed or been
// flushed.
func (s *Signaler) Reset() { s.unsignaled = 0 }

// Interval returns the number of WRs after which a chain is signaled.
func (s *Signaler) Interval() int { return s.interval }

// Unsignaled returns the number of WRs posted since the last signaled one.
func (s *Signaler) Unsignaled() int { return s.unsignaled }

// ErrUnknownWRID reports a completion for a wrid that is not outstanding:
// already retired, never reserved, or not from this ring.
var ErrUnknownWRID = errors.New("flowctl: completion for a wrid that is not outstanding")

// Reservation is a chain of consecutive wrids reserved in a SendContextRing:
// First, First+1, ..., First+N-1, in posting order.
type Reservation struct {
	First uint64
	N     int
	// Signal says the last WR of the chain must be posted signaled.
	Signal bool
}

// Last returns the wrid of the chain's last WR: the one to signal.
func (r Reservation) Last() uint64 { return r.First + uint64(r.N) - 1 }

// SendContextRing holds the metadata of every outstanding send work request
// in a ring as long as the send queue. Each WR's wr_id is
// its wrid: a wrapping 64-bit sequence number. The outstanding wrids are
// consecutive and occupy consecutive slots, so a completion is matched to
// its metadata by arithmetic, without a lookup or an allocation.
//
// Room in the send queue is derived only from completions: Reserve takes
// slots, and Complete, given the wrid of a completion, retires every WR up
// to and including it, the unsignaled ones before it included, handing each
// one's metadata back so that its buffers can be released (a send buffer
// belongs to the device until then). The ring never relies
// on ibv_post_send failing when the queue is full.
//
// The ring signals WRs through its Signaler (see Reserve); size the QP's
// send queue at least depth WRs, plus one for the drain sentinel if that is
// posted outside the ring.
type SendContextRing[T any] struct {
	meta      []T
	head      uint64 // wrid of the next WR to reserve
	tail      uint64 // wrid of the oldest outstanding WR
	tailSlot  int    // slot of tail
	maxChain  int
	sig       Signaler
	exhausted uint64
}

// NewSendContextRing returns an empty ring for a send queue of depth WRs
// whose chains hold at most maxChain WRs. It panics unless
// 1 <= maxChain <= depth.
func NewSendContextRing[T any](depth, maxChain int) *SendContextRing[T] {
	sig := NewSignaler(depth, maxChain)
	return &SendContextRing[T]{
		meta:     make([]T, depth),
		maxChain: maxChain,
		sig:      sig,
	}
}

// Depth returns the number of slots: the send-queue depth.
func (r *SendContextRing[T]) Depth() int { return len(r.meta) }

// MaxChain returns the largest chain Reserve accepts.
func (r *SendContextRing[T]) MaxChain() int { return r.maxChain }

// Outstanding returns the number of WRs reserved and not yet retired.
func (r *SendContextRing[T]) Outstanding() int { return int(r.head - r.tail) }

// Room returns the number of WRs that can be reserved now.
func (r *SendContextRing[T]) Room() int { return len(r.meta) - r.Outstanding() }

// Exhausted counts the Reserve calls refused for lack of room.
func (r *SendContextRing[T]) Exhausted() uint64 { return r.exhausted }

// Signaler returns the ring's signaling state, for inspection.
func (r *SendContextRing[T]) Signaler() Signaler { return r.sig }

// Reserve reserves n consecutive slots for a chain of n WRs about to be
// posted in one ibv_post_send, and reports whether the send queue had room.
// The caller fills each WR's metadata through Slot, posts the WRs with
// wr_id First..Last in order, and must post the last one signaled when
// Signal is set (signaling more WRs is harmless, signaling fewer can
// deadlock). prompt asks for that signal whatever the interval (see
// Signaler.Chain).
//
// Reserve panics unless 1 <= n <= MaxChain: a chain that can never fit is a
// bug in the caller, not a state to wait out.
func (r *SendContextRing[T]) Reserve(n int, prompt bool) (Reservation, bool) {
	if n < 1 || n > r.maxChain {
		panic(fmt.Sprintf("flowctl: Reserve(%d) outside [1, %d]", n, r.maxChain))
	}
	if n > r.Room() {
		r.exhausted++
		return Reservation{}, false
	}
	res := Reservation{First: r.head, N: n, Signal: r.sig.Chain(n, prompt)}
	r.head += uint64(n)
	return res, true
}

// outstanding reports whether wrid is reserved and not yet retired.
func (r *SendContextRing[T]) outstanding(wrid uint64) bool {
	return wrid-r.tail < r.head-r.tail
}

// Slot returns the metadata slot of an outstanding WR. The pointer is valid
// until the WR is retired. It panics if wrid is not outstanding.
func (r *SendContextRing[T]) Slot(wrid uint64) *T {
	if !r.outstanding(wrid) {
		panic(fmt.Sprintf("flowctl: Slot(%d): wrid not outstanding", wrid))
	}
	return &r.meta[r.slot(wrid)]
}

// slot returns the index in meta of an outstanding wrid.
func (r *SendContextRing[T]) slot(wrid uint64) int {
	return (r.tailSlot + int(wrid-r.tail)) % len(r.meta)
}

// Complete handles the send completion of wrid: a signaled WR's completion,
// or any WR's error or flush completion. It retires every outstanding WR up
// to and including wrid, oldest first, calling retire (if not nil) with
// each one's wrid and metadata; the slot is cleared after retire returns,
// and retire must not call back into the ring. It returns the number of WRs retired, which is the send-queue room
// regained.
//
// Completions arrive in posting order, so a wrid that is not outstanding
// means a bug or a completion from another queue: Complete then retires
// nothing and returns ErrUnknownWRID.
func (r *SendContextRing[T]) Complete(wrid uint64, retire func(wrid uint64, meta *T)) (int, error) {
	if !r.outstanding(wrid) {
		return 0, ErrUnknownWRID
	}
	return r.retireThrough(wrid+1, retire), nil
}

// Flush retires every outstanding WR, oldest first, as Complete does, and
// resets the signaling state. Call it at teardown only after the drain
// sentinel's flush completion has proved the device is done with every WR.
// The wrid sequence continues, so a stale completion from the old queue is
// recognised as unknown.
func (r *SendContextRing[T]) Flush(retire func(wrid uint64, meta *T)) int {
	n := r.retireThrough(r.head, retire)
	r.sig.Reset()
	return n
}

func (r *SendContextRing[T]) retireThrough(end uint64, retire func(uint64, *T)) int {
	var zero T
	n := int(end - r.tail)
	for r.tail != end {
		m := &r.meta[r.tailSlot]
		if retire != nil {
			retire(r.tail, m)
		}
		*m = zero
		r.tail++
		if r.tailSlot++; r.tailSlot == len(r.meta) {
			r.tailSlot = 0
		}
	}
	return n
}
