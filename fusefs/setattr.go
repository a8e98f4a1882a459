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

// Deferred SETATTR.
//
// tar -x and cp -a set each file's times, owner and mode after writing it,
// through the descriptor they wrote it with: three SETATTR round trips per
// file, one at a time (the kernel client sends them too), which the
// server has no reason to refuse. So a chmod, chown or utimes of a regular file
// by a process that has it open for writing is answered at once with the
// attributes it sets, and kept; the next one merges into it, and one
// SETATTR carries them all, sent before that process's next write to the
// file, at its fsync or close of it (FLUSH), or after deferFlushAfter,
// whichever comes first. Close-to-open holds: the attributes are at the
// server when close returns. Attributes the server sends meanwhile (a
// READ's, a listing's) keep the deferred ones over them.
//
// Deferred only where the server has no reason to refuse: the caller's calls carry
// its own identity (Options.CallerIdentity), and it is root on a file
// system where root is known not to be squashed (private.go), or the
// file's owner changing its mode or times (the kernel has already checked
// what it may set: default_permissions). A refusal all the same (a
// read-only export, a quota on chown, the file gone from the server) is
// returned by that close or fsync, as a write's is; a read-only export
// turns deferral off for the mount. Never with the sync option, nor for a
// size change (truncate), nor for a process that does not have the file
// open for writing (an administrator's chmod of a file a daemon writes is
// sent at once), or closed a descriptor of it since it opened one (its
// close would not report the error).

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

// deferSetattr defers SETATTR s of n by caller (whose calls carry ctx's
// credential) when it may; it returns the attributes n has with it and how
// long they may be trusted.
func (n *node) deferSetattr(ctx context.Context, caller *fuse.Caller, s nfs3.SetAttr) (nfs3.Attr, time.Duration, bool) {
	f := n.fsys
	if caller == nil || caller.Pid == 0 || s.Size != nil || f.opts.Sync || !f.opts.CallerIdentity || f.noDefer.Load() {
		return nfs3.Attr{}, 0, false
	}
	cred, ok := sunrpc.CredentialFrom(ctx)
	if !ok {
		return nfs3.Attr{}, 0, false
	}
	now := f.now()
	n.mu.Lock()
	defer n.mu.Unlock()
	a := n.attrs.attr
	_, closed := n.closedBy[caller.Pid]
	if !n.attrs.valid || a.Type != nfs3.TypeReg || n.writers[caller.Pid] == 0 || closed || n.gone {
		return nfs3.Attr{}, 0, false
	}
	switch {
	case caller.Uid == 0 && f.squash.unsquashed(a.FSID, now):
	case caller.Uid != 0 && caller.Uid == a.UID && s.UID == nil && s.GID == nil:
	default:
		return nfs3.Attr{}, 0, false
	}
	if n.deferred == nil {
		n.deferred = &nfs3.SetAttr{}
		n.deferredCtx = sunrpc.WithCredential(f.ctx, cred)
		n.deferTimer = time.AfterFunc(deferFlushAfter, n.flushDeferredLater)
	}
	d := n.deferred
	if s.Mode != nil {
		d.Mode = s.Mode
	}
	if s.UID != nil {
		d.UID = s.UID
	}
	if s.GID != nil {
		d.GID = s.GID
	}
	if s.Atime.How != nfs3.DontChange {
		d.Atime = s.Atime
	}
	if s.Mtime.How != nfs3.DontChange {
		d.Mtime = s.Mtime
	}
	if s.Atime.How == nfs3.SetToServerTime || s.Mtime.How == nfs3.SetToServerTime {
		n.deferredAt = now // the server's time, as this clock says
	}
	// The attributes as the server will have them; ctime by this clock.
	n.overlayDeferred(&a)
	a.Ctime = nfs3.TimeOfUnix(0, now.UnixNano())
	n.attrs.attr = a
	left, _ := n.attrs.fresh(now)
	n.floorSize(&a)
	return a, max(left, 0), true
}

// overlayDeferred sets in a, attributes from the server, those a deferred
// SETATTR of n will set; n.mu is held.
func (n *node) overlayDeferred(a *nfs3.Attr) {
	for _, d := range []*nfs3.SetAttr{n.deferSending, n.deferred} {
		if d != nil {
			n.overlay(a, d)
		}
	}
}

// overlay sets in a the attributes d sets; n.mu is held.
func (n *node) overlay(a *nfs3.Attr, d *nfs3.SetAttr) {
	a.Ctime = n.attrs.attr.Ctime // as deferSetattr set it
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
			*t.to = nfs3.TimeOfUnix(0, n.deferredAt.UnixNano())
		}
	}
}

// flushDeferred sends n's deferred SETATTR, if any, after the writes before
// it, and returns its error, or that of one sent without a caller to tell
// (the timer's, the last close's). When it returns, no SETATTR of n is in
// flight.
func (n *node) flushDeferred() error {
	n.deferMu.Lock()
	defer n.deferMu.Unlock()
	n.mu.Lock()
	d, ctx, err := n.deferred, n.deferredCtx, n.deferredErr
	n.deferredErr = nil
	if d != nil {
		// Sent from here on: one deferred meanwhile is a new one.
		n.deferTimer.Stop()
		n.deferred, n.deferredCtx, n.deferTimer, n.deferSending = nil, nil, nil, d
	}
	n.mu.Unlock()
	if d == nil {
		return err
	}
	defer func() {
		n.mu.Lock()
		n.deferSending = nil
		n.mu.Unlock()
	}()
	// Its writes first: a later WRITE would move an explicit mtime.
	if synced, werr := n.syncPend(ctx); synced && werr != nil {
		n.invalidateAttr() // what it set is not so
		return werr
	}
	n.drainWriteBehind()
	var w nfs3.WccData
	serr := n.do(ctx, func(fh nfs3.FileHandle) (err error) {
		w, err = n.fsys.c.Setattr(ctx, fh, *d, nil)
		return err
	})
	n.mu.Lock()
	n.deferSending = nil
	n.mu.Unlock()
	if serr != nil {
		n.invalidateAttr() // what it set is not so
		if errors.Is(toErrno(serr), syscall.EROFS) {
			n.fsys.noDefer.Store(true)
		}
		n.fsys.log.Warn("deferred SETATTR failed: the next close or fsync of the file reports it", "err", serr)
		return serr
	}
	n.setWcc(&w)
	return err
}

// flushDeferredLater is the timer's: the writer kept the file open and did
// not write; the error waits for its close or fsync.
func (n *node) flushDeferredLater() {
	if err := n.flushDeferred(); err != nil {
		n.mu.Lock()
		n.deferredErr = err
		n.mu.Unlock()
	}
}
