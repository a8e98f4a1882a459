package fusefs

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nfsrdma/nfsrdma/nlm"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// Locks (nfs(5) lock, the default; Options.Locker): the kernel passes
// fcntl(2) POSIX locks and flock(2) locks of regular files to the file
// system (FUSE's GETLK, SETLK and SETLKW), which takes them on the server
// with NLM, so that the processes of other clients see them, as with the
// kernel client:
//
//   - POSIX locks: FUSE's lock owner (the process's file table) is the NLM
//     owner. They are given back when the process closes any descriptor of
//     the file (FUSE's flush: every lock of the closing process on the
//     file, as POSIX says), and at the file's last close.
//   - flock locks travel as whole-file locks whose owner is the open file
//     (as the Linux client sends them: a flock and a POSIX lock of another
//     owner exclude each other on the server), given back when the open
//     file is released. The NLM owner is this mount's own for the open
//     file (fileLocks.id), not the kernel's: the kernel names a flock's
//     owner by the address of its file, which a new open may reuse while
//     the closed one's release, sent asynchronously, is still to come;
//     that release must not give back the new open file's lock.
//   - F_SETLKW waits until the server grants the lock; a signal interrupts
//     the wait (EINTR, which the kernel restarts for an SA_RESTART
//     handler), and the server's queued request is cancelled.
//   - A lock the server lost in a restart and that could not be
//     reclaimed (another client took it, or its grace period was missed:
//     nlm.Locker.OnLost) makes the open files through which its owner
//     locked the file fail read, write and fsync with EIO until they are
//     closed, as the Linux client does (nfs.recover_lost_locks=false, its
//     default): the process learns that what it protected may have been
//     changed by another. The file's cached pages are dropped, so that
//     reads reach the file system. Other open files of the file, and a new
//     open, are not affected.
//   - Locks are cache-coherency points, as with the Linux client (do_setlk
//     and do_unlk): before a lock or unlock is sent, what this mount holds
//     of the file unsent or uncommitted is written and COMMITted
//     (syncForLock), so that the next holder, on any client, reads it from
//     the server; once a lock is granted, the kernel's cached pages and
//     attributes of the file and this mount's read-ahead segments and
//     attributes are dropped (dropCaches), so that the holder reads and
//     stats what other clients wrote before. close(2) writes and commits
//     before it gives the process's locks back (openFile.Flush).
//   - Options.LocalPosix and LocalFlock (nfs(5) local_lock=posix, flock,
//     all) leave that kind to the kernel, local to this machine, as does a
//     nil Locker (nolock) for both. FUSE keeps such locks without telling
//     the file system, so they are no cache-coherency points here (the
//     Linux client writes back and drops its caches around local locks
//     too).

var (
	_ fs.FileGetlker  = (*openFile)(nil)
	_ fs.FileSetlker  = (*openFile)(nil)
	_ fs.FileSetlkwer = (*openFile)(nil)
)

// lockFiles are the open files through which each lock owner asked for a
// lock, for the EIO of a lost lock.
type lockFiles struct {
	mu sync.Mutex
	m  map[uint64]map[*openFile]struct{}
}

// add records that owner asked for a lock through f.
func (l *lockFiles) add(owner uint64, f *openFile) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[uint64]map[*openFile]struct{}{}
	}
	fs := l.m[owner]
	if fs == nil {
		fs = map[*openFile]struct{}{}
		l.m[owner] = fs
	}
	fs[f] = struct{}{}
}

// forget drops f (released).
func (l *lockFiles) forget(f *openFile) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for owner, fs := range l.m {
		if _, ok := fs[f]; ok {
			delete(fs, f)
			if len(fs) == 0 {
				delete(l.m, owner)
			}
		}
	}
}

