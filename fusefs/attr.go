package fusefs

import (
	"context"
	"errors"
	"hash/fnv"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// attrCache is one object's cached attributes and how long they are trusted:
// the Linux NFS client's attrtimeo. The timeout starts at the minimum,
// doubles each time a revalidation after it expired finds the object
// unchanged, up to the maximum, and drops back to the minimum when the
// object changed. It is a plain value; its node's mutex guards it.
type attrCache struct {
	attr  nfs3.Attr
	valid bool
	at    time.Time     // when attr was fetched
	timeo time.Duration // how long attr is trusted from at
}

// fresh reports whether the cached attributes may be used at now, and for
// how much longer.
func (c *attrCache) fresh(now time.Time) (time.Duration, bool) {
	if !c.valid {
		return 0, false
	}
	left := c.timeo - now.Sub(c.at)
	return left, left > 0
}

// update records attributes fetched at now, with the timeout bounds of the
// object's kind (acregmin/acregmax or acdirmin/acdirmax). It reports whether
// the object's data changed since the attributes it replaces (size, mtime
// or ctime differ, or the type changed); the first attributes are no change.
func (c *attrCache) update(a nfs3.Attr, now time.Time, lo, hi time.Duration) (changed bool) {
	switch {
	case !c.valid && c.at.IsZero():
		c.timeo = lo
	case dataChanged(&c.attr, &a):
		changed = true
		c.timeo = lo
	case now.Sub(c.at) >= c.timeo:
		// Revalidated after the timeout and unchanged: trust it longer.
		c.timeo = min(max(2*c.timeo, lo), hi)
	}
	c.timeo = min(max(c.timeo, lo), hi)
	c.attr, c.valid, c.at = a, true, now
	return changed
}

// invalidate forgets the attributes' freshness (the next use asks the
// server) but keeps them to compare with the next ones.
func (c *attrCache) invalidate() { c.valid = false }

func dataChanged(old, cur *nfs3.Attr) bool {
	return old.Type != cur.Type || old.Size != cur.Size || old.Mtime != cur.Mtime || old.Ctime != cur.Ctime
}

// typeMode returns the S_IF* bits of an NFS file type.
func typeMode(t nfs3.FileType) uint32 {
	switch t {
	case nfs3.TypeDir:
		return syscall.S_IFDIR
	case nfs3.TypeBlk:
		return syscall.S_IFBLK
	case nfs3.TypeChr:
		return syscall.S_IFCHR
	case nfs3.TypeLnk:
		return syscall.S_IFLNK
	case nfs3.TypeSock:
		return syscall.S_IFSOCK
	case nfs3.TypeFIFO:
		return syscall.S_IFIFO
	}
	return syscall.S_IFREG
}

// ino returns the inode number shown for an NFS fileid: the fileid itself,
// except for the two values go-fuse reserves (0: allocate one, ^0: its poll
// hack), which are moved out of the way.
func ino(fileid uint64) uint64 {
	if fileid == 0 || fileid == ^uint64(0) {
		return fileid ^ 1<<62
	}
	return fileid
}

// generation returns the FUSE generation of a file handle: a hash of its
// bytes, so that a fileid the server reuses for a new object (which gets a
// new handle) is a new inode to the kernel.
func generation(fh nfs3.FileHandle) uint64 {
	h := fnv.New64a()
	h.Write(fh)
	return h.Sum64()
}

// fillAttr converts NFS attributes (RFC 1813 §2.5 fattr3) to FUSE's.
func fillAttr(out *fuse.Attr, a *nfs3.Attr) {
	out.Ino = ino(a.FileID)
	out.Size = a.Size
	out.Blocks = a.Used / 512
	if a.Used%512 != 0 {
		out.Blocks++ // rounded up without overflowing near 2^64
	}
	out.Atime, out.Atimensec = uint64(a.Atime.Seconds), a.Atime.Nseconds
	out.Mtime, out.Mtimensec = uint64(a.Mtime.Seconds), a.Mtime.Nseconds
	out.Ctime, out.Ctimensec = uint64(a.Ctime.Seconds), a.Ctime.Nseconds
	out.Mode = typeMode(a.Type) | a.Mode&0o7777
	out.Nlink = a.Nlink
	out.Uid, out.Gid = a.UID, a.GID
	out.Rdev = uint32(unix.Mkdev(a.Rdev.Major, a.Rdev.Minor))
	out.Blksize = 4096
}

// toErrno maps an error of the NFS client to the errno the kernel passes on:
// an NFS status its own errno (nfs3.Status.Errno), a soft mount's timeout
// EIO (as nfs(5) and the Linux client give it: ETIMEDOUT is only for
// softerr), a closed transport (the mount going away) ENOTCONN, anything
// else (the transport failed, the reply was malformed) EIO.
func toErrno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var st nfs3.Status
	if errors.As(err, &st) {
		return st.Errno()
	}
	var te *sunrpc.TimeoutError
	switch {
	case errors.As(err, &te), errors.Is(err, context.DeadlineExceeded):
		return syscall.EIO
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	case errors.Is(err, sunrpc.ErrClosed):
		return syscall.ENOTCONN
	}
	var errno syscall.Errno
	if errors.As(err, &errno) && errno == syscall.ENAMETOOLONG {
		return errno
	}
	return syscall.EIO
}
