package fusefs

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// Deferred SETATTR (Options.DeferSetattr, off by default).
//
// By default each chmod, chown, utimes and truncate is one SETATTR, sent
// as the application made it before the call returns, as the kernel
// client sends it: a refusal fails that call, and nothing the server did
// not take is ever shown.
//
// tar -x and cp -a set each file's times, owner and mode after writing it,
// through the descriptor they wrote it with: three SETATTR round trips per
// file, one at a time. With DeferSetattr, a chmod, chown or utimes of a
// regular file by a process that has it open for writing is answered at
// once with the attributes it sets, and kept; the next one merges into it,
// and one SETATTR carries them all, sent before that process's next write
// to the file, at its fsync or close of it (FLUSH), or after
// deferFlushAfter, whichever comes first. Close-to-open holds: the
// attributes are at the server when close returns. Attributes the server
// sends meanwhile (a READ's, a listing's) keep the deferred ones over
// them.
//
// It cannot give the kernel client's outcome in every case, hence opt-in:
// a refusal the client could not foresee (a read-only export, a quota on
// chown, a uid mapping, an export whose squashing changed, the file
// removed by another client) fails that close or fsync instead of the
// chmod, as a write's does. The refused attributes are then dropped from
// this mount's cache and the kernel's (the mount shows the server's), and
// a read-only refusal turns deferral off for the mount.
//
// Deferred only where the server has no known reason to refuse: the
// caller's calls carry its own identity (Options.CallerIdentity), and it
// is root on a file system where root is known not to be squashed
// (rootsquash.go), or the file's owner by its attributes changing its mode or
// times (what an owner may set; the server decides, access.go). Never with
// the sync option, nor for a size change (truncate), nor for a process
// that does not have the file open for writing (an administrator's chmod
// of a file a daemon writes is sent at once), or closed a descriptor of it
// since it opened one (its close would not report the error).
//
// Never merged where the server treats the merge differently: a server
// clears the set-user-ID and set-group-ID bits of a mode that comes in
// one SETATTR with a new owner (knfsd does, as chown(2) does), where the
// kernel client's chown, then chmod, keeps them (tar -xp, cp -a as root).
// So a mode with S_ISUID, S_ISGID or S_ISVTX and an owner change are never
// sent together: the one that would be merged is sent at once, after the
// deferred one, in the application's order (see sbitsWithOwner).

// A FUSE request's pid is its caller's thread: a multi-threaded writer
// whose chmod comes from another thread than its open gets no deferral.

// deferFlushAfter bounds how long a deferred SETATTR waits for its
// writer's next write, fsync or close.
const deferFlushAfter = time.Second

// callerPid returns the process of the FUSE request of ctx (0: none).
func callerPid(ctx context.Context) uint32 {
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Pid
	}
	return 0
}

// deferSetattr defers SETATTR sa of the file by caller (whose calls carry
// ctx's credential) when it may; it returns the attributes the file has
// with it and how long they may be trusted. A nil s (not a regular file)
// defers nothing.
func (s *fileState) deferSetattr(ctx context.Context, caller *fuse.Caller, sa nfs3.SetAttr) (nfs3.Attr, time.Duration, bool) {
	if s == nil {
		return nfs3.Attr{}, 0, false
	}
	n := s.n
	f := n.fsys
	if !f.opts.DeferSetattr || caller == nil || caller.Pid == 0 || sa.Size != nil || f.opts.Sync || !f.opts.CallerIdentity || f.noDefer.Load() {
		return nfs3.Attr{}, 0, false
	}
	cred, ok := sunrpc.CredentialFrom(ctx)
	if !ok {
		return nfs3.Attr{}, 0, false
	}
	now := f.now()
	// The attributes shown change with the deferred SETATTR: both locks,
	// in their order (fileState).
	n.mu.Lock()
	defer n.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	a := n.attrs.attr
	_, closed := s.closedBy[caller.Pid]
	if !n.attrs.valid || a.Type != nfs3.TypeReg || s.writers[caller.Pid] == 0 || closed || n.gone {
		return nfs3.Attr{}, 0, false
	}
	switch {
	case caller.Uid == 0 && f.squash.unsquashed(a.FSID, now):
	case caller.Uid != 0 && caller.Uid == a.UID && sa.UID == nil && sa.GID == nil:
	default:
		return nfs3.Attr{}, 0, false
	}
	if sbitsWithOwner(s.deferred, &sa) {
		// Sent at once by the caller, after the deferred one.
		return nfs3.Attr{}, 0, false
	}
	if s.deferred == nil {
		s.deferred = &nfs3.SetAttr{}
		s.deferredCtx = sunrpc.WithCredential(f.ctx, cred)
		s.deferTimer = f.after(deferFlushAfter, s.flushDeferredLater)
	}
	d := s.deferred
	if sa.Mode != nil {
		d.Mode = sa.Mode
	}
	if sa.UID != nil {
		d.UID = sa.UID
	}
	if sa.GID != nil {
		d.GID = sa.GID
	}
	if sa.Atime.How != nfs3.DontChange {
		d.Atime = sa.Atime
	}
	if sa.Mtime.How != nfs3.DontChange {
		d.Mtime = sa.Mtime
	}
	if sa.Atime.How == nfs3.SetToServerTime || sa.Mtime.How == nfs3.SetToServerTime {
		s.deferredAt = now // the server's time, as this clock says
	}
	// The attributes as the server will have them; ctime by this clock.
	s.overlayDeferredLocked(&a, n.attrs.attr.Ctime)
	a.Ctime = nfs3.TimeOfUnix(0, now.UnixNano())
	n.attrs.attr = a
	left, _ := n.attrs.fresh(now)
	s.floorLocked(&a)
	return a, max(left, 0), true
}