// lockLost marks the open files of fh through which owner locked it: their
// I/O fails with EIO until they are closed (nlm.Locker.OnLost).
func (f *FS) lockLost(fh []byte, owner uint64) {
	f.lockers.mu.Lock()
	var marked []*openFile
	for of := range f.lockers.m[owner] {
		if bytes.Equal(of.n.handle(), fh) {
			of.lost.Store(true)
			marked = append(marked, of)
		}
	}
	f.lockers.mu.Unlock()
	f.log.Warn("lock lost across a server restart: read, write and fsync of the open files that held it fail with EIO until closed",
		"owner", owner, "files", len(marked))
	for _, of := range marked {
		// Reads from the kernel's cache must reach the file system.
		of.n.NotifyContent(0, 0)
	}
}

// lostIO is the EIO of I/O through f after its lock was lost, logged
// once per open file.
func (f *openFile) lostIO(op string) syscall.Errno {
	if f.lostLogged.CompareAndSwap(false, true) {
		f.n.fsys.log.Error("I/O through an open file whose lock was lost: EIO until it is closed", "op", op)
	}
	return syscall.EIO
}

// fileLocks is the flock owner of an open file: id, once it asked for a
// flock (0 before).
type fileLocks struct {
	mu sync.Mutex
	id uint64
}

// flockOwners numbers the flock owners of open files, from a random base
// (flockOwnerBase), so that they are no POSIX owner the kernel names (a
// hash of 64 bits).
var (
	flockOwners    atomic.Uint64
	flockOwnerBase = rand.Uint64()
)

// flockOwner returns the NLM owner of f's flocks.
func (f *openFile) flockOwner() uint64 {
	f.locks.mu.Lock()
	defer f.locks.mu.Unlock()
	if f.locks.id == 0 {
		f.locks.id = flockOwnerBase + flockOwners.Add(1)
	}
	return f.locks.id
}

// lockCapabilities sets what locks the kernel passes to f.
func (f *FS) lockCapabilities(mo *fuse.MountOptions) {
	if f.opts.Locker == nil || (f.opts.LocalPosix && f.opts.LocalFlock) {
		return
	}
	mo.EnableLocks = true
	if f.opts.LocalPosix {
		mo.DisabledCapabilities |= fuse.CAP_POSIX_LOCKS
	}
	if f.opts.LocalFlock {
		mo.DisabledCapabilities |= fuse.CAP_FLOCK_LOCKS
	}
}

// lockCtx returns the context of a lock request: with the caller's
// credential (the server checks its access to the file, as for the kernel
// client's NLM calls), ended by any interrupt of the caller (a signal:
// fcntl and flock return EINTR; the kernel restarts them for an
// SA_RESTART handler).
func (f *openFile) lockCtx(fctx context.Context) (context.Context, context.CancelFunc) {
	ctx, done := f.callCtx(fctx)
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(fctx, cancel)
	return ctx, func() {
		stop()
		cancel()
		done()
	}
}

func lockRequest(lk *fuse.FileLock) nlm.Request {
	return nlm.Request{Start: lk.Start, End: min(lk.End, nlm.ToEOF), Exclusive: lk.Typ == syscall.F_WRLCK, Pid: lk.Pid}
}

// lockErrno maps a Locker's error to the errno of fcntl or flock.
func lockErrno(err error) syscall.Errno {
	var st nlm.Stat
	switch {
	case err == nil:
		return 0
	case errors.As(err, &st):
		return st.Errno()
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	}
	var nr *sunrpc.NotRegisteredError
	if errors.As(err, &nr) {
		return syscall.ENOLCK // the server runs no lock manager
	}
	return toErrno(err)
}

// Getlk implements fs.FileGetlker (F_GETLK) with NLM's TEST.
func (f *openFile) Getlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	l := f.n.fsys.opts.Locker
	if l == nil {
		return syscall.ENOLCK
	}
	ctx, done := f.lockCtx(ctx)
	defer done()
	c, err := l.Test(ctx, f.n.handle(), owner, lockRequest(lk))
	if err != nil {
		return lockErrno(err)
	}
	if c == nil {
		*out = *lk
		out.Typ = syscall.F_UNLCK
		return 0
	}
	*out = fuse.FileLock{Start: c.Start, End: c.End, Typ: syscall.F_RDLCK, Pid: c.Pid}
	if c.Exclusive {
		out.Typ = syscall.F_WRLCK
	}
	return 0
}

