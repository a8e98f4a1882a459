package xprt

import "fmt"

// callState is where one call is in its life. Every change goes through
// call.to, which refuses (and counts) a transition not drawn here:
//
//	          credit            windows, buffers,        chain
//	queued ──────────▶ admitted ───────────────────▶ registered ─────▶ posted
//	  ▲  ▲                │      SQ room (all at once)     │               │ │ reply matched
//	  │  └────────────────┴──────────── undo ──────────────┘               │ ▼
//	  │   (connection lost before posting, or the caller gave up)          │ replied ──▶ invalidating
//	  │                                                                    │   │               │
//	  └──────────────── teardown: retransmit on the next connection ◀──────┴───┴───────────────┤
//	                                                                       │   │               │
//	         caller gives up, no windows exposed                           ▼   ▼               ▼
//	posted ─────────────────────────────────────▶ abandoned ─────────────▶ done ◀──────────────┘
//	                                          (reply or teardown settles it)
//
// Who may touch the caller's memory (sunrpc.Request's Head, Bulk, Tail and
// ReplyBulk, and a borrowed Buffer) in each state:
//   - queued, admitted: the caller's goroutine reads Head, Bulk and Tail
//     (the marshal step copies them into registered memory).
//   - registered, posted: the device may read the send buffer and the
//     device and the server may access the windows: of the transport's own
//     I/O buffers, or of a buffer the caller borrowed (zero copy).
//   - replied, invalidating: as posted; the caller's goroutine does not
//     return while the call is in these states (the reply handler copies
//     the result into ReplyBulk when the call completes).
//   - done: nothing. Every window is invalid (remotely, locally with its
//     LOCAL_INV completion reaped, or destroyed after a drain).
//   - abandoned: the caller has returned. Only a call with no windows
//     (its whole reply comes inline, into the transport's receive buffers)
//     may be abandoned: a call with windows is settled by tearing its
//     connection down before its caller returns. The late reply, if any,
//     frees the credit and is discarded; nothing is copied anywhere.
type callState uint8

const (
	stQueued       callState = iota // waiting for a connection and a credit
	stAdmitted                      // holds a credit; taking buffers, windows, SQ room
	stRegistered                    // holds everything; windows bound (binds not yet posted)
	stPosted                        // BIND…BIND,SEND posted: the server may access the windows
	stReplied                       // the reply is matched and copied out of its receive
	stInvalidating                  // LOCAL_INVs posted; waiting for their completion
	stDone                          // completed or failed; no window of the call is valid
	stAbandoned                     // posted without windows; the caller gave up and returned
)

var callStateNames = [...]string{"queued", "admitted", "registered", "posted", "replied", "invalidating", "done", "abandoned"}

func (s callState) String() string {
	if int(s) < len(callStateNames) {
		return callStateNames[s]
	}
	return fmt.Sprintf("callState(%d)", uint8(s))
}

// callTransitions[from] is the set of states a call may move to from from.
var callTransitions = [...][]callState{
	stQueued:       {stAdmitted, stDone},
	stAdmitted:     {stRegistered, stQueued, stDone},
	stRegistered:   {stPosted, stQueued, stDone},
	stPosted:       {stReplied, stAbandoned, stQueued, stDone},
	stReplied:      {stInvalidating, stDone, stQueued},
	stInvalidating: {stDone, stQueued},
	stDone:         {},
	stAbandoned:    {stDone},
}

// canMove reports whether from → to is a drawn transition.
func canMove(from, to callState) bool {
	if int(from) >= len(callTransitions) {
		return false
	}
	for _, s := range callTransitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// exposesWindows reports whether, in state s, the server may still access
// the call's windows (so its buffers must not be reused, and a caller
// giving up must wait for them to be invalid).
func (s callState) exposesWindows() bool {
	return s == stPosted || s == stReplied || s == stInvalidating
}

// TransitionError is a refused call-state transition: a bug in the
// transport, counted in Counters.RefusedTransitions and logged; the
// transition does not happen.
type TransitionError struct {
	XID      uint32
	From, To string
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("xprt: call %#08x: no transition %s → %s", e.XID, e.From, e.To)
}
