package fusefs

import (
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Events are the VFS event counters of the mount, in the order and with the
// meaning of the "events:" line of /proc/self/mountstats (the Linux
// client's nfs_iostat counters), as far as a FUSE server sees them:
//
//	inoderevalidate   GETATTR requests (stat of a file whose attributes the kernel no longer trusts)
//	dentryrevalidate  LOOKUPs of a name the kernel already had (its entry expired)
//	datainvalidate    cached data dropped: opens that found the file changed, granted locks
//	attrinvalidate    cached attributes forgotten (another operation changed the object)
//	vfsopen           opens of files and directories
//	vfslookup         LOOKUP requests
//	vfsaccess         ACCESS requests
//	vfsupdatepage     buffered WRITE requests
//	vfsreadpages      buffered READ requests
//	vfsgetdents       READDIR and READDIRPLUS requests
//	vfssetattr        SETATTR requests
//	vfsflush          FLUSH requests (close)
//	vfsfsync          FSYNC and FSYNCDIR requests
//	vfslock           lock requests (GETLK, SETLK, SETLKW)
//	vfsrelease        RELEASE requests (last close of an open file)
//	setattrtrunc      SETATTR requests that set the size
//	sillyrename       silly renames (an open file unlinked or renamed over)
//	shortread         READ requests answered with fewer bytes than asked
//	shortwrite        WRITE requests that wrote fewer bytes than given
//
// The others (vfsreadpage, vfswritepage, vfswritepages, congestionwait,
// extendwrite, delay, pnfs_read, pnfs_write) stay 0.
type Events [NumEvents]uint64

// NumEvents is the number of counters of the "events:" line.
const NumEvents = 27

// Indexes in Events.
const (
	evInodeRevalidate = iota
	evDentryRevalidate
	evDataInvalidate
	evAttrInvalidate
	evOpen
	evLookup
	evAccess
	evUpdatePage
	evReadPage
	evReadPages
	evWritePage
	evWritePages
	evGetdents
	evSetattr
	evFlush
	evFsync
	evLock
	evRelease
	evCongestionWait
	evSetattrTrunc
	evExtendWrite
	evSillyRename
	evShortRead
	evShortWrite
)

// IOBytes are the application's bytes as the "bytes:" line of
// /proc/self/mountstats counts them: read and written through buffered
// and through direct (O_DIRECT) files.
type IOBytes struct {
	NormalRead, NormalWrite, DirectRead, DirectWrite uint64
}

// eventCounters are the mount's live counters.
type eventCounters struct {
	ev    [NumEvents]atomic.Uint64
	bytes [4]atomic.Uint64 // as IOBytes
}

func (e *eventCounters) add(i int) { e.ev[i].Add(1) }

// Events returns the VFS event counters so far.
func (f *FS) Events() Events {
	var out Events
	for i := range out {
		out[i] = f.events.ev[i].Load()
	}
	return out
}

// IOBytes returns the application's bytes read and written so far.
func (f *FS) IOBytes() IOBytes {
	b := &f.events.bytes
	return IOBytes{b[0].Load(), b[1].Load(), b[2].Load(), b[3].Load()}
}

// rawFS is the go-fuse node file system as the kernel talks to it, with
// three additions: the VFS event counters, the FUSE requests by kind
// (fuseops.go), and missing names cached by the
// kernel for the time each reply gives (go-fuse has one negative timeout
// for the whole mount; a LOOKUP that found no name answers "no such
// entry" with node id 0 and that entry's own timeout, which the kernel
// keeps as a negative dentry).
type rawFS struct {
	fuse.RawFileSystem
	e *eventCounters
	o *fuseOpCounters
	f *FS
}

// NewRawFS returns the raw FUSE file system to serve f with go-fuse's
// fuse.NewServer, for the options fo (from FUSEOptions).
func (f *FS) NewRawFS(fo *fs.Options) fuse.RawFileSystem {
	f.shared = fo.MountOptions.AllowOther
	return &rawFS{RawFileSystem: fs.NewNodeFS(f.root, fo), e: &f.events, o: &f.fuseOps, f: f}
}

func (r *rawFS) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	defer r.o.done(fopLookup, time.Now())
	r.e.add(evLookup)
	st := r.RawFileSystem.Lookup(cancel, h, name, out)
	if st == fuse.ENOENT && out.EntryTimeout() > 0 {
		t := out.EntryValid
		tn := out.EntryValidNsec
		*out = fuse.EntryOut{}
		out.EntryValid, out.EntryValidNsec = t, tn
		return fuse.OK
	}
	return st
}

func (r *rawFS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer r.o.done(fopGetattr, time.Now())
	r.e.add(evInodeRevalidate)
	if in.Flags()&fuse.FUSE_GETATTR_FH != 0 {
		// Through an open file: the kernel's own check of the size in
		// a read or write (a stat names no file; see node.atimeStale).
		r.f.ioGetattrs.Store(cancel, struct{}{})
		defer r.f.ioGetattrs.Delete(cancel)
	}
	return r.RawFileSystem.GetAttr(cancel, in, out)
}

func (r *rawFS) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer r.o.done(fopSetattr, time.Now())
	r.e.add(evSetattr)
	if in.Valid&fuse.FATTR_SIZE != 0 {
		r.e.add(evSetattrTrunc)
	}
	return r.RawFileSystem.SetAttr(cancel, in, out)
}

func (r *rawFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer r.o.done(fopOpen, time.Now())
	r.e.add(evOpen)
	return r.RawFileSystem.Open(cancel, in, out)
}

