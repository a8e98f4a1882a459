package nfs4

import "fmt"

// SlotTable is the client's side of a session's fore-channel slot table
// (RFC 8881 §2.10.6.1), the session's flow control: a request is sent only
// on a slot it holds, so at most Size requests are outstanding, and each
// slot's requests carry consecutive sequence ids. It is a plain type driven
// by calls, with no locking and no I/O; Client guards it with its session
// mutex.
//
// Invariants: every slot is free or held by exactly one request; the next
// request on a slot carries seq[slot]; Acquire hands out only slots below
// limit, the server's target_highest_slotid+1 and sr_highest_slotid+1
// capped by Size, and never fewer than one.
//
// A request's outcome decides its slot's next sequence id (Release):
// Replied (the server processed the SEQUENCE) advances it; NotSent (the
// request never left, or the server refused it before SEQUENCE took the
// slot: BADSESSION, BADSLOT, SEQ_MISORDERED) keeps it; Unknown (sent, no
// reply: a cancelled or timed-out call) advances it and counts the slot one
// more step uncertain. After k unknown outcomes the server expects one of
// the k+1 ids up to the slot's; the next use carries the highest, and each
// NFS4ERR_SEQ_MISORDERED steps back one (Misordered) until the server
// accepts, never below the id after the last one it answered, so no retry
// ever repeats an id the server executed.
type SlotTable struct {
	seq       []uint32
	busy      []bool
	uncertain []uint32 // unknown outcomes since the slot's last reply
	held      int
	limit     int
}

// Slot is a slot held for one request: its id and the sequence id the
// request carries.
type Slot struct {
	ID  uint32
	Seq uint32
}

// Outcome is what became of a request sent on a slot.
type Outcome int

const (
	// Replied: the server processed the SEQUENCE (any status after it).
	Replied Outcome = iota
	// NotSent: the server did not take the slot (the request never left, or
	// SEQUENCE itself failed).
	NotSent
	// Unknown: the request may or may not have reached the server.
	Unknown
)

// NewSlotTable returns a table of n slots (CREATE_SESSION's
// ca_maxrequests), each starting at sequence id 1 (RFC 8881 §18.36.3: the
// first SEQUENCE on a slot carries 1). It panics if n < 1.
func NewSlotTable(n int) *SlotTable {
	if n < 1 || n > 1<<16 {
		panic(fmt.Sprintf("nfs4: NewSlotTable(%d)", n))
	}
	t := &SlotTable{seq: make([]uint32, n), busy: make([]bool, n), uncertain: make([]uint32, n), limit: n}
	for i := range t.seq {
		t.seq[i] = 1
	}
	return t
}

// Size returns the number of slots.
func (t *SlotTable) Size() int { return len(t.seq) }

// Limit returns how many slots Acquire may hand out now.
func (t *SlotTable) Limit() int { return t.limit }

// Held returns the number of slots held.
func (t *SlotTable) Held() int { return t.held }

// Acquire takes the lowest free slot below the limit, as RFC 8881
// §2.10.6.1 advises (it keeps the server's reply cache small), and reports
// false when there is none.
func (t *SlotTable) Acquire() (Slot, bool) {
	for i := 0; i < t.limit; i++ {
		if !t.busy[i] {
			t.busy[i] = true
			t.held++
			return Slot{ID: uint32(i), Seq: t.seq[i]}, true
		}
	}
	return Slot{}, false
}

// HighestHeld returns the highest slot id held: SEQUENCE's
// sa_highest_slotid (RFC 8881 §18.46.3). It is 0 when none is.
func (t *SlotTable) HighestHeld() uint32 {
	for i := len(t.busy) - 1; i > 0; i-- {
		if t.busy[i] {
			return uint32(i)
		}
	}
	return 0
}

// Release frees slot s after its request's outcome. It panics if s is not
// held, a caller bug.
func (t *SlotTable) Release(s Slot, o Outcome) {
	if int(s.ID) >= len(t.busy) || !t.busy[s.ID] || t.seq[s.ID] != s.Seq {
		panic(fmt.Sprintf("nfs4: release of slot %d seq %d not held", s.ID, s.Seq))
	}
	t.busy[s.ID] = false
	t.held--
	switch o {
	case Replied:
		t.seq[s.ID]++
		t.uncertain[s.ID] = 0
	case Unknown:
		t.seq[s.ID]++
		t.uncertain[s.ID]++
	}
}

// Misordered handles NFS4ERR_SEQ_MISORDERED for held slot s: while
// requests with Unknown outcomes precede it (the server may never have seen
// them), the slot steps back one id, s is updated to carry it, and
// Misordered reports true: send again. Otherwise (the ids really disagree)
// it reports false and the slot keeps its id.
func (t *SlotTable) Misordered(s *Slot) bool {
	if int(s.ID) >= len(t.busy) || !t.busy[s.ID] || t.uncertain[s.ID] == 0 {
		return false
	}
	t.uncertain[s.ID]--
	t.seq[s.ID]--
	s.Seq = t.seq[s.ID]
	return true
}

// SetServerLimits applies a SEQUENCE reply's sr_highest_slotid and
// sr_target_highest_slotid (RFC 8881 §2.10.6.1, §18.46.3): the client uses
// no slot above either. The limit never drops below one slot nor grows
// beyond Size. Slots held above a lowered limit stay held until released.
func (t *SlotTable) SetServerLimits(highest, target uint32) {
	n := uint64(min(highest, target)) + 1
	t.limit = int(min(max(n, 1), uint64(len(t.seq))))
}
