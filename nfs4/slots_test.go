package nfs4

import "testing"

func TestSlotTableReuseAndSequence(t *testing.T) {
	st := NewSlotTable(3)
	a, _ := st.Acquire()
	b, _ := st.Acquire()
	if a != (Slot{0, 1}) || b != (Slot{1, 1}) {
		t.Fatalf("first slots %+v %+v, want slot 0 and 1 at seq 1", a, b)
	}
	if h := st.HighestHeld(); h != 1 {
		t.Errorf("highest held %d, want 1", h)
	}
	st.Release(a, Replied)
	a2, _ := st.Acquire()
	if a2 != (Slot{0, 2}) {
		t.Errorf("slot 0 after a reply: %+v, want seq 2 (lowest free slot reused)", a2)
	}
	st.Release(b, NotSent)
	b2, _ := st.Acquire()
	if b2 != (Slot{1, 1}) {
		t.Errorf("slot 1 after a request never sent: %+v, want seq 1 again", b2)
	}
	c, _ := st.Acquire()
	if _, ok := st.Acquire(); ok {
		t.Error("a fourth slot from a table of three")
	}
	if st.Held() != 3 || st.HighestHeld() != 2 {
		t.Errorf("held %d highest %d", st.Held(), st.HighestHeld())
	}
	st.Release(c, Replied)
	st.Release(b2, Replied)
	if h := st.HighestHeld(); h != 0 {
		t.Errorf("highest held %d with only slot 0 held", h)
	}
}

func TestSlotTableServerLimits(t *testing.T) {
	st := NewSlotTable(8)
	st.SetServerLimits(7, 1) // target_highest_slotid 1: two slots
	if st.Limit() != 2 {
		t.Fatalf("limit %d, want 2", st.Limit())
	}
	x, _ := st.Acquire()
	y, _ := st.Acquire()
	if _, ok := st.Acquire(); ok {
		t.Error("a slot above the server's target")
	}
	st.SetServerLimits(0, 5) // highest_slotid 0 bounds too
	if st.Limit() != 1 {
		t.Errorf("limit %d after sr_highest_slotid 0, want 1", st.Limit())
	}
	st.Release(y, Replied) // held above the new limit: still released
	st.Release(x, Replied)
	st.SetServerLimits(100, 100)
	if st.Limit() != 8 {
		t.Errorf("limit %d, want the table's 8 (it never grows past Size)", st.Limit())
	}
	st.SetServerLimits(0, 0)
	if st.Limit() != 1 {
		t.Errorf("limit %d, never below one slot", st.Limit())
	}
}

func TestSlotTableUnknownOutcome(t *testing.T) {
	st := NewSlotTable(1)
	s, _ := st.Acquire()
	// A retry after connection loss reuses the held slot and its seq: the
	// table is not consulted. A call given up (Unknown) advances it.
	st.Release(s, Unknown)
	s, _ = st.Acquire()
	if s.Seq != 2 {
		t.Fatalf("seq %d after an unknown outcome, want 2", s.Seq)
	}
	// The server never saw seq 1: it answers SEQ_MISORDERED to 2, and the
	// slot steps back once.
	if !st.Misordered(&s) || s.Seq != 1 {
		t.Fatalf("Misordered after an unknown outcome: seq %d, want a retry with 1", s.Seq)
	}
	if st.Misordered(&s) {
		t.Error("a second step back: the ids really disagree")
	}
	st.Release(s, Replied)
	s, _ = st.Acquire()
	if s.Seq != 2 {
		t.Errorf("seq %d after the retried request's reply, want 2", s.Seq)
	}
	if st.Misordered(&s) {
		t.Error("a step back on a slot whose last outcome was known")
	}
	st.Release(s, Replied) // seq 2 answered: the server expects 3
	// Two unknown outcomes: the server expects 3, 4 or 5; the client tries
	// 5, then 4, then 3, and no lower.
	s, _ = st.Acquire()
	st.Release(s, Unknown)
	s, _ = st.Acquire()
	st.Release(s, Unknown)
	s, _ = st.Acquire()
	var tried []uint32
	for {
		tried = append(tried, s.Seq)
		if !st.Misordered(&s) {
			break
		}
	}
	if len(tried) != 3 || tried[0] != 5 || tried[2] != 3 {
		t.Errorf("ids tried after two unknown outcomes: %v, want [5 4 3]", tried)
	}
}

func TestSlotTableReleasePanicsOnCallerBug(t *testing.T) {
	st := NewSlotTable(2)
	s, _ := st.Acquire()
	st.Release(s, Replied)
	defer func() {
		if recover() == nil {
			t.Error("releasing a slot twice did not panic")
		}
	}()
	st.Release(s, Replied)
}
