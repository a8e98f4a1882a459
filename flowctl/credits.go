package flowctl

import "fmt"

// Credits is the requester's credit accounting (RFC 8166 §3.3.1). The
// responder grants, in the rdma_credit field of each reply, how many calls
// the requester may have outstanding; the requester never has more
// outstanding than the grant it last received.
//
// Slots is the requester's own limit (the number of RPC slots, also the
// credit value it asks for in its calls). A grant is clamped to [1, slots]:
// below 1 the transport could never make progress, and above slots the
// requester has no use for it. The grant restarts at 1 on every
// connection (RFC 8166 §3.3.3).
type Credits struct {
	slots       uint32
	granted     uint32
	outstanding uint32
}

// NewCredits returns the credit accounting for a transport with the given
// number of RPC slots, in the state of a new connection. It panics if slots
// is less than 1.
func NewCredits(slots int) *Credits {
	if slots < 1 || uint64(slots) > 1<<32-1 {
		panic(fmt.Sprintf("flowctl: NewCredits(%d): slots out of range", slots))
	}
	c := &Credits{slots: uint32(slots)}
	c.Reset()
	return c
}

// Reset starts a new connection: the grant is 1 and no call is outstanding.
// Calls acquired on the previous connection are forgotten; they must not be
// released afterwards (they are retransmitted, acquiring again, on the new
// connection).
func (c *Credits) Reset() {
	c.granted = 1
	c.outstanding = 0
}

// Grant records the credit value of a received reply, clamped to
// [1, Slots], and returns the grant now in force. When it shrinks below the
// calls already outstanding, no call is admitted until enough of them
// complete.
func (c *Credits) Grant(n uint32) uint32 {
	c.granted = min(max(n, 1), c.slots)
	return c.granted
}

// TryAcquire takes a credit for a new call and reports whether one was
// available.
func (c *Credits) TryAcquire() bool {
	if c.outstanding >= c.granted {
		return false
	}
	c.outstanding++
	return true
}

// Release returns the credit of a completed call. It panics if no call is
// outstanding: that is an accounting bug in the caller.
func (c *Credits) Release() {
	if c.outstanding == 0 {
		panic("flowctl: Credits.Release without a matching TryAcquire")
	}
	c.outstanding--
}

// Slots returns the configured maximum of outstanding calls.
func (c *Credits) Slots() int { return int(c.slots) }

// Granted returns the grant in force.
func (c *Credits) Granted() int { return int(c.granted) }

// Outstanding returns the number of calls holding a credit.
func (c *Credits) Outstanding() int { return int(c.outstanding) }

// Available returns how many more calls TryAcquire would admit now.
func (c *Credits) Available() int {
	if c.outstanding >= c.granted {
		return 0
	}
	return int(c.granted - c.outstanding)
}
