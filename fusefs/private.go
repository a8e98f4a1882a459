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
// The kernel checks permissions itself (default_permissions) from the
// attributes this mount gives it, and keeps names and attributes in its
// dentry and inode caches, one for all users. That is right for every user
// but root: root passes the local check (CAP_DAC_OVERRIDE), while a server
// that squashes root (exports(5)'s default) treats it as nobody. The
// kernel's NFS client asks the server, through its per-credential ACCESS
// cache, whether root may search a directory; FUSE has no per-credential
// dentry cache, so root would see, from the caches, a name another user
// just made in a directory nobody may not search.
//
// So on a mount other users may enter (allow_other) with each caller's own
// identity, the names of a directory that does not grant search to others
// (mode&0o001 == 0: a squashed root is one of the others) are given to the
// kernel with an entry timeout of 0, found or missing. Every path walk
// through such a directory then comes to Lookup with its caller:
//
//   - a caller other than root was already checked by the kernel against
//     the directory's mode; its LOOKUP is answered from this mount's own
//     record of the name (node.entryUntil, the timeout the kernel would
//     otherwise have had) with no call, or from the server as usual;
//   - root is answered by what the server said of root's search
//     permission there (node.rootSearch, learnt from root's last LOOKUP
//     in the directory and kept while the directory's attributes are
//     trusted, as the kernel client keeps an ACCESS reply): EACCES with no
//     call when refused, the cached entry when allowed, and a LOOKUP with
//     root's credential when not known.
//
// When the kernel's revalidation of an entry gets EACCES it drops the
// entry and looks the name up again (fs/fuse/dir.c), which gets EACCES too:
// the error reaches the caller. The cost falls on such directories only:
// one FUSE request per path walk through them, answered without a call
// except root's first one per attribute timeout.
//
// None of this is needed for a directory root may search: there the
// server lets root do what the kernel's own check lets it, and every other
// caller is checked by the kernel against the directory's mode as before.
// The private treatment is skipped while root's verdict on the directory
// (node.rootSearch) is "allowed": without that, cp -a or tar -x as root,
// which make every directory 0700 and set its mode at the end, would cost
// a FUSE LOOKUP of each directory for every file made in it (a directory
// root made is its own: madeByRoot). The verdict is the directory's own,
// as the kernel client's ACCESS replies are kept per inode: what root may
// do in one directory says nothing of another, and nothing once the
// directory's mode changes or its attributes time out. The kernel's
// entries given while it held, with the usual timeouts, are not taken back
// when it lapses: they expire within their timeout (the directory's
// attribute timeout).
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
	priv := n.attrs.attr.Type == nfs3.TypeDir && n.attrs.attr.Mode&0o001 == 0
	return priv && !n.rootAllowedLocked()
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

// rootVerdict is what the server last said of root's search permission in
// a directory: for as long as the directory's attributes were trusted then,
// and while its mode is the same.
type rootVerdict struct {
	known, allowed bool
	mode           uint32
	until          time.Time
}

// rootAllowedLocked reports whether the server's verdict on root's search
// of n is known and "allowed"; n.mu is held.
func (n *node) rootAllowedLocked() bool {
	v := n.rootSearch
	return v.known && v.allowed && v.mode == n.attrs.attr.Mode && n.fsys.now().Before(v.until)
}

// rootAllowed returns the server's verdict on root's search of n, if known.
func (n *node) rootAllowed() (allowed, known bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	v := n.rootSearch
	if !v.known || v.mode != n.attrs.attr.Mode || !n.fsys.now().Before(v.until) {
		return false, false
	}
	return v.allowed, true
}

// learnRootSearch records what root's LOOKUP in n, which ended with err,
// says of root's search permission there: a name found or missing means
// allowed, EACCES refused.
func (n *node) learnRootSearch(err error) {
	allowed := err == nil
	if err != nil {
		switch toErrno(err) {
		case syscall.ENOENT:
			allowed = true
		case syscall.EACCES:
		default:
			return // says nothing of it
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.setRootSearch(allowed)
}

// madeByRoot records root's verdict for a directory root has just made:
// the server made it with root's credential, so root (squashed or not) is
// its owner there, and may search it if the owner may. Without this, tar
// -x as root would ask the server once in every private directory it
// makes (GNU tar makes them 0700 and sets their modes at the end).
func (n *node) madeByRoot() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.setRootSearch(n.attrs.attr.Mode&0o100 != 0)
	n.rootRead = n.verdict(n.attrs.attr.Mode&0o400 != 0)
}

// learnRootRead records what root's READDIRPLUS of directory n, made with
// ctx and ended with err, says of root's reading of it: read means
// allowed, EACCES refused.
func (n *node) learnRootRead(ctx context.Context, err error) {
	if !rootCred(ctx) || err != nil && toErrno(err) != syscall.EACCES {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.rootRead = n.verdict(err == nil)
}

// rootReadAllowed reports whether the server's last verdict on root's
// reading of directory n's listing holds and allowed it.
func (n *node) rootReadAllowed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	v := n.rootRead
	return v.known && v.allowed && v.mode == n.attrs.attr.Mode && n.fsys.now().Before(v.until)
}

// setRootSearch records a verdict on root's search of n for as long as n's
// attributes are trusted (none when they are not); n.mu is held.
func (n *node) setRootSearch(allowed bool) {
	n.rootSearch = n.verdict(allowed)
}

// verdict returns a verdict on root in n for as long as n's attributes are
// trusted (none when they are not); n.mu is held.
func (n *node) verdict(allowed bool) rootVerdict {
	left, fresh := n.attrs.fresh(n.fsys.now())
	if !fresh {
		return rootVerdict{}
	}
	return rootVerdict{known: true, allowed: allowed, mode: n.attrs.attr.Mode, until: n.fsys.now().Add(left)}
}

// privateLookup answers a LOOKUP of name in the private directory n
// without a call when it can (done). Otherwise Lookup goes on, asking the
// server with root's credential (askAsRoot: none of this mount's own
// records may answer) or as usual.
func (n *node) privateLookup(name string, asRoot bool, out *fuse.EntryOut) (c *fs.Inode, errno syscall.Errno, askAsRoot, done bool) {
	if asRoot {
		allowed, known := n.rootAllowed()
		switch {
		case !known:
			return nil, 0, true, false
		case !allowed:
			return nil, syscall.EACCES, true, true
		}
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
