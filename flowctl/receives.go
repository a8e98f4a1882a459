package flowctl

import "fmt"

// Receives accounts for the receive queue. Every reply the
// server sends consumes one posted receive, so the transport keeps at
// least as many posted as it has credits (each outstanding call may be
// answered at once), plus a few extra for backchannel calls and headroom.
//
// Every receive completion, successful, malformed, for an unknown xid or
// flushed, consumes a posted receive: the transport calls Consume for each.
// Need says how many to post: nothing while the deficit is smaller than a
// batch, the whole deficit once it reaches a batch, and the whole deficit at
// once whenever fewer receives are posted than credits are granted.
type Receives struct {
	depth   int // receive-queue depth: never more posted
	extra   int // kept beyond the credit grant
	batch   int
	credits int
	posted  int
}

// NewReceives returns the accounting for a receive queue of depth entries
// that keeps extra receives beyond the credit grant and reposts in batches
// of batch, in the state of a new connection (one credit, nothing posted).
// It panics unless depth >= 1, extra >= 0 and batch >= 1.
func NewReceives(depth, extra, batch int) *Receives {
	if depth < 1 || extra < 0 || batch < 1 {
		panic(fmt.Sprintf("flowctl: NewReceives(%d, %d, %d): invalid", depth, extra, batch))
	}
	r := &Receives{depth: depth, extra: extra, batch: batch}
	r.Reset()
	return r
}

// Reset starts a new connection: nothing is posted and one credit is
// granted. Call it once the old queue pair's receives have all been
// flushed.
func (r *Receives) Reset() {
	r.posted = 0
	r.credits = 1
}

// SetCredits records the credit grant in force (Credits.Grant's result).
func (r *Receives) SetCredits(granted int) { r.credits = max(granted, 1) }

// Target returns the number of receives the queue should hold: the grant
// plus the extra, at most the queue depth.
func (r *Receives) Target() int { return min(r.credits+r.extra, r.depth) }

// Posted returns the number of receives posted and not yet completed.
func (r *Receives) Posted() int { return r.posted }

// Consume records one receive completion. It panics if none was posted:
// that is an accounting bug in the caller.
func (r *Receives) Consume() {
	if r.posted == 0 {
		panic("flowctl: Receives.Consume with no receive posted")
	}
	r.posted--
}

// Need returns how many receives to post now: zero while the queue holds
// at least the grant and lacks fewer than a batch of its target, otherwise
// the whole deficit.
func (r *Receives) Need() int {
	deficit := r.Target() - r.posted
	if deficit <= 0 {
		return 0
	}
	if deficit >= r.batch || r.posted < min(r.credits, r.depth) {
		return deficit
	}
	return 0
}

// Post records that n receives were posted. It panics if that would
// overfill the queue.
func (r *Receives) Post(n int) {
	if n < 0 || r.posted+n > r.depth {
		panic(fmt.Sprintf("flowctl: Receives.Post(%d) with %d of %d posted", n, r.posted, r.depth))
	}
	r.posted += n
}
