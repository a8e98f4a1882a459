package fusefs

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// Private directories: names the kernel must not answer from its caches.
//
// The kernel keeps names and attributes in its dentry and inode caches,
// one for all users, and FUSE asks the file system nothing when a path
// walk goes through a name it has cached (the mount has no
// default_permissions: access.go). The kernel's NFS client asks the
// server, through its per-credential ACCESS cache, whether each caller
// may search each directory of the walk.
//
// So on a mount other users may enter (allow_other) with each caller's own
// identity, the names of a directory that not every class may search
// (mode&0o111 != 0o111) are given to the kernel with an entry timeout of
// 0, found or missing. Every path walk through such a directory then
// comes to Lookup with its caller, whose search permission there is
// decided as access.go says: known allowed, the LOOKUP is answered from
// this mount's own record of the name (node.entryUntil, the timeout the
// kernel would otherwise have had) with no call, or as usual; known
// refused, EACCES with no call; not known, a LOOKUP with the caller's
// credential, which none of this mount's records may answer, and whose
// outcome is kept as the caller's verdict (learnSearch).
//
// When the kernel's revalidation of an entry gets EACCES it drops the
// entry and looks the name up again (fs/fuse/dir.c), which gets EACCES too:
// the error reaches the caller. The cost falls on such directories only:
// one FUSE request per path walk through them, answered without a call
// except each caller's first one per attribute timeout. A directory made
// through the mount is known searchable by its maker (madeBy): cp -a and
// tar -x make each directory 0700 and set its mode at the end.
//
// What root's creations show of the server's squashing as a whole
// (rootSquash: learnCreated, learnRootRights, learnRefused) serves only
// where no per-object answer exists: whether root's SETATTR may be
// deferred (setattr.go). It holds for acdirmax from
// the last creation (or ACCESS) that showed it, per file system (fsid): a
// server exporting with crossmnt or nohide shows several exports, each
// with its own squashing, under one mount. Evidence of squashing ends it
// at once.

// private reports whether directory n's names are kept from the kernel's
// caches (see above).
func (n *node) private() bool {
	if !n.fsys.shared || !n.fsys.opts.CallerIdentity {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.attrs.attr.Type == nfs3.TypeDir && n.attrs.attr.Mode&0o111 != 0o111
}

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

// privateLookup answers a LOOKUP of name in the private directory n by
// the caller whose credential's key is key without a call when it can
// (done). Otherwise Lookup goes on, asking the server with the caller's
// credential (askServer: its search of n is not known, and none of this
// mount's own records may answer) or as usual.
func (n *node) privateLookup(name, key string, out *fuse.EntryOut) (c *fs.Inode, errno syscall.Errno, askServer, done bool) {
	allowed, known := n.searchVerdict(key)
	switch {
	case !known:
		return nil, 0, true, false
	case !allowed:
		return nil, syscall.EACCES, true, true
	}
	in := n.GetChild(name)
	if in == nil {
		return nil, 0, false, false
	}
	child, ok := in.Operations().(*node)
	if !ok {
		return nil, 0, false, false
	}
	child.mu.Lock()
	until := child.entryUntil
	child.mu.Unlock()
	if !n.fsys.now().Before(until) {
		return nil, 0, false, false
	}
	a, timeo := child.cached()
	child.fillOut(&out.Attr, &a)
	out.SetAttrTimeout(timeo)
	out.SetEntryTimeout(0)
	return in, 0, false, true
}

// expireEntries drops the kernel's entries of the names of n, a directory
// that has just become private: they were given with the usual timeout.
// Not from n's own SETATTR request: the kernel holds n's lock until it is
// answered.
func (n *node) expireEntries() {
	for name := range n.Children() {
		n.NotifyEntry(name)
	}
}