// sbitsWithOwner reports whether d (nil: none) and s merged would send a
// mode with S_ISUID, S_ISGID or S_ISVTX in the same SETATTR as a new owner
// or group, which the server would not treat as the two calls.
func sbitsWithOwner(d, s *nfs3.SetAttr) bool {
	var mode *uint32
	owner := s.UID != nil || s.GID != nil
	if d != nil {
		mode = d.Mode
		owner = owner || d.UID != nil || d.GID != nil
	}
	if s.Mode != nil {
		mode = s.Mode
	}
	return owner && mode != nil && *mode&0o7000 != 0
}

// overlayDeferredLocked sets in a, attributes from the server, those a
// deferred SETATTR of the file will set, with ctime, the cached one, as
// deferSetattr set it; s.mu is held.
func (s *fileState) overlayDeferredLocked(a *nfs3.Attr, ctime nfs3.Time) {
	for _, d := range []*nfs3.SetAttr{s.deferSending, s.deferred} {
		if d != nil {
			s.overlayLocked(a, d, ctime)
		}
	}
}

// overlayLocked sets in a the attributes d sets; s.mu is held.
func (s *fileState) overlayLocked(a *nfs3.Attr, d *nfs3.SetAttr, ctime nfs3.Time) {
	a.Ctime = ctime // as deferSetattr set it
	if d.Mode != nil {
		a.Mode = *d.Mode
	}
	if d.UID != nil {
		a.UID = *d.UID
	}
	if d.GID != nil {
		a.GID = *d.GID
	}
	for _, t := range []struct {
		set nfs3.SetTime
		to  *nfs3.Time
	}{{d.Atime, &a.Atime}, {d.Mtime, &a.Mtime}} {
		switch t.set.How {
		case nfs3.SetToClientTime:
			*t.to = t.set.Time
		case nfs3.SetToServerTime:
			*t.to = nfs3.TimeOfUnix(0, s.deferredAt.UnixNano())
		}
	}
}

// flushDeferred sends the file's deferred SETATTR, if any, after the
// writes before it, and returns its error, or that of one sent without a
// caller to tell (the timer's, the last close's). When it returns, no
// SETATTR of the file is in flight. A nil s (not a regular file) has none.
func (s *fileState) flushDeferred() error {
	if s == nil {
		return nil
	}
	n := s.n
	s.deferMu.Lock()
	defer s.deferMu.Unlock()
	s.mu.Lock()
	d, ctx, err := s.deferred, s.deferredCtx, s.deferredErr
	s.deferredErr = nil
	if d != nil {
		// Sent from here on: one deferred meanwhile is a new one.
		s.deferTimer.Stop()
		s.deferred, s.deferredCtx, s.deferTimer, s.deferSending = nil, nil, nil, d
	}
	s.mu.Unlock()
	if d == nil {
		return err
	}
	defer func() {
		s.mu.Lock()
		s.deferSending = nil
		s.mu.Unlock()
	}()
	// Its writes first: a later WRITE would move an explicit mtime.
	if synced, werr := s.syncPend(ctx); synced && werr != nil {
		n.forgetDeferred() // what it set is not so
		return werr
	}
	s.drainWriteBehind()
	var w nfs3.WccData
	serr := n.do(ctx, func(fh nfs3.FileHandle) (err error) {
		w, err = n.fsys.c.Setattr(ctx, fh, *d, nil)
		return err
	})
	s.mu.Lock()
	s.deferSending = nil
	s.mu.Unlock()
	if serr != nil {
		n.forgetDeferred() // what it set is not so
		if errors.Is(toErrno(serr), syscall.EROFS) {
			n.fsys.noDefer.Store(true)
		}
		n.fsys.log.Warn("deferred SETATTR failed: the next close or fsync of the file reports it", "err", serr)
		return serr
	}
	n.setWcc(&w)
	return err
}

// forgetDeferred drops the attributes a deferred SETATTR that was not
// taken had shown, from this mount's cache and from the kernel's (which
// its local permission checks use): the next stat asks the server.
func (n *node) forgetDeferred() {
	n.invalidateAttr()
	if errno := n.NotifyContent(-1, 0); errno != 0 && errno != syscall.ENOSYS && errno != syscall.ENOENT {
		n.fsys.log.Debug("invalidating the kernel's attributes after a refused SETATTR", "errno", errno)
	}
}

// flushDeferredLater is the timer's: the writer kept the file open and did
// not write; the error waits for its close or fsync.
func (s *fileState) flushDeferredLater() {
	if err := s.flushDeferred(); err != nil {
		s.mu.Lock()
		s.deferredErr = err
		s.mu.Unlock()
	}
}