// Setlk implements fs.FileSetlker (F_SETLK, flock with LOCK_NB).
func (f *openFile) Setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return f.setlk(ctx, owner, lk, flags, false)
}

// Setlkw implements fs.FileSetlkwer (F_SETLKW, flock).
func (f *openFile) Setlkw(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return f.setlk(ctx, owner, lk, flags, true)
}

func (f *openFile) setlk(fctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, wait bool) syscall.Errno {
	l := f.n.fsys.opts.Locker
	if l == nil {
		return syscall.ENOLCK
	}
	ctx, done := f.lockCtx(fctx)
	defer done()
	fh := f.n.handle()
	r := lockRequest(lk)
	if flags&fuse.FUSE_LK_FLOCK != 0 {
		// flock: the whole file, whatever the kernel says, and the open
		// file's own owner (see above).
		r.Start, r.End, r.Flock = 0, nlm.ToEOF, true
		owner = f.flockOwner()
	}
	var err error
	switch lk.Typ {
	case syscall.F_UNLCK:
		// Written back first; a failure stays for the next fsync or
		// close to report, and the unlock goes all the same (do_unlk).
		if werr := f.syncForLock(fctx); werr != nil {
			f.n.fsys.log.Debug("writing back before an unlock failed", "err", werr)
		}
		err = l.Unlock(ctx, fh, owner, r.Start, r.End)
	case syscall.F_RDLCK, syscall.F_WRLCK:
		// Written back first; a failure is the lock's (do_setlk).
		if werr := f.syncForLock(fctx); werr != nil {
			f.n.fsys.log.Debug("writing back before a lock failed", "err", werr)
			return toErrno(werr)
		}
		f.n.fsys.lockers.add(owner, f)
		err = l.Lock(ctx, fh, owner, r, wait)
		if err == nil {
			f.n.dropCaches()
		}
	default:
		return syscall.EINVAL
	}
	f.n.fsys.log.Debug("lock", "owner", owner, "type", lk.Typ, "start", r.Start, "end", r.End, "wait", wait, "flock", r.Flock, "err", err)
	return lockErrno(err)
}

// syncForLock writes back what this mount holds of the file that the
// server does not have or has not made durable, before a lock or unlock
// is sent: a deferred SETATTR, the gathered writes, the writes behind, and
// a COMMIT of the UNSTABLE ones (the Linux client's nfs_sync_mapping and
// nfs_wb_all). fctx is the lock request's: the calls carry the
// credential an fsync of the caller's would. A write's failure is
// returned and stays, as a write error of the kernel client's page cache
// does, for the next fsync or close to report too; a failed COMMIT's
// writes stay queued for the next COMMIT.
func (f *openFile) syncForLock(fctx context.Context) error {
	ctx, done := f.callCtx(fctx)
	defer done()
	return f.n.file.syncForLock(ctx)
}

// syncForLock is openFile.syncForLock with the calls' context.
func (s *fileState) syncForLock(ctx context.Context) error {
	if s == nil {
		return nil
	}
	s.flushDeferredLater() // its refusal stays for the fsync or close
	if synced, err := s.syncPend(ctx); synced && err != nil {
		s.keepWriteErr(err)
		return err
	}
	werr := s.drainWriteBehind() // left to be reported
	if err := s.commitPending(ctx); err != nil {
		return err
	}
	return werr
}

// keepWriteErr records err, a write's failure, for the next write, fsync
// or close to report (as a write behind's), unless one is there already.
func (s *fileState) keepWriteErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wbErr == nil {
		s.wbErr = err
	}
}

// dropCaches makes a granted lock a cache-coherency point (the Linux
// client's nfs_zap_caches after do_setlk's lock): the read-ahead segments
// of every open file of n are fetched again (fileState.dataGen), n's
// attributes are asked of the server at the next use, and the kernel
// drops its cached pages and attributes of the file, so that the lock
// holder's next read and stat see what other clients wrote before the
// lock. Nothing of this mount's own is lost: its unsent writes were
// written back before the lock was sent, and the kernel writes back dirty
// mapped pages before it drops them.
func (n *node) dropCaches() {
	n.file.changedData()
	n.invalidateAttr()
	n.fsys.events.add(evDataInvalidate)
	if errno := n.NotifyContent(0, 0); errno != 0 && errno != syscall.ENOSYS && errno != syscall.ENOENT {
		n.fsys.log.Debug("dropping the kernel's cache of a locked file", "errno", errno)
	}
}

