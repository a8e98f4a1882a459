package fusefs

import (
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nfsrdma/nfsrdma/nfs3"
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

// private reports whether directory n's names are kept from the kernel's
// caches (see above).
func (n *node) private() bool {
	if !n.fsys.shared || !n.fsys.opts.CallerIdentity {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.attrs.attr.Type == nfs3.TypeDir && n.attrs.attr.Mode&0o001 == 0
}

// rootVerdict is what the server last said of root's search permission in
// a directory: for as long as the directory's attributes were trusted then,
// and while its mode is the same.
type rootVerdict struct {
	known, allowed bool
	mode           uint32
	until          time.Time
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
}

// setRootSearch records a verdict on root's search of n for as long as n's
// attributes are trusted (none when they are not); n.mu is held.
func (n *node) setRootSearch(allowed bool) {
	left, fresh := n.attrs.fresh(n.fsys.now())
	if !fresh {
		n.rootSearch = rootVerdict{}
		return
	}
	n.rootSearch = rootVerdict{known: true, allowed: allowed, mode: n.attrs.attr.Mode, until: n.fsys.now().Add(left)}
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
