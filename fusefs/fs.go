// Package fusefs presents an NFSv3 export as a FUSE file system
// (github.com/hanwen/go-fuse/v2): one go-fuse node per NFS object, keyed by
// its file handle, with the Linux NFS client's caching rules where FUSE can
// express them.
//
//   - Identity: the inode number is the NFS fileid and the FUSE generation a
//     hash of the file handle, so a fileid the server reuses for a new object
//     is a new inode.
//   - State: a node holds what every object has (handle, attributes,
//     access rights per credential); a regular file's node also holds its
//     fileState (data, writes, opens, deferred SETATTR: filestate.go), a
//     directory's its dirState (names, listings: dirstate.go), never both.
//     Each has one mutex and its invariant and lock order in its doc
//     comment. Every change this mount makes in a directory goes through
//     dirState.changed. What the server showed of root squashing is
//     rootsquash.go's.
//   - Attributes are cached per object with the acregmin/acregmax/
//     acdirmin/acdirmax timeouts of nfs(5) (the timeout doubles while the
//     object does not change); the kernel is given the same timeouts for its
//     attribute and dentry caches. Post-operation attributes of every reply
//     refresh the cache.
//   - Close-to-open: open always revalidates with GETATTR; the kernel keeps
//     its page cache only if the file did not change, else its cached
//     attributes are invalidated too. Close (FUSE flush) and fsync COMMIT the
//     UNSTABLE writes, resending them FILE_SYNC should the write verifier
//     show the server lost them.
//   - Identity: each request's calls carry its caller's AUTH_SYS
//     credential (uid, gid, supplementary groups), as the kernel client
//     sends each process's own (Options.CallerIdentity).
//   - Killable: a caller killed while it waits (SIGKILL, or any signal
//     that kills it) ends the NFS call waited for, on a hard mount too;
//     other signals do not, as with the kernel client.
//   - Round trips as the kernel client makes them: the post-operation
//     attributes of every reply are used (no GETATTR after them); the
//     entries of a READDIRPLUS answer the LOOKUPs of an ls -l that follows;
//     an open right after its LOOKUP takes that LOOKUP's attributes as
//     its revalidation; a name found missing is cached as long as its
//     directory; names longer than the server's name_max are ENAMETOOLONG
//     without a call.
//   - Reads of a sequential reader (each read starting where the last
//     ended) are read ahead in pipelined READs of rsize, up to the file's
//     known size; a random reader costs exactly the READs of its reads.
//     FUSE requests are up to max(rsize, wsize) (at most 1 MiB).
//   - An application's small buffered writes are gathered into WRITEs of
//     wsize (contiguous writes, sent when full, before a read, SETATTR,
//     COMMIT or close, and at the latest after a second). When at close or
//     fsync all the file's unsaved data fits in one WRITE, it goes FILE_SYNC
//     and no COMMIT follows, as with the Linux client.
//   - Writes are pipelined: a buffered file's UNSTABLE writes are written
//     behind (answered once sent, up to Options.WriteBehind bytes in
//     flight; a failure is reported by the next write, close or fsync, as
//     the kernel client reports its write-back errors), and asynchronous
//     direct I/O (libaio, io_uring) reaches the server as concurrent
//     requests (FUSE's async DIO). Reads, SETATTR and COMMIT of a file
//     wait for its writes behind; while WRITEs are in flight the file's
//     size is never shown below their end.
//   - Unlinking or renaming over a file that is still open renames it to
//     .nfsXXXX instead (the NFS "silly rename") and removes it at the last
//     close, so open files stay readable.
//   - A directory listing whose cookies repeat (a looping server) fails
//     with EIO instead of running forever; a listing holds at most
//     MaxDirEntries entries.
//   - Locks: with Options.Locker, POSIX and flock locks are taken on the
//     server with NLM (see lock.go), else they stay local to this machine
//     (nfs(5) nolock).
//   - New files, directories and devices: the creator's umask is applied
//     by the mount (FUSE DONT_MASK), and left out in a directory that has
//     a default POSIX ACL, asked of the server with NFSACL, as the Linux
//     client does (Options.NoACL: always applied; acl.go).
//   - POSIX ACLs are the extended attributes system.posix_acl_access and
//     system.posix_acl_default, read and set with NFSACL as on the Linux
//     client; other names give EOPNOTSUPP (NFSv3 has no extended
//     attributes), as do these with Options.NoACL (xattr.go).
//   - NFS errors map to errnos (nfs3.Status.Errno). NFSv3 has no
//     fallocate.
package fusefs

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nfsrdma/nfsrdma/fusefs/internal/caller"
	"github.com/nfsrdma/nfsrdma/fusefs/internal/readahead"
	"github.com/nfsrdma/nfsrdma/fusefs/internal/wbuf"
	"github.com/nfsrdma/nfsrdma/nfs3"
)