// lockReleaseTimeout bounds the UNLOCKs of a close.
const lockReleaseTimeout = time.Minute

// flushLocks gives back the POSIX locks on the file of the process that
// closes a descriptor of it (FUSE's flush names the closing thread). Flush
// calls it once the file's writes are written back and committed.
func (f *openFile) flushLocks(fctx context.Context) {
	l := f.n.fsys.opts.Locker
	if l == nil {
		return
	}
	fh := f.n.handle()
	if !l.Asked(fh) {
		return
	}
	caller, ok := fuse.FromContext(fctx)
	if !ok || caller.Pid == 0 {
		return
	}
	ids := l.Owners(fh, threadGroup(caller.Pid))
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(f.wctx, lockReleaseTimeout)
	defer cancel()
	for _, id := range ids {
		if err := l.ReleaseOwner(ctx, fh, id); err != nil {
			f.n.fsys.log.Warn("unlocking at close failed", "err", err)
		}
	}
}

// releaseLocks gives back the flock locks of the open file, and at the
// file's last close whatever lock is left on it.
func (f *openFile) releaseLocks(last bool) {
	l := f.n.fsys.opts.Locker
	if l == nil {
		return
	}
	fh := f.n.handle()
	if !l.Asked(fh) {
		return
	}
	ctx, cancel := context.WithTimeout(f.wctx, lockReleaseTimeout)
	defer cancel()
	f.locks.mu.Lock()
	owner := f.locks.id
	f.locks.mu.Unlock()
	if owner != 0 || last {
		// What is written (through a mapping since the close's flush)
		// before the locks go, as an unlock (do_unlk).
		if err := f.n.file.syncForLock(ctx); err != nil {
			f.n.fsys.log.Debug("writing back before the unlocks of a release failed", "err", err)
		}
	}
	if owner != 0 {
		f.n.fsys.log.Debug("flock owner released", "owner", owner, "last", last)
		if err := l.ReleaseOwner(ctx, fh, owner); err != nil {
			f.n.fsys.log.Warn("unlocking flock at release failed", "err", err)
		}
	}
	if last {
		if err := f.n.fsys.lockers.releaseLeft(ctx, l, fh); err != nil {
			f.n.fsys.log.Warn("unlocking at last close failed", "err", err)
		}
	}
}

// releaseLeft gives back, at the file's last close, the locks left on fh
// by owners that asked for them through no open file still open (a lock
// granted after its caller gave up, an owner whose close did not name
// it). Not the others: a new open of the file may have been made, and
// locked, since the last close (the kernel sends a release
// asynchronously, after close(2) returned); its locks stay. The owners are
// looked at and released under l.mu, which setlk's add takes before it
// sends a lock, so that no open file takes up an owner meanwhile: a
// release racing such a lock would give it back on the server, or forget
// it here so that its unlock would send nothing and the server would keep
// a lock nobody holds.
func (l *lockFiles) releaseLeft(ctx context.Context, lk *nlm.Locker, fh []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for _, id := range lk.AskedBy(fh) {
		live := false
		for of := range l.m[id] {
			if bytes.Equal(of.n.handle(), fh) {
				live = true
				break
			}
		}
		if !live {
			errs = append(errs, lk.ReleaseOwner(ctx, fh, id))
		}
	}
	return errors.Join(errs...)
}

// threadGroup returns the process (thread group) of thread tid.
func threadGroup(tid uint32) uint32 {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(tid), 10) + "/status")
	if err != nil {
		return tid
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("Tgid:")); ok {
			if n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 32); err == nil {
				return uint32(n)
			}
		}
	}
	return tid
}