func (r *rawFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	defer r.o.done(fopCreate, time.Now())
	r.e.add(evOpen)
	defer r.keepUmask(cancel, in.Umask)()
	return r.RawFileSystem.Create(cancel, in, name, out)
}

func (r *rawFS) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	defer r.o.done(fopMknod, time.Now())
	defer r.keepUmask(cancel, in.Umask)()
	return r.RawFileSystem.Mknod(cancel, in, name, out)
}

func (r *rawFS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	defer r.o.done(fopMkdir, time.Now())
	defer r.keepUmask(cancel, in.Umask)()
	return r.RawFileSystem.Mkdir(cancel, in, name, out)
}

// keepUmask records the creator's umask of a CREATE, MKDIR or MKNOD for
// node.newMode (acl.go) until the returned function is called. The kernel
// sends it with every such request and, as the mount asks for DONT_MASK,
// leaves the mode unmasked.
func (r *rawFS) keepUmask(cancel <-chan struct{}, umask uint32) func() {
	r.f.umasks.Store(cancel, umask&0o777)
	return func() { r.f.umasks.Delete(cancel) }
}

func (r *rawFS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer r.o.done(fopOpendir, time.Now())
	r.e.add(evOpen)
	return r.RawFileSystem.OpenDir(cancel, in, out)
}

func (r *rawFS) Access(cancel <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	defer r.o.done(fopAccess, time.Now())
	r.e.add(evAccess)
	return r.RawFileSystem.Access(cancel, in)
}

func (r *rawFS) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	defer r.o.done(fopRead, time.Now())
	direct := in.Flags&syscall.O_DIRECT != 0
	if direct {
		r.f.directIO.Store(cancel, struct{}{})
		defer r.f.directIO.Delete(cancel)
	}
	res, st := r.RawFileSystem.Read(cancel, in, buf)
	if !direct {
		r.e.add(evReadPages)
	}
	if st == fuse.OK && res != nil {
		n := res.Size()
		if n < int(in.Size) {
			r.e.add(evShortRead)
		}
		if direct {
			r.e.bytes[2].Add(uint64(n))
		} else {
			r.e.bytes[0].Add(uint64(n))
		}
	}
	return res, st
}

func (r *rawFS) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	defer r.o.done(fopWrite, time.Now())
	defer r.markDirect(cancel, in)()
	n, st := r.RawFileSystem.Write(cancel, in, data)
	r.wrote(in, n, len(data), st)
	return n, st
}

func (r *rawFS) Writev(cancel <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	start := time.Now()
	defer r.markDirect(cancel, in)()
	n, st := r.RawFileSystem.Writev(cancel, in, data)
	if st == fuse.ENOSYS {
		return n, st // go-fuse falls back to Write
	}
	r.o.done(fopWrite, start)
	size := 0
	for _, d := range data {
		size += len(d)
	}
	r.wrote(in, n, size, st)
	return n, st
}

// markDirect records a WRITE of a file with O_DIRECT for FS.directRequest
// until the returned function is called.
func (r *rawFS) markDirect(cancel <-chan struct{}, in *fuse.WriteIn) func() {
	if in.Flags&syscall.O_DIRECT == 0 {
		return func() {}
	}
	r.f.directIO.Store(cancel, struct{}{})
	return func() { r.f.directIO.Delete(cancel) }
}

func (r *rawFS) wrote(in *fuse.WriteIn, n uint32, size int, st fuse.Status) {
	direct := in.Flags&syscall.O_DIRECT != 0
	if !direct {
		r.e.add(evUpdatePage)
	}
	if st != fuse.OK {
		return
	}
	if int(n) < size {
		r.e.add(evShortWrite)
	}
	if direct {
		r.e.bytes[3].Add(uint64(n))
	} else {
		r.e.bytes[1].Add(uint64(n))
	}
}

func (r *rawFS) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer r.o.done(fopReaddir, time.Now())
	r.e.add(evGetdents)
	return r.RawFileSystem.ReadDir(cancel, in, out)
}

func (r *rawFS) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer r.o.done(fopReaddirplus, time.Now())
	r.e.add(evGetdents)
	return r.RawFileSystem.ReadDirPlus(cancel, in, out)
}

func (r *rawFS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	defer r.o.done(fopFlush, time.Now())
	r.e.add(evFlush)
	return r.RawFileSystem.Flush(cancel, in)
}

func (r *rawFS) Fsync(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	defer r.o.done(fopFsync, time.Now())
	r.e.add(evFsync)
	return r.RawFileSystem.Fsync(cancel, in)
}

func (r *rawFS) FsyncDir(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	defer r.o.done(fopFsyncdir, time.Now())
	r.e.add(evFsync)
	return r.RawFileSystem.FsyncDir(cancel, in)
}

func (r *rawFS) GetLk(cancel <-chan struct{}, in *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	defer r.o.done(fopGetlk, time.Now())
	r.e.add(evLock)
	return r.RawFileSystem.GetLk(cancel, in, out)
}

func (r *rawFS) SetLk(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	defer r.o.done(fopSetlk, time.Now())
	r.e.add(evLock)
	return r.RawFileSystem.SetLk(cancel, in)
}

func (r *rawFS) SetLkw(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	defer r.o.done(fopSetlkw, time.Now())
	r.e.add(evLock)
	return r.RawFileSystem.SetLkw(cancel, in)
}

func (r *rawFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	defer r.o.done(fopRelease, time.Now())
	r.e.add(evRelease)
	r.RawFileSystem.Release(cancel, in)
}