// FS is an NFSv3 export as a tree of go-fuse nodes. Create it with New and
// mount its Root (see Mount).
type FS struct {
	c    *nfs3.Client
	opts Options
	log  *slog.Logger

	rsize, wsize uint32
	readAhead    int
	writeBehind  int
	maxDirty     int

	root *node

	// ctx bounds every NFS call; Close cancels it. The calls of a FUSE
	// request run under a context of their own derived from it (callCtx):
	// the caller's credential, cancelled when the caller is killed.
	ctx    context.Context
	cancel context.CancelFunc

	creds   credCache
	nameMax uint32 // PATHCONF name_max

	sillyCount atomic.Uint64
	events     eventCounters
	fuseOps    fuseOpCounters
	// noFlushReads: files opened for reading are closed without FLUSH
	// (set by MountWith when the kernel keeps the locks itself).
	noFlushReads atomic.Bool
	// noAtime: mounted noatime (see node.atimeStale).
	noAtime atomic.Bool
	// noDefer: the server refused a deferred SETATTR as read-only; no
	// more are deferred (setattr.go).
	noDefer atomic.Bool
	// ioGetattrs: the GETATTR requests being served that came through an
	// open file (FUSE_GETATTR_FH), by their cancel channel (set by the
	// raw file system, read by node.Getattr through fuse.Context.Cancel).
	ioGetattrs sync.Map
	// directIO: the READ and WRITE requests being served whose file has
	// O_DIRECT, by their cancel channel (set by the raw file system, read
	// through fuse.Context.Cancel: FS.directRequest).
	directIO sync.Map
	// umasks: the CREATE, MKDIR and MKNOD requests being served, by their
	// cancel channel, with the creator's umask (set by the raw file
	// system, read through fuse.Context.Cancel: FS.umaskOf; acl.go).
	umasks sync.Map
	// noACLProgram: the server answered that it has no NFSACL (xattr.go).
	noACLProgram atomic.Bool

	// shared: other users than the mounting one may enter the mount
	// (allow_other; set by NewRawFS). See private.go.
	shared bool
	// squash: what the server has shown of its squashing of root
	// (rootsquash.go).
	squash rootSquash

	watches caller.Watches // requests in flight, for interrupts (callCtx)
	// segBufs: read-ahead segments' memory, reused (readahead.go).
	segBufs readahead.Pool
	// kept: directories' READDIRPLUS replies kept for their next
	// listing (dircache.go).
	kept keptLists
	// wbufs: the memory of writes behind and kept writes, reused.
	wbufs   *wbuf.Pool
	lockers lockFiles // the open files each lock owner locked through (lock.go)
	// now and afterFunc are the clock and the timers of this mount's own
	// delays (time.Now; time.AfterFunc when nil): a gathered write's
	// pendDelay, a deferred SETATTR's deferFlushAfter, an unlink's
	// releaseWait. Tests replace them before the FS is mounted.
	now       func() time.Time
	afterFunc func(d time.Duration, fn func()) stopper
}

// stopper is a timer of FS.afterFunc: Stop reports whether it stopped fn
// from running (see time.Timer.Stop).
type stopper interface{ Stop() bool }

// after runs fn in its own goroutine once d has passed, by the FS's
// timers (FS.afterFunc).
func (f *FS) after(d time.Duration, fn func()) stopper {
	if f.afterFunc != nil {
		return f.afterFunc(d, fn)
	}
	return time.AfterFunc(d, fn)
}

