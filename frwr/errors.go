package frwr

import (
	"errors"
	"fmt"
)

// ErrClosed is returned by operations on a closed Registry.
var ErrClosed = errors.New("frwr: registry closed")

// ErrNotOwned is returned for a Buffer or Registration that is not this
// registry's, or not currently handed out by it (released twice, for
// example).
var ErrNotOwned = errors.New("frwr: buffer or registration not held from this registry")

// ErrSegment is returned by Register for a segment that is empty or does
// not lie within its buffer.
var ErrSegment = errors.New("frwr: segment outside its buffer")

// ErrUnsafeWindows is returned by New and Attach for ModeWindows forced on
// a device whose memory windows a hostile peer can abuse (windows that do
// not bound the peer to its segment, or a stale Send With Invalidate that
// crashes the kernel: rxe), unless Config.UnsafeWindows is set.
var ErrUnsafeWindows = errors.New("frwr: memory windows are unsafe against a hostile peer on this device")

// TransitionError is a call that asked a registration for a state change
// its current state does not allow. The call did nothing to it.
type TransitionError struct {
	Op    string // the call: "Release", "Abort", ...
	State State  // the state the registration was in
	RKey  uint32 // its rkey
	Hint  string // what the caller should have done, when known
}

func (e *TransitionError) Error() string {
	s := fmt.Sprintf("frwr: %s of registration rkey %#x in state %s", e.Op, e.RKey, e.State)
	if e.Hint != "" {
		s += ": " + e.Hint
	}
	return s
}
