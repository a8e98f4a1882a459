package fusefs

import (
	"log/slog"
	"time"

	"github.com/nfsrdma/nfsrdma/nlm"
)

// Options configures an FS. The zero value is not the nfs(5) default; start
// from DefaultOptions.
type Options struct {
	// The attribute cache (nfs(5) acregmin, acregmax, acdirmin, acdirmax):
	// a file's attributes are trusted for a timeout that starts at the
	// minimum, doubles each time a revalidation finds them unchanged, up to
	// the maximum, and falls back to the minimum when they change. The
	// kernel is given the same timeout for its attribute and dentry caches.
	// All zero is noac: every stat asks the server.
	AcRegMin, AcRegMax time.Duration
	AcDirMin, AcDirMax time.Duration

	// Sync sends every WRITE FILE_SYNC (nfs(5) sync; noac implies it).
	// Otherwise writes are UNSTABLE and COMMITted on flush, fsync and close.
	Sync bool

	// Rsize and Wsize cap the READ and WRITE sizes (the server's FSINFO
	// preference otherwise, see nfs3.Client.IOSizes). FUSE requests are at
	// most MaxFUSEIO.
	Rsize, Wsize uint32

	// ReadAhead is the most bytes read ahead of a sequential reader, in
	// pipelined READs of rsize; 0 means DefaultReadAhead, negative disables
	// read-ahead.
	ReadAhead int

	// MaxDirty bounds the bytes of UNSTABLE writes an open file keeps
	// (copied, to resend them should the server lose them before COMMIT)
	// before it COMMITs on its own; 0 means DefaultMaxDirty.
	MaxDirty int

	// WriteBehind bounds the bytes of UNSTABLE writes of a buffered file
	// in flight, answered to the kernel before the server's reply (see
	// the package doc); 0 means DefaultWriteBehind, negative writes each
	// one synchronously.
	WriteBehind int

	// CallerIdentity sends each FUSE request's NFS calls with its caller's
	// AUTH_SYS credential (uid, gid, supplementary groups), as the kernel
	// client does, instead of the client's configured one. Off when the
	// mount fixes one identity (uid=, gid=).
	CallerIdentity bool

	// NoCTO turns close-to-open consistency off (nfs(5) nocto): an open
	// revalidates nothing of its own; the file's attributes, and whether
	// its cached data is kept, follow the attribute cache timeouts only.
	// A file's dirty data is still written at close.
	NoCTO bool

	// DeferSetattr answers a chmod, chown or utimes of a regular file by
	// the process writing it at once, and sends them merged into one
	// SETATTR at its next write, fsync or close (tar -x, cp -a: one
	// SETATTR per file instead of three). Its risk: a refusal the client
	// could not foresee fails that close or fsync, not the chmod (see
	// setattr.go). Off: each is sent as the application made it, as the
	// kernel client does.
	DeferSetattr bool

	// LookupCache is nfs(5) lookupcache: which answers of LOOKUP the
	// kernel's dentry cache keeps (all: found and missing names; pos:
	// found ones only; none: neither, every path walk asks the server).
	LookupCache LookupCache

	// ReadOnly refuses every change with EROFS (nfs(5) ro).
	ReadOnly bool

	// NoACL does without the server's NFSACL (nfs(5) noacl): the
	// POSIX ACL xattrs give EOPNOTSUPP, where otherwise they read and
	// set the server's ACLs (xattr.go), and the creator's umask applies
	// to every new file, directory and device, where otherwise a
	// directory's default ACL replaces it (as acl(5) says and the kernel
	// client does; acl.go).
	NoACL bool

	// Locker takes POSIX (fcntl) and flock locks on the server with NLM
	// (nfs(5) lock); nil leaves every lock local to this machine (nolock).
	// LocalPosix and LocalFlock leave that kind local (local_lock=posix,
	// flock; both: all). The FS does not close it.
	Locker                 *nlm.Locker
	LocalPosix, LocalFlock bool

	// Logger receives the file system's events; nil discards them.
	Logger *slog.Logger
}

// LookupCache is the nfs(5) lookupcache mode.
type LookupCache int

const (
	LookupCacheAll      LookupCache = iota // found and missing names
	LookupCachePositive                    // found names only
	LookupCacheNone                        // none
)

// Defaults, as nfs(5) gives them for the attribute cache.
const (
	DefaultAcRegMin    = 3 * time.Second
	DefaultAcRegMax    = 60 * time.Second
	DefaultAcDirMin    = 30 * time.Second
	DefaultAcDirMax    = 60 * time.Second
	DefaultReadAhead   = 8 << 20
	DefaultMaxDirty    = 32 << 20
	DefaultWriteBehind = 16 << 20
	// MaxFUSEIO is the largest READ or WRITE request the Linux kernel
	// sends a FUSE server (256 pages).
	MaxFUSEIO = 1 << 20
)

// DefaultOptions returns the nfs(5) defaults: ac with acregmin=3, acregmax=60,
// acdirmin=30, acdirmax=60, async, server-chosen rsize/wsize, rw, each
// caller's own identity.
func DefaultOptions() Options {
	return Options{
		AcRegMin: DefaultAcRegMin, AcRegMax: DefaultAcRegMax,
		AcDirMin: DefaultAcDirMin, AcDirMax: DefaultAcDirMax,
		CallerIdentity: true,
	}
}

// NoAC sets the options nfs(5) noac means: no attribute caching and
// synchronous writes.
func (o *Options) NoAC() {
	o.AcRegMin, o.AcRegMax, o.AcDirMin, o.AcDirMax = 0, 0, 0, 0
	o.Sync = true
}
