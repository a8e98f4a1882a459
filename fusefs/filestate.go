package fusefs

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nfsrdma/nfsrdma/fusefs/internal/caller"
	"github.com/nfsrdma/nfsrdma/nfs3"
)

// fileState is what this mount holds of a regular file's data and opens,
// beside the object state every node has: its open handles, the writes
// the server does not have yet or has not made durable (gathered, behind,
// UNSTABLE), the SETATTR deferred for its writer, and its silly rename.
// Only a regular file's node has one (node.file), made with the node and
// kept for its life.
//
// Invariants:
//   - dirty holds the UNSTABLE writes the server took that no COMMIT with
//     their verifier has answered, but for those a COMMIT in flight took
//     out (commitPendingLocked puts back what it does not prove durable);
//     ndirty is their bytes.
//   - wrInflight counts the WRITEs in flight (writeRange, writes behind)
//     and the gathered write (pend); while it is above 0, wrEnd is the
//     furthest end among them, and the size shown for the file is at
//     least wrEnd (floor): the server's attributes may predate them.
//   - pend, when not nil, is answered to the kernel and not yet sent; it
//     is sent before anything that needs the server to have it.
//   - wbBytes and wbCalls count the writes behind not yet answered;
//     wbErr is the first failure among them not yet reported.
//   - deferred (with deferredCtx and deferTimer) is the SETATTR answered
//     to its caller and not yet sent; deferSending the one being sent.
//     The attributes shown for the file carry both
//     (overlayDeferredLocked).
//   - silly, once set, names the file's .nfs name until its last close
//     (opens back to 0), which removes it.
//
// Locks: mu guards every field below it; dataGen is atomic. commit is held
// across a COMMIT and its resends, deferMu across the sending of a
// deferred SETATTR: they order calls, guard no field, are never held
// together, and are taken before mu, never under it. The lock order is
// commit or deferMu, then the node's mu, then fileState.mu: a holder of
// the node's mu may take its file's mu (the attributes shown include the
// writes in flight and a deferred SETATTR), never the other way. No NFS
// call is made with mu held.
type fileState struct {
	n *node // the file's node: its handle and attributes

	// dataGen counts completed changes of the file's data by this mount
	// (WRITE, truncating SETATTR, a changed file seen at open, a granted
	// lock): read-ahead discards data fetched before the latest one.
	dataGen atomic.Uint64

	commit  sync.Mutex // one COMMIT (and resend) at a time
	deferMu sync.Mutex // one deferred SETATTR sent at a time

	mu     sync.Mutex
	opens  int        // open file handles
	closed *sync.Cond // broadcast when opens drops to 0 (see waitClosed)
	silly  *sillyName // set once unlinked while open

	dirty  []dirtyWrite // UNSTABLE writes not yet known committed
	ndirty int          // their bytes

	// WRITEs in flight (see beginWrite): while any is, the server's
	// attributes may predate some of them (replies overtake each other),
	// so a size below wrEnd, the furthest end among them, is not believed.
	wrInflight int
	wrEnd      int64
	// Write-behind (see writeBehind): bytes and calls accepted from the
	// kernel and not yet answered by the server, the first error among
	// them (reported by the next write, flush or fsync), and the condition
	// signalled as they complete.
	wbBytes, wbCalls int
	wbErr            error
	wbDone           *sync.Cond
	// Gathered small writes (see gather): pend is sent at pendOff, with
	// the credential of pendCtx; pendGen numbers the gatherings.
	pend    []byte
	pendOff int64
	pendCtx context.Context
	pendGen uint64

	// The file's open handles for writing, by opener's process, and the
	// SETATTR deferred until that process's next write, fsync or close
	// (setattr.go): its attributes, its caller's context, when it is sent
	// anyway (the timer), and the error of one sent without a caller to
	// report it to.
	writers      map[uint32]int
	closedBy     map[uint32]struct{} // writers that closed a descriptor since they opened one
	deferred     *nfs3.SetAttr
	deferredCtx  context.Context
	deferSending *nfs3.SetAttr // the deferred SETATTR being sent
	deferredAt   time.Time     // when a time was deferred as the server's
	deferTimer   stopper       // FS.after
	deferredErr  error
}

// dirtyWrite is a copy of an UNSTABLE write kept until a COMMIT with the
// same verifier proves it durable.
type dirtyWrite struct {
	off   int64
	data  []byte
	verf  nfs3.WriteVerf
	whole bool        // data is a whole buffer of FS.wbufs that nothing else holds
	cred  caller.Cred // the WRITE's: its COMMIT's and resend's
}

// sillyName is where an unlinked open file lives until its last close.
type sillyName struct {
	parent *node
	name   string
}

// changedData counts a change of the file's data by this mount (see
// dataGen). A nil s (not a regular file) has no data to count.
func (s *fileState) changedData() {
	if s != nil {
		s.dataGen.Add(1)
	}
}

// floor raises a's size to the end of the WRITEs in flight (see wrEnd).
func (s *fileState) floor(a *nfs3.Attr) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.floorLocked(a)
}

// floorLocked is floor with s.mu held.
func (s *fileState) floorLocked(a *nfs3.Attr) {
	if s.wrInflight > 0 && int64(a.Size) < s.wrEnd {
		a.Size = uint64(s.wrEnd)
	}
}

// shown makes a, attributes from the server, those the kernel is to see:
// the size raised to the end of the WRITEs in flight and a deferred
// SETATTR's changes applied, with ctime, the cached one, as deferSetattr
// set it.
func (s *fileState) shown(a *nfs3.Attr, ctime nfs3.Time) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.floorLocked(a)
	s.overlayDeferredLocked(a, ctime)
}

// writesPending reports whether writes made through the file are gathered
// or behind, not yet answered by the server.
func (s *fileState) writesPending() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pend != nil || s.wbCalls > 0
}

// sillyRenamed reports whether the file lives under a .nfs name.
func (s *fileState) sillyRenamed() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.silly != nil
}

// sillyNamed returns the file's .nfs name, if it has one.
func (s *fileState) sillyNamed() (sillyName, bool) {
	if s == nil {
		return sillyName{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.silly == nil {
		return sillyName{}, false
	}
	return *s.silly, true
}

// inUse reports whether this mount has the file open or silly renamed.
func (s *fileState) inUse() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opens > 0 || s.silly != nil
}