// New returns the file system of the export whose root handle is root,
// served through c. It checks the root (GETATTR) and learns the transfer
// sizes (FSINFO). c stays the caller's: FS.Close does not close it.
func New(ctx context.Context, c *nfs3.Client, root nfs3.FileHandle, opts *Options) (*FS, error) {
	o := DefaultOptions()
	if opts != nil {
		o = *opts
	}
	f := &FS{c: c, opts: o, log: o.Logger, now: time.Now}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	a, err := c.Getattr(ctx, root)
	if err != nil {
		return nil, fmt.Errorf("fusefs: GETATTR of the root: %w", err)
	}
	if a.Type != nfs3.TypeDir {
		return nil, fmt.Errorf("fusefs: the export's root is %v, not a directory", a.Type)
	}
	rsize, wsize, err := c.IOSizes(ctx, root)
	if err != nil {
		return nil, fmt.Errorf("fusefs: FSINFO: %w", err)
	}
	if o.Rsize != 0 {
		rsize = min(rsize, o.Rsize)
	}
	if o.Wsize != 0 {
		wsize = min(wsize, o.Wsize)
	}
	f.rsize, f.wsize = max(min(rsize, MaxFUSEIO), 4096), max(min(wsize, MaxFUSEIO), 4096)
	switch {
	case o.ReadAhead < 0:
		f.readAhead = 0
	case o.ReadAhead == 0:
		f.readAhead = DefaultReadAhead
	default:
		f.readAhead = o.ReadAhead
	}
	switch {
	case o.WriteBehind < 0:
	case o.WriteBehind == 0:
		f.writeBehind = DefaultWriteBehind
	default:
		f.writeBehind = max(o.WriteBehind, int(f.wsize))
	}
	f.maxDirty = o.MaxDirty
	if f.maxDirty <= 0 {
		f.maxDirty = DefaultMaxDirty
	}
	f.wbufs = wbuf.New(int(f.wsize), f.writeBehind, f.maxDirty)
	f.nameMax = nfs3.MaxNameLen
	if pc, err := c.Pathconf(ctx, root); err == nil && pc.NameMax > 0 {
		f.nameMax = pc.NameMax
	}
	f.creds = newCredCache()
	f.watches.Log = f.log
	if o.Locker != nil {
		o.Locker.OnLost(f.lockLost)
	}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	f.root = newNode(f, root, a.Type)
	f.root.attrs.update(a, f.now(), o.AcDirMin, o.AcDirMax)
	return f, nil
}

// Root returns the root node, to mount with go-fuse.
func (f *FS) Root() fs.InodeEmbedder { return f.root }

// IOSizes returns the READ and WRITE sizes in use.
func (f *FS) IOSizes() (rsize, wsize uint32) { return f.rsize, f.wsize }

// Client returns the NFS client.
func (f *FS) Client() *nfs3.Client { return f.c }

// Close cancels the NFS calls in progress. It does not close the client.
func (f *FS) Close() error {
	f.cancel()
	f.watches.Close() // the FUSE requests' calls (callCtx)
	return nil
}

// MountConfig names the mount and chooses how go-fuse mounts it.
type MountConfig struct {
	// FsName is the source shown in /proc/mounts and df ("server:/export").
	FsName string
	// Name is the subtype: the mount's type is "fuse.<Name>" (default
	// "nfsrdma").
	Name string
	// AllowOther lets other users than the mounting one in (each one's
	// permissions decided by the server: access.go).
	AllowOther bool
	// DirectMount mounts with mount(2) (root), falling back to fusermount;
	// DirectMountStrict never falls back.
	DirectMount, DirectMountStrict bool
	// MountFlags are the mount(2) flags of a direct mount; 0 means
	// MS_NOSUID|MS_NODEV. MS_RDONLY is added for Options.ReadOnly.
	MountFlags uintptr
	// Debug logs every FUSE request (go-fuse's debug output).
	Debug bool
}

