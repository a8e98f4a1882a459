package xprt

import "time"

// replyTimeouts is the transport's one timer for its posted calls' reply
// timeouts (Config.Timeout). Every call gets the same timeout from its
// post, so the posted calls, kept in the order they were posted, pass
// their deadlines in that order: one timer set for the first deadline
// serves them all. A call costs two list operations instead of a timer of
// its own (on the test bed a timer's allocation and its heap insertion and
// removal were a few percent of the mount server's Go CPU per 4 KiB read).
// All of it is guarded by Transport.mu.
type replyTimeouts struct {
	head, tail *call
	timer      *time.Timer // nil until the first post
	armed      bool        // timer is set, for the head's deadline or earlier
}

// startReplyTimeoutLocked (re)starts cl's reply timeout: posted now
// (Transport.mu held).
func (t *Transport) startReplyTimeoutLocked(cl *call) {
	q := &t.timeouts
	q.removeLocked(cl)
	cl.deadline = time.Now().Add(t.cfg.Timeout)
	cl.tqPrev, cl.tqNext = q.tail, nil
	if q.tail != nil {
		q.tail.tqNext = cl
	} else {
		q.head = cl
	}
	q.tail = cl
	if !q.armed {
		q.armed = true
		if q.timer == nil {
			q.timer = time.AfterFunc(t.cfg.Timeout, t.replyTimeoutsDue)
		} else {
			q.timer.Reset(t.cfg.Timeout)
		}
	}
}

// removeLocked takes cl off the queue, if it is on it (Transport.mu held).
// The timer stays set: it finds nothing due and sets itself for the next.
func (q *replyTimeouts) removeLocked(cl *call) {
	if q.head != cl && cl.tqPrev == nil {
		return // not on it: only the head has no predecessor
	}
	if cl.tqPrev != nil {
		cl.tqPrev.tqNext = cl.tqNext
	} else {
		q.head = cl.tqNext
	}
	if cl.tqNext != nil {
		cl.tqNext.tqPrev = cl.tqPrev
	} else {
		q.tail = cl.tqPrev
	}
	cl.tqPrev, cl.tqNext = nil, nil
}

// replyTimeoutsDue is the timer: every call past its deadline times out
// (callTimeout), and the timer is set for the next deadline, if any.
func (t *Transport) replyTimeoutsDue() {
	var due []*call
	t.mu.Lock()
	q := &t.timeouts
	now := time.Now()
	for q.head != nil && !q.head.deadline.After(now) {
		cl := q.head
		q.removeLocked(cl)
		due = append(due, cl)
	}
	if q.head != nil && !t.closed {
		q.timer.Reset(q.head.deadline.Sub(now))
	} else {
		q.armed = false
	}
	t.mu.Unlock()
	for _, cl := range due {
		t.callTimeout(cl)
	}
}

// stopReplyTimeoutsLocked stops the timer for good (Close, Transport.mu
// held).
func (t *Transport) stopReplyTimeoutsLocked() {
	if t.timeouts.timer != nil {
		t.timeouts.timer.Stop()
	}
	t.timeouts.armed = true // never set again
}
