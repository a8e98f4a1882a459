package fusefs

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// Root squashing: what this mount knows of whether the server squashes
// root (maps uid 0 to its anonymous user), per file system (fsid): a
// server exporting with crossmnt or nohide shows several exports, each
// with its own squashing, under one mount.
//
// It serves only where no per-object answer from the server exists:
// whether root's SETATTR may be deferred (setattr.go). Permissions are
// otherwise asked of the server per object and credential (access.go).
//
// Evidence that root is not squashed, each with root's own AUTH_SYS
// credential (rootCred):
//
//   - an object made by an exclusive creation (MKDIR, SYMLINK, MKNOD,
//     CREATE GUARDED) owned by uid 0 (learnCreated);
//   - an ACCESS reply on a regular file granting a right that only root's
//     own identity can hold there (learnRootRights).
//
// It holds for acdirmax from the last such evidence (shownUnsquashed).
// Evidence of squashing ends it at once: an exclusive creation whose
// object another uid owns (learnCreated), or a LOOKUP or creation refused
// with EACCES (learnRefused). Nothing else (no age, no mount option) makes
// root count as unsquashed: without evidence, root is taken as squashed.
//
// rootSquash.mu guards its map. It is the innermost lock: taken under a
// node's (deferSetattr), never the other way.

// rootSquash is what the server has shown of its squashing of root, per
// file system (see above).
type rootSquash struct {
	mu sync.Mutex
	// until: by fsid, until when root is known not to be squashed there.
	until map[uint64]time.Time
}

// maxSquashFS bounds the file systems whose verdicts are kept; forgetting
// one only brings back the private treatment until the next creation.
const maxSquashFS = 256

// unsquashed reports whether root is known at now not to be squashed in
// file system fsid.
func (s *rootSquash) unsquashed(fsid uint64, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	until, ok := s.until[fsid]
	return ok && now.Before(until)
}

// notSquashed records that root is not squashed in file system fsid, until
// until.
func (s *rootSquash) notSquashed(fsid uint64, now, until time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.until == nil {
		s.until = make(map[uint64]time.Time)
	}
	if _, ok := s.until[fsid]; !ok && len(s.until) >= maxSquashFS {
		for k, u := range s.until {
			if !now.Before(u) {
				delete(s.until, k)
			}
		}
		if len(s.until) >= maxSquashFS {
			clear(s.until)
		}
	}
	s.until[fsid] = until
}

// squashed records that root is squashed in file system fsid.
func (s *rootSquash) squashed(fsid uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.until, fsid)
}

// rootCred reports whether ctx, the context of a FUSE request's calls
// (FS.callCtx), gives them root's own AUTH_SYS credential.
func rootCred(ctx context.Context) bool {
	cred, ok := sunrpc.CredentialFrom(ctx)
	if !ok {
		return false
	}
	a, err := sunrpc.ParseAuthSys(cred)
	return err == nil && a.UID == 0
}

// learnCreated records what the attributes a of an object just made by an
// exclusive creation (see above), called with ctx, say of root squashing.
func (f *FS) learnCreated(ctx context.Context, a *nfs3.Attr) {
	if a == nil || !rootCred(ctx) {
		return
	}
	if a.UID != 0 {
		f.squash.squashed(a.FSID)
		return
	}
	f.shownUnsquashed(a.FSID)
}

// shownUnsquashed records that root was just shown not to be squashed in
// file system fsid: known for acdirmax from now (see above).
func (f *FS) shownUnsquashed(fsid uint64) {
	now := f.now()
	f.squash.notSquashed(fsid, now, now.Add(f.opts.AcDirMax))
}

// learnRootRights records what an ACCESS of a regular file made with
// root's credential (ctx) says of root squashing: granted are the rights
// the reply granted, a the attributes it carried. A squashed root is
// another user there, who gets no more than a class of the file's mode
// grants it; a right that no class grants but the owner's, on a file that
// uid 0 owns, or that no class grants at all, is root's own, so root is
// not squashed. (Granted rights that a class does grant say nothing: the
// anonymous user may be in that class. A POSIX ACL grants no named user or
// group more than the group class shows.) Execute is left out: root's is
// the kernel's to decide.
func (f *FS) learnRootRights(ctx context.Context, a *nfs3.Attr, granted uint32) {
	if a == nil || a.Type != nfs3.TypeReg || !rootCred(ctx) {
		return
	}
	classes := a.Mode>>3&7 | a.Mode&7 // group, others
	if a.UID != 0 {
		classes |= a.Mode >> 6 & 7 // the anonymous user may own it
	}
	var shown uint32
	if granted&nfs3.AccessRead != 0 {
		shown |= 4
	}
	if granted&(nfs3.AccessModify|nfs3.AccessExtend) != 0 {
		shown |= 2
	}
	if shown&^classes != 0 {
		f.shownUnsquashed(a.FSID)
	}
}

// learnRefused records a refusal (EACCES) of root's LOOKUP or creation in
// directory n, called with ctx, as root squashed there.
func (n *node) learnRefused(ctx context.Context, err error) {
	if err == nil || toErrno(err) != syscall.EACCES || !rootCred(ctx) {
		return
	}
	n.mu.Lock()
	fsid := n.attrs.attr.FSID
	n.mu.Unlock()
	n.fsys.squash.squashed(fsid)
}