// FUSEOptions returns the go-fuse options for mounting f: requests up to
// wsize, the two POSIX ACLs as xattrs (xattr.go), permissions decided by the server
// (no default_permissions: access.go), the attribute timeouts set per
// reply, read-only when Options.ReadOnly.
func (f *FS) FUSEOptions(mc MountConfig) *fs.Options {
	name := mc.Name
	if name == "" {
		name = "nfsrdma"
	}
	mo := fuse.MountOptions{
		AllowOther: mc.AllowOther,
		FsName:     mc.FsName,
		Name:       name,
		// max_write, max_read and max_pages: requests as large as the
		// READs and WRITEs (larger ones go out in rsize/wsize pieces).
		MaxWrite: int(max(f.rsize, f.wsize)),
		// The kernel's read-ahead of buffered reads (capped by the kernel
		// at its own default, 128 KiB).
		MaxReadAhead: int(f.rsize),
		// Asynchronous requests (read-ahead, async direct I/O) in flight
		// before the kernel throttles: as many as the transport pipelines.
		MaxBackground:       64,
		CongestionThreshold: 48,
		// Extended attributes reach the mount (xattr.go): the two ACL
		// names, EOPNOTSUPP for others. Not FUSE_POSIX_ACL, which would
		// have the kernel check permissions itself.
		DisableXAttrs: false,
		// Read replies are in memory: splicing them would copy them into
		// a pipe first (and a 1 MiB reply does not fit one).
		DisableSplice: true,
		// Direct I/O (O_DIRECT) from an asynchronous submitter (libaio,
		// io_uring) reaches the server as concurrent requests, pipelined
		// over the transport, instead of one request at a time.
		//
		// Clearing set-user-ID and set-group-ID on a write or truncate is
		// left to the server (HANDLE_KILLPRIV_V2), as the kernel's NFS
		// client leaves it to knfsd: without it the FUSE kernel sends its
		// own SETATTR of the mode first, as the writer, which the server
		// refuses for a non-owner (EPERM from write(2)).
		//
		// A shared mmap(2) of a file opened O_DIRECT (directIOFlags) is
		// allowed where the kernel can (DIRECT_IO_ALLOW_MMAP, Linux 6.6).
		//
		// The creator's umask is applied here, not by the kernel
		// (DONT_MASK): a directory's default ACL decides whether it
		// applies, as on the kernel's NFS mount (acl.go).
		ExtraCapabilities: fuse.CAP_ASYNC_DIO | fuse.CAP_HANDLE_KILLPRIV_V2 | fuse.CAP_DIRECT_IO_ALLOW_MMAP | fuse.CAP_DONT_MASK,
		DirectMount:       mc.DirectMount,
		DirectMountStrict: mc.DirectMountStrict,
		Debug:             mc.Debug,
		DirectMountFlags:  mc.MountFlags,
	}
	if mo.DirectMountFlags == 0 {
		mo.DirectMountFlags = syscall.MS_NOSUID | syscall.MS_NODEV
	}
	f.noAtime.Store(mc.MountFlags&syscall.MS_NOATIME != 0)
	f.lockCapabilities(&mo)
	if f.opts.ReadOnly {
		mo.Options = append(mo.Options, "ro")
		mo.DirectMountFlags |= syscall.MS_RDONLY
	}
	// A name found missing is cached as a negative entry for as long as
	// its directory's attributes are trusted (the kernel client
	// revalidates a negative entry with its directory): Lookup sets the
	// timeout per reply, and the raw file system (NewRawFS) passes it on.
	return &fs.Options{
		MountOptions: mo,
		RootStableAttr: &fs.StableAttr{
			Ino: ino(f.root.attrs.attr.FileID),
			Gen: generation(f.root.handle()),
		},
		NullPermissions: true,
	}
}

// Mount mounts f at dir and serves it until the returned server is
// unmounted (Server.Unmount, or umount(8) and Server.Wait).
func Mount(dir string, f *FS, mc MountConfig) (*fuse.Server, error) {
	return MountWith(dir, f, f.FUSEOptions(mc))
}

// MountWith mounts f at dir with the go-fuse options fo (FUSEOptions,
// perhaps amended) and serves it.
func MountWith(dir string, f *FS, fo *fs.Options) (*fuse.Server, error) {
	f.noFlushReads.Store(!fo.MountOptions.EnableLocks)
	server, err := fuse.NewServer(f.NewRawFS(fo), dir, &fo.MountOptions)
	if err != nil {
		return nil, err
	}
	go server.Serve()
	if err := server.WaitMount(); err != nil {
		return nil, err
	}
	return server, nil
}

// checkName refuses a name longer than the server's name_max (PATHCONF)
// before any call, as the kernel client does.
func (f *FS) checkName(name string) syscall.Errno {
	if uint64(len(name)) > uint64(f.nameMax) {
		return syscall.ENAMETOOLONG
	}
	return 0
}

// negativeCache reports whether missing names may be cached (nfs(5)
// lookupcache=all).
func (f *FS) negativeCache() bool { return f.opts.LookupCache == LookupCacheAll }

// acBounds returns the attribute timeout bounds for objects of type t.
func (f *FS) acBounds(t nfs3.FileType) (lo, hi time.Duration) {
	if t == nfs3.TypeDir {
		return f.opts.AcDirMin, f.opts.AcDirMax
	}
	return f.opts.AcRegMin, f.opts.AcRegMax
}
