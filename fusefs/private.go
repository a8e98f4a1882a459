package fusefs

import (
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nfsrdma/nfsrdma/nfs3"
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
// Whether the server squashes root is rootsquash.go's.

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
