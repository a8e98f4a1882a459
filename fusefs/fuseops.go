package fusefs

import (
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// The FUSE requests the mount server answered, by kind: each one is a round
// trip between the application's system call and the mount server (through
// the kernel's FUSE device), whether or not it needs an NFS call. Beside the
// RPC counts they show where an operation costs more trips than its RPCs:
// a mkdir is a LOOKUP of the new name and the MKDIR, one RPC in two
// requests.

// FUSEOp is one kind of FUSE request's counters.
type FUSEOp struct {
	Name     string        // the request as the kernel names it: LOOKUP, GETATTR, RENAME2...
	Requests uint64        // requests answered
	Time     time.Duration // in the file system's handlers, arrival to answer (NFS calls included; the kernel's side of the trip not)
}

// Kinds of FUSE request, indexes of fuseOpNames.
const (
	fopLookup = iota
	fopForget
	fopGetattr
	fopSetattr
	fopReadlink
	fopSymlink
	fopMknod
	fopMkdir
	fopUnlink
	fopRmdir
	fopRename
	fopRename2
	fopLink
	fopOpen
	fopRead
	fopWrite
	fopStatfs
	fopRelease
	fopFsync
	fopSetxattr
	fopGetxattr
	fopListxattr
	fopRemovexattr
	fopFlush
	fopOpendir
	fopReaddir
	fopReaddirplus
	fopReleasedir
	fopFsyncdir
	fopGetlk
	fopSetlk
	fopSetlkw
	fopAccess
	fopCreate
	fopTmpfile
	fopIoctl
	fopFallocate
	fopLseek
	fopCopyFileRange
	fopStatx
	numFUSEOps
)

var fuseOpNames = [numFUSEOps]string{
	"LOOKUP", "FORGET", "GETATTR", "SETATTR", "READLINK", "SYMLINK", "MKNOD", "MKDIR", "UNLINK", "RMDIR",
	"RENAME", "RENAME2", "LINK", "OPEN", "READ", "WRITE", "STATFS", "RELEASE", "FSYNC", "SETXATTR",
	"GETXATTR", "LISTXATTR", "REMOVEXATTR", "FLUSH", "OPENDIR", "READDIR", "READDIRPLUS", "RELEASEDIR", "FSYNCDIR", "GETLK",
	"SETLK", "SETLKW", "ACCESS", "CREATE", "TMPFILE", "IOCTL", "FALLOCATE", "LSEEK", "COPY_FILE_RANGE", "STATX",
}

type fuseOpCounters struct {
	n  [numFUSEOps]atomic.Uint64
	ns [numFUSEOps]atomic.Int64
}

// done counts one request of kind op that arrived at start.
func (c *fuseOpCounters) done(op int, start time.Time) {
	c.n[op].Add(1)
	c.ns[op].Add(int64(time.Since(start)))
}

// FUSERequests returns the FUSE requests answered so far, by kind, in the
// kernel's opcode order; kinds never seen are left out. A BATCH_FORGET
// counts as one FORGET per node it forgets.
func (f *FS) FUSERequests() []FUSEOp {
	var out []FUSEOp
	for i := range numFUSEOps {
		if n := f.fuseOps.n[i].Load(); n > 0 {
			out = append(out, FUSEOp{Name: fuseOpNames[i], Requests: n, Time: time.Duration(f.fuseOps.ns[i].Load())})
		}
	}
	return out
}

// The requests rawFS does not otherwise change (raw.go has the rest).

func (r *rawFS) Forget(nodeid, nlookup uint64) {
	defer r.o.done(fopForget, time.Now())
	r.RawFileSystem.Forget(nodeid, nlookup)
}

func (r *rawFS) Unlink(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	defer r.o.done(fopUnlink, time.Now())
	return r.RawFileSystem.Unlink(cancel, h, name)
}

func (r *rawFS) Rmdir(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	defer r.o.done(fopRmdir, time.Now())
	return r.RawFileSystem.Rmdir(cancel, h, name)
}

func (r *rawFS) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	op := fopRename
	if in.Flags != 0 {
		op = fopRename2 // the kernel sends RENAME2 only with flags
	}
	defer r.o.done(op, time.Now())
	return r.RawFileSystem.Rename(cancel, in, oldName, newName)
}

func (r *rawFS) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	defer r.o.done(fopLink, time.Now())
	return r.RawFileSystem.Link(cancel, in, name, out)
}

func (r *rawFS) Symlink(cancel <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	defer r.o.done(fopSymlink, time.Now())
	return r.RawFileSystem.Symlink(cancel, h, target, name, out)
}

func (r *rawFS) Readlink(cancel <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	defer r.o.done(fopReadlink, time.Now())
	return r.RawFileSystem.Readlink(cancel, h)
}

func (r *rawFS) GetXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	defer r.o.done(fopGetxattr, time.Now())
	return r.RawFileSystem.GetXAttr(cancel, h, attr, dest)
}

func (r *rawFS) ListXAttr(cancel <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	defer r.o.done(fopListxattr, time.Now())
	return r.RawFileSystem.ListXAttr(cancel, h, dest)
}

func (r *rawFS) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	defer r.o.done(fopSetxattr, time.Now())
	return r.RawFileSystem.SetXAttr(cancel, in, attr, data)
}

func (r *rawFS) RemoveXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	defer r.o.done(fopRemovexattr, time.Now())
	return r.RawFileSystem.RemoveXAttr(cancel, h, attr)
}

func (r *rawFS) Tmpfile(cancel <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	defer r.o.done(fopTmpfile, time.Now())
	return r.RawFileSystem.Tmpfile(cancel, in, out)
}

func (r *rawFS) Lseek(cancel <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	defer r.o.done(fopLseek, time.Now())
	return r.RawFileSystem.Lseek(cancel, in, out)
}

func (r *rawFS) CopyFileRange(cancel <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	defer r.o.done(fopCopyFileRange, time.Now())
	return r.RawFileSystem.CopyFileRange(cancel, in)
}

func (r *rawFS) Ioctl(cancel <-chan struct{}, in *fuse.IoctlIn, inbuf []byte, out *fuse.IoctlOut, outbuf []byte) fuse.Status {
	defer r.o.done(fopIoctl, time.Now())
	return r.RawFileSystem.Ioctl(cancel, in, inbuf, out, outbuf)
}

func (r *rawFS) Fallocate(cancel <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	defer r.o.done(fopFallocate, time.Now())
	return r.RawFileSystem.Fallocate(cancel, in)
}

func (r *rawFS) ReleaseDir(in *fuse.ReleaseIn) {
	defer r.o.done(fopReleasedir, time.Now())
	r.RawFileSystem.ReleaseDir(in)
}

func (r *rawFS) StatFs(cancel <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	defer r.o.done(fopStatfs, time.Now())
	return r.RawFileSystem.StatFs(cancel, h, out)
}

func (r *rawFS) Statx(cancel <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	defer r.o.done(fopStatx, time.Now())
	return r.RawFileSystem.Statx(cancel, in, out)
}
