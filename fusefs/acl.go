package fusefs

import (
	"context"
	"errors"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// The creator's umask and a directory's default POSIX ACL.
//
// The Linux client's NFSv3 superblock has POSIX ACLs (through the NFSACL
// side protocol): at CREATE, MKDIR and MKNOD it looks for the parent
// directory's default ACL and, if there is one, leaves the umask out of the
// mode it sends (the server's file system then gives the new object the
// mode and ACL that inheritance gives, acl(5)); if there is none, it
// applies the umask itself. With nfs(5) noacl, or when the server has no
// NFSACL, it always applies the umask.
//
// The FUSE kernel module does the same split: its superblock has POSIX
// ACLs, and a server that asks for FUSE_DONT_MASK (FUSEOptions) gets the
// requested mode unmasked with the caller's umask beside it. rawFS keeps
// that umask for the request (FS.umasks, by the request's cancel channel)
// and node.newMode decides here, from the directory's ACLs as its node
// keeps them (node.acls, xattr.go): one GETACL answers the umask rule and
// getfacl alike, and its answer holds across this mount's own changes of
// the directory (dirState.changed).

// umaskOf returns the umask of the FUSE request of ctx, when the kernel
// sent it for rawFS to apply (FUSE_DONT_MASK).
func (f *FS) umaskOf(ctx context.Context) (uint32, bool) {
	fc, ok := ctx.(*fuse.Context)
	if !ok || fc.Cancel == nil {
		return 0, false
	}
	v, ok := f.umasks.Load(fc.Cancel)
	if !ok {
		return 0, false
	}
	return v.(uint32), true
}

// newMode returns the mode to send for an object made in n with the
// requested mode and the creator's umask (known: the kernel left it to
// us): the mode as requested when n has a default ACL, else without the
// umask's bits. ctx is the request's call context.
func (n *node) newMode(ctx context.Context, mode, umask uint32, known bool) (uint32, error) {
	mode &= 0o7777
	if !known || mode&umask == 0 {
		return mode, nil // the umask changes nothing: no need to ask
	}
	has, err := n.hasDefaultACL(ctx)
	if err != nil {
		return 0, err
	}
	if has {
		return mode, nil
	}
	return mode &^ umask, nil
}

// hasDefaultACL reports whether directory n has a default ACL: false with
// noacl, a server without NFSACL or a file system without ACLs, else as
// n's ACL answer says (getACLs: the cached one, or GETACL's). Other
// failures of GETACL are the creation's, as on the Linux client.
func (n *node) hasDefaultACL(ctx context.Context) (bool, error) {
	if n.fsys.aclsOff() {
		return false, nil
	}
	a, err := n.getACLs(ctx)
	switch {
	case errors.Is(err, errNoACLs):
		return false, nil
	case err != nil:
		return false, err
	}
	return a.dfltACL != nil, nil
}
