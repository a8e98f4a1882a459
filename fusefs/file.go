package fusefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nfsrdma/nfsrdma/fusefs/internal/caller"
	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// openFile is an open regular file: the FUSE file handle.
type openFile struct {
	n     *node
	flags uint32
	ra    *readAhead // nil: read-ahead off
	// wctx carries the opener's credential for the calls made on its
	// behalf after its request (writes behind, COMMIT at the last close);
	// ctx is wctx until the handle is released (read-ahead).
	wctx   context.Context
	ctx    context.Context
	cancel context.CancelFunc
	locks  fileLocks // flock owners (lock.go)
	// lost: a lock taken through this open file was lost across a server
	// restart; its I/O fails with EIO until it is closed (lock.go).
	lost, lostLogged atomic.Bool
	// writer: opened for writing by process pid (see deferSetattr).
	writer bool
	pid    uint32
}

var (
	_ fs.FileReader   = (*openFile)(nil)
	_ fs.FileWriter   = (*openFile)(nil)
	_ fs.FileFlusher  = (*openFile)(nil)
	_ fs.FileFsyncer  = (*openFile)(nil)
	_ fs.FileReleaser = (*openFile)(nil)
)

// newOpenFile opens a handle on n for the caller of ctx (see FS.callCtx),
// process pid.
func (n *node) newOpenFile(ctx context.Context, flags uint32, pid uint32) *openFile {
	f := &openFile{n: n, flags: flags, wctx: n.fsys.ctx, pid: pid}
	f.writer = flags&syscall.O_ACCMODE != syscall.O_RDONLY && pid != 0
	if cred, ok := sunrpc.CredentialFrom(ctx); ok {
		f.wctx = sunrpc.WithCredential(n.fsys.ctx, cred)
	}
	f.ctx, f.cancel = context.WithCancel(f.wctx)
	if n.fsys.readAhead > 0 && flags&syscall.O_ACCMODE != syscall.O_WRONLY && flags&syscall.O_DIRECT == 0 {
		// Not for direct I/O: never served from a cache (see Read).
		f.ra = newReadAhead(f, int(n.fsys.rsize), n.fsys.readAhead)
	}
	st := n.file
	st.mu.Lock()
	st.opens++
	if f.writer {
		if st.writers == nil {
			st.writers = make(map[uint32]int)
		}
		st.writers[f.pid]++
		delete(st.closedBy, f.pid)
	}
	st.mu.Unlock()
	return f
}

// lookupFresh bounds how long after the server last showed a directory's
// state its complete set of names answers for a name not in it (names.go).
const lookupFresh = time.Second

// Open implements fs.NodeOpener with close-to-open consistency: a GETATTR
// revalidates the file; the kernel keeps its cached pages only if the file
// did not change since, else its cached attributes are dropped as well.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fuseFlags, errno := n.open(ctx, flags)
	if errno == 0 && flags&syscall.O_ACCMODE == syscall.O_RDONLY && n.fsys.noFlushReads.Load() {
		// Closing a file opened for reading has nothing to write or
		// commit: the kernel sends no FLUSH (one request less per file
		// read). Not when locks are forwarded: FLUSH releases the
		// closing process's locks.
		fuseFlags |= fuse.FOPEN_NOFLUSH
	}
	if errno == 0 {
		fuseFlags |= directIOFlags(flags)
	}
	return fh, fuseFlags, errno
}

// directIOFlags returns the FUSE open flags of a file opened with flags
// (Open, Create): for a direct (O_DIRECT) open, the kernel sends its reads
// and writes straight to the mount server (FOPEN_DIRECT_IO), as the kernel
// NFS client sends them straight to the server. Through the page cache's
// path instead, FUSE re-reads the attributes before a read once a write
// made it forget them (auto_inval_data): a GETATTR request, answered here
// from the trusted attributes but a round trip all the same, ahead of
// every read after a write (fio's randrw), and it cuts a direct read at
// the size it has cached, where the kernel client's reads see a file that
// grew. Its price, on kernels without FUSE_DIRECT_IO_ALLOW_MMAP (before
// 6.6): a shared mmap(2) of such a descriptor fails with ENODEV.
func directIOFlags(flags uint32) uint32 {
	if flags&syscall.O_DIRECT != 0 {
		return fuse.FOPEN_DIRECT_IO
	}
	return 0
}

func (n *node) open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	pid := callerPid(ctx)
	ctx, done := n.fsys.callCtx(ctx)
	defer done()
	if n.fsys.opts.ReadOnly && (flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0) {
		return nil, 0, syscall.EROFS
	}
	// The server decides (access.go); accessAttr: the attributes the
	// caller's ACCESS brought, now or just before (a stat).
	accessAttr, errno := n.openAccess(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	n.mu.Lock()
	had := n.attrs.valid || !n.attrs.at.IsZero()
	// Attributes a LOOKUP or a listing brought since the last open showed
	// the data changed: the cached pages go, whatever this open's GETATTR
	// finds (it compares with those attributes, not the ones the pages
	// were read under).
	seen := n.lookupChanged
	n.lookupChanged = false
	n.mu.Unlock()
	if n.fsys.opts.NoCTO {
		// nocto: no revalidation of its own. While the cached attributes
		// are trusted the cached data is kept, unless attributes seen
		// since the last open showed the file changed.
		n.mu.Lock()
		_, fresh := n.attrs.fresh(n.fsys.now())
		typ, stale := n.attrs.attr.Type, n.staleData
		if fresh {
			n.staleData = false
		}
		n.mu.Unlock()
		if fresh {
			if typ != nfs3.TypeReg || n.file == nil {
				return nil, 0, syscall.EINVAL
			}
			var fuseFlags uint32 = fuse.FOPEN_KEEP_CACHE
			if stale {
				fuseFlags = 0
				n.file.changedData()
				n.fsys.events.add(evDataInvalidate)
			}
			return n.newOpenFile(ctx, flags, pid), fuseFlags, 0
		}
	}
	// Close-to-open: the attributes as the server has them now. An ACCESS
	// of this open that carried them answered that already (one round
	// trip instead of two); else a GETATTR.
	var a nfs3.Attr
	var err error
	if accessAttr != nil {
		a = *accessAttr
	} else {
		err = n.do(ctx, func(fh nfs3.FileHandle) (err error) {
			a, err = n.fsys.c.Getattr(ctx, fh)
			return err
		})
	}
	if err != nil {
		// The object the kernel looked up may be gone (removed, or renamed
		// over, since): its entry goes, so that the VFS's retry of the
		// open (once, on ESTALE) looks the name up again.
		n.forgetIfStale(err)
		n.markGone(err)
		return nil, 0, toErrno(err)
	}
	changed := n.setAttr(&a) || seen
	if errno := n.recheckOpenAccess(ctx, flags, accessAttr != nil); errno != 0 {
		return nil, 0, errno
	}
	if a.Nlink == 0 && !n.file.inUse() {
		// No name has the object any more (another client renamed a
		// file over it, or removed it), though the server still knows
		// the handle (its open-file cache holds it). A path walk
		// cannot have reached it through its name now: the name's
		// entry goes and the open fails with ESTALE, which the VFS
		// retries once with a new LOOKUP, finding what the name has
		// now, as the kernel client's open, whose revalidation of the
		// name finds the new file, does. Not while this mount has it
		// open or silly renamed (an open through /proc/PID/fd).
		n.forgetIfStale(nfs3.ErrStale)
		return nil, 0, syscall.ESTALE
	}
	n.mu.Lock()
	if n.fsys.opts.NoCTO {
		changed = changed || n.staleData
	}
	n.staleData = false
	n.mu.Unlock()
	if a.Type != nfs3.TypeReg || n.file == nil {
		return nil, 0, syscall.EINVAL
	}
	var fuseFlags uint32
	if had && !changed {
		fuseFlags = fuse.FOPEN_KEEP_CACHE
	} else if changed {
		n.file.changedData()
		n.fsys.events.add(evDataInvalidate)
		// The page cache goes (no KEEP_CACHE); the kernel's size and times
		// must go too, or it would read up to the old size only.
		if errno := n.NotifyContent(-1, 0); errno != 0 && errno != syscall.ENOSYS {
			n.fsys.log.Debug("invalidating cached attributes", "errno", errno)
		}
	}
	return n.newOpenFile(ctx, flags, pid), fuseFlags, 0
}

// Read implements fs.FileReader: through the read-ahead for a sequential
// reader, else pipelined READs (RFC 1813 §3.3.6) of rsize straight into the
// kernel's buffer.
//
// A direct read (a file opened O_DIRECT, or one that turned O_DIRECT on
// with fcntl) always reads what it asks for from the server, as the
// kernel client's direct I/O does: never from a read-ahead segment
// fetched before another client's write, nor filling one.
func (f *openFile) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if f.lost.Load() {
		return nil, f.lostIO("read")
	}
	if f.n.isGone() {
		// The server called the handle stale: ESTALE, as the Linux
		// client's reads of a stale inode give (nothing from the
		// read-ahead's segments either).
		return nil, syscall.ESTALE
	}
	direct := f.n.fsys.directRequest(ctx)
	ctx, done := f.callCtx(ctx)
	defer done()
	// The reader sees its own writes: those written behind land first.
	f.n.file.drainWriteBehind()
	var n int
	var res fuse.ReadResult
	var err error
	if f.ra != nil && !direct {
		n, res, err = f.ra.read(ctx, dest, off)
	} else {
		n, err = f.n.readAt(ctx, dest, off)
	}
	if err != nil && err != io.EOF {
		f.n.markGone(err)
		return nil, toErrno(err)
	}
	if res != nil {
		return res, 0 // the data is in a read-ahead segment (readahead.go)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// Write implements fs.FileWriter: WRITE (RFC 1813 §3.3.7) UNSTABLE, or
// FILE_SYNC with Options.Sync, O_SYNC or O_DSYNC, and for a direct
// (O_DIRECT) write that fits one WRITE; an UNSTABLE write is kept until a
// COMMIT proves it durable, and COMMITted early once MaxDirty bytes wait.
// A direct write (opened O_DIRECT, or turned on with fcntl) is sent before
// it returns, and COMMITted before it returns when it went UNSTABLE, as
// the kernel client's direct write is durable when it returns.
//
// An UNSTABLE write of a buffered (not O_DIRECT) file is written behind:
// it is answered once its WRITE is sent, so that a writer's successive
// requests go out pipelined as the kernel client's page cache writes back
// (up to Options.WriteBehind bytes in flight). Its failure is reported by
// the next write, flush (close) or fsync; reads, SETATTR and COMMIT of the
// file wait for it first.
func (f *openFile) Write(fctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if f.lost.Load() {
		return 0, f.lostIO("write")
	}
	ctx, done := f.callCtx(fctx)
	defer done()
	n, s := f.n, f.n.file
	// A SETATTR deferred before this write lands first: an explicit
	// mtime must not be undone by the write, nor set over it.
	if err := s.flushDeferred(); err != nil {
		return 0, toErrno(err)
	}
	if n.fsys.opts.ReadOnly {
		return 0, syscall.EROFS
	}
	how := nfs3.Unstable
	direct := f.flags&syscall.O_DIRECT != 0 || n.fsys.directRequest(fctx)
	if n.fsys.opts.Sync || f.flags&(syscall.O_SYNC|syscall.O_DSYNC) != 0 {
		how = nfs3.FileSync
	} else if direct && len(data) <= int(n.fsys.wsize) {
		// A direct write that one WRITE carries goes FILE_SYNC, as the
		// Linux client sends a direct-I/O request that fits one WRITE
		// (FLUSH_COND_STABLE): nothing to keep a copy of for a resend,
		// and no COMMIT to follow.
		how = nfs3.FileSync
	}
	var err error
	if how == nfs3.Unstable && !direct && n.fsys.writeBehind > 0 {
		err = s.gather(f.wctx, data, off)
	} else {
		// After the buffered writes before it, never overtaken by them.
		s.drainWriteBehind()
		err = s.writeRange(ctx, data, off, how, lent)
		s.dataGen.Add(1)
		if err == nil && direct && how == nfs3.Unstable {
			err = s.commitPending(ctx)
		}
	}
	if err != nil {
		return 0, toErrno(err)
	}
	s.mu.Lock()
	dirty := s.ndirty
	s.mu.Unlock()
	switch {
	case dirty > 2*n.fsys.maxDirty:
		// The COMMITs do not keep up with the writer: it waits for one.
		if err := s.commitPending(ctx); err != nil {
			return 0, toErrno(err)
		}
	case dirty > n.fsys.maxDirty && s.commit.TryLock():
		// COMMIT in the background while the writer goes on. A failure
		// leaves the writes queued for the next COMMIT (by flush, fsync,
		// close), which reports it.
		go func() {
			defer s.commit.Unlock()
			if err := s.commitPendingLocked(f.wctx); err != nil {
				n.fsys.log.Debug("background COMMIT failed; the writes stay queued", "err", err)
			}
		}()
	}
	return uint32(len(data)), 0
}

// directRequest reports whether the READ or WRITE request of ctx is direct
// I/O: its file has O_DIRECT now (the kernel sends the file's flags with
// each; see rawFS.Read), which a file opened buffered may have turned on
// with fcntl.
func (f *FS) directRequest(ctx context.Context) bool {
	fc, ok := ctx.(*fuse.Context)
	if !ok || fc.Cancel == nil {
		return false
	}
	_, direct := f.directIO.Load(fc.Cancel)
	return direct
}

// pendDelay is the longest a gathered write waits for the next one before
// it is sent anyway.
const pendDelay = time.Second

// gather adds a buffered write to the file's gathered writes: contiguous
// writes are sent as one WRITE of up to wsize (as the kernel client's page
// cache gathers an application's small write calls), when it is full, when
// a write does not follow it, before anything that needs the server to
// have it (read, SETATTR, COMMIT, close) and at the latest after pendDelay.
// It returns the error of an earlier write behind.
func (s *fileState) gather(ctx context.Context, data []byte, off int64) error {
	n := s.n
	wsize := int(n.fsys.wsize)
	end := off + int64(len(data))
	s.mu.Lock()
	if s.wbErr != nil {
		err := s.wbErr
		s.wbErr = nil
		s.mu.Unlock()
		return err
	}
	// Another opener's writes are not gathered with these: each WRITE
	// carries its writer's credential (as the kernel client coalesces
	// only the pages of one open context).
	if s.pend != nil && off == s.pendOff+int64(len(s.pend)) && len(s.pend)+len(data) <= wsize && caller.SameCred(s.pendCtx, ctx) {
		s.pend = n.fsys.wbufs.AppendPend(s.pend, data)
		s.wrEnd = max(s.wrEnd, end)
		if len(s.pend) < wsize {
			s.mu.Unlock()
			return nil
		}
		buf, boff, bctx := s.takePendLocked()
		s.mu.Unlock()
		s.sendPend(bctx, buf, boff)
		return nil
	}
	buf, boff, bctx := s.takePendLocked()
	s.mu.Unlock()
	if buf != nil {
		s.sendPend(bctx, buf, boff)
	}
	if len(data) >= wsize {
		// One write behind per WRITE, each in a pooled buffer.
		for i := 0; i < len(data); i += wsize {
			piece := data[i:min(len(data), i+wsize)]
			if err := s.writeBehind(ctx, n.fsys.wbufs.Clone(piece), off+int64(i), false); err != nil {
				return err
			}
		}
		return nil
	}
	s.mu.Lock()
	if s.pend != nil {
		// Another write started gathering meanwhile: this one goes alone.
		s.mu.Unlock()
		return s.writeBehind(ctx, n.fsys.wbufs.Clone(data), off, false)
	}
	s.pend = n.fsys.wbufs.AppendPend(nil, data)
	s.pendOff, s.pendCtx = off, ctx
	// Counted as a WRITE in flight: the size shown covers it.
	s.wrInflight++
	s.wrEnd = max(s.wrEnd, end)
	s.pendGen++
	gen := s.pendGen
	s.mu.Unlock()
	n.fsys.after(pendDelay, func() { s.flushPend(gen) })
	return nil
}

// takePendLocked takes the gathered writes; s.mu is held. The caller sends
// them (sendPend, or writeRange and endWrite).
func (s *fileState) takePendLocked() ([]byte, int64, context.Context) {
	buf, off, ctx := s.pend, s.pendOff, s.pendCtx
	s.pend, s.pendCtx = nil, nil
	return buf, off, ctx
}

// sendPend writes gathered writes behind, ending their count as a WRITE in
// flight once that one has begun.
func (s *fileState) sendPend(ctx context.Context, buf []byte, off int64) {
	s.writeBehind(ctx, buf, off, true)
	s.endWrite()
}

// flushPend sends the gathered writes, if any (gen: only those of that
// gathering; 0: whichever), as a write behind (whose failure the next
// write, flush or fsync reports).
func (s *fileState) flushPend(gen uint64) {
	s.mu.Lock()
	if s.pend == nil || gen != 0 && gen != s.pendGen {
		s.mu.Unlock()
		return
	}
	buf, off, ctx := s.takePendLocked()
	s.mu.Unlock()
	s.sendPend(ctx, buf, off)
}

// syncPend sends the gathered writes with one FILE_SYNC WRITE when they are
// all the file's unsaved data (no write behind in flight, nothing waiting
// for a COMMIT): the COMMIT that close or fsync would send is saved, as the
// Linux client does. It reports whether it did.
func (s *fileState) syncPend(ctx context.Context) (bool, error) {
	if s == nil {
		return false, nil
	}
	s.mu.Lock()
	if s.pend == nil || s.wbCalls > 0 || len(s.dirty) > 0 || s.wbErr != nil {
		s.mu.Unlock()
		return false, nil
	}
	buf, off, pctx := s.takePendLocked()
	s.mu.Unlock()
	// With the credential of the opener that wrote them, whoever closes.
	err := s.writeRange(caller.WithCredOf(ctx, pctx), buf, off, nfs3.FileSync, ownedWhole)
	s.endWrite()
	s.dataGen.Add(1)
	return true, err
}

// writeBehind WRITEs data (owned: the caller gives it up) UNSTABLE in the
// background (see Write); it waits while Options.WriteBehind bytes are in
// flight, and returns (and clears) the error of an earlier write behind.
//
// Gathered writes (already answered to the kernel) are sent whatever an
// earlier write behind did, and leave its error to be reported.
func (s *fileState) writeBehind(ctx context.Context, data []byte, off int64, gathered bool) error {
	n := s.n
	s.mu.Lock()
	if s.wbDone == nil {
		s.wbDone = sync.NewCond(&s.mu)
	}
	for s.wbBytes > 0 && s.wbBytes+len(data) > n.fsys.writeBehind && s.wbErr == nil {
		s.wbDone.Wait()
	}
	if err := s.wbErr; err != nil && !gathered {
		s.wbErr = nil
		s.mu.Unlock()
		return err
	}
	s.wbBytes += len(data)
	s.wbCalls++
	s.mu.Unlock()
	s.beginWrite(off, len(data)) // the kernel's size is past it from now on
	buf := data
	go func() {
		err := s.writeRange(ctx, buf, off, nfs3.Unstable, ownedWhole)
		s.endWrite()
		s.dataGen.Add(1)
		s.mu.Lock()
		s.wbBytes -= len(buf)
		s.wbCalls--
		if err != nil && s.wbErr == nil {
			s.wbErr = err
		}
		s.wbDone.Broadcast()
		s.mu.Unlock()
	}()
	return nil
}

// drainWriteBehind sends the gathered writes and waits until every write
// behind of the file has its reply; it returns the error of one that
// failed, leaving it to be reported. A nil s (not a regular file) has none.
func (s *fileState) drainWriteBehind() error {
	if s == nil {
		return nil
	}
	s.flushPend(0)
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.wbCalls > 0 {
		s.wbDone.Wait()
	}
	return s.wbErr
}

// takeWriteBehindErr drains the writes behind and returns (and clears) the
// error of one that failed.
func (s *fileState) takeWriteBehindErr() error {
	s.drainWriteBehind()
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.wbErr
	s.wbErr = nil
	return err
}

// beginWrite and endWrite bracket WRITEs of [off, off+size): see
// fileState.wrEnd.
func (s *fileState) beginWrite(off int64, size int) {
	s.mu.Lock()
	s.wrInflight++
	s.wrEnd = max(s.wrEnd, off+int64(size))
	s.mu.Unlock()
}

func (s *fileState) endWrite() {
	s.mu.Lock()
	if s.wrInflight--; s.wrInflight == 0 {
		s.wrEnd = 0
	}
	s.mu.Unlock()
}

// ownership says whose writeRange's data is.
type ownership int

const (
	lent       ownership = iota // the caller's: what the server takes UNSTABLE is copied to be kept
	owned                       // given up: kept itself (pieces of it)
	ownedWhole                  // given up, a pooled buffer (FS.wbufs) or data of no one else: kept itself, or given back to the pool when none of it is kept
)

// writeRange WRITEs data at off in WRITEs of at most wsize, until the server
// took all of it, keeping what it took UNSTABLE for a COMMIT (see ownership).
func (s *fileState) writeRange(ctx context.Context, data []byte, off int64, how nfs3.StableHow, own ownership) error {
	n := s.n
	s.beginWrite(off, len(data))
	defer s.endWrite()
	kept := false
	if own == ownedWhole {
		defer func() {
			if !kept {
				n.fsys.wbufs.Put(data)
			}
		}()
	}
	wsize := int(n.fsys.wsize)
	for done := 0; done < len(data); {
		chunk := data[done:min(len(data), done+wsize)]
		var r nfs3.WriteResult
		err := n.do(ctx, func(fh nfs3.FileHandle) (err error) {
			r, err = n.fsys.c.Write(ctx, fh, uint64(off)+uint64(done), chunk, how)
			return err
		})
		n.setWcc(&r.Wcc)
		if err != nil {
			return err
		}
		if r.Count == 0 {
			return fmt.Errorf("nfs3: WRITE at %d: %w", off+int64(done), io.ErrShortWrite)
		}
		if r.Committed == nfs3.Unstable {
			piece, whole := chunk[:r.Count], false
			switch {
			case own == lent:
				piece, whole = n.fsys.wbufs.Clone(piece), true
			case own == ownedWhole && done == 0 && len(piece) == len(data):
				whole = true // all of data, in one entry: given back after its COMMIT
			}
			kept = kept || own != lent
			s.mu.Lock()
			s.dirty = append(s.dirty, dirtyWrite{off: off + int64(done), data: piece, verf: r.Verf, whole: whole, cred: caller.CredOf(ctx)})
			s.ndirty += int(r.Count)
			s.mu.Unlock()
		}
		done += int(r.Count)
	}
	return nil
}

// maxCommitTries bounds how often commitDirty resends writes whose
// verifier keeps changing (a server restarting again and again).
const maxCommitTries = 3

// commitDirty COMMITs the file (RFC 1813 §3.3.21) if it has UNSTABLE writes,
// and resends FILE_SYNC each write whose verifier differs from the COMMIT's:
// the server restarted and may have lost it.
func (s *fileState) commitDirty(ctx context.Context) error {
	if s == nil {
		return nil
	}
	if synced, err := s.syncPend(ctx); synced && err != nil {
		return err
	}
	werr := s.takeWriteBehindErr()
	if err := s.commitPending(ctx); err != nil {
		return err
	}
	return werr
}

// commitPending is commitDirty once the writes behind have landed.
func (s *fileState) commitPending(ctx context.Context) error {
	s.commit.Lock()
	defer s.commit.Unlock()
	return s.commitPendingLocked(ctx)
}

// commitPendingLocked is commitPending with s.commit held.
func (s *fileState) commitPendingLocked(ctx context.Context) error {
	n := s.n
	for try := 1; ; try++ {
		s.mu.Lock()
		pending := s.dirty
		s.dirty, s.ndirty = nil, 0
		s.mu.Unlock()
		if len(pending) == 0 {
			return nil
		}
		// With the credential of the first write it commits, whoever
		// asks for it, as the kernel client's COMMIT carries its first
		// request's open context's.
		cctx := pending[0].cred.On(ctx)
		var r nfs3.CommitResult
		err := n.do(cctx, func(fh nfs3.FileHandle) (err error) {
			r, err = n.fsys.c.Commit(cctx, fh, 0, 0)
			return err
		})
		n.setWcc(&r.Wcc)
		if err != nil {
			s.requeue(pending)
			return err
		}
		lost := pending[:0]
		for _, d := range pending {
			switch {
			case d.verf != r.Verf:
				lost = append(lost, d)
			case d.whole:
				n.fsys.wbufs.Put(d.data) // durable: its memory serves another write
			}
		}
		if len(lost) == 0 {
			return nil
		}
		if try == maxCommitTries {
			s.requeue(lost)
			return &nfs3.VerifierChangedError{Tries: try}
		}
		n.fsys.log.Warn("write verifier changed; resending uncommitted writes with FILE_SYNC", "writes", len(lost))
		for i, d := range lost {
			// Writes the server takes UNSTABLE again are requeued by
			// writeRange and committed on the next round.
			own := owned
			if d.whole {
				own = ownedWhole
			}
			if err := s.writeRange(d.cred.On(ctx), d.data, d.off, nfs3.FileSync, own); err != nil {
				s.requeue(lost[i+1:])
				return err
			}
		}
		s.dataGen.Add(1)
	}
}

// requeue puts writes back in front of the dirty list.
func (s *fileState) requeue(ws []dirtyWrite) {
	if len(ws) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range ws {
		s.ndirty += len(d.data)
	}
	s.dirty = append(slices.Clone(ws), s.dirty...)
}

// Flush implements fs.FileFlusher: close(2) commits the file's writes
// (close-to-open), and reports their failure; then it gives back the
// closing process's locks (lock.go), as the Linux client flushes before
// its unlock: the next holder, on any client, reads what was written
// under them.
func (f *openFile) Flush(ctx context.Context) syscall.Errno {
	defer f.flushLocks(ctx)
	if f.writer {
		// Its RELEASE may come after its next request: until they
		// open the file again, the opener's and the closer's SETATTRs
		// are sent at once (setattr.go).
		s := f.n.file
		s.mu.Lock()
		if s.closedBy == nil {
			s.closedBy = make(map[uint32]struct{})
		}
		s.closedBy[f.pid] = struct{}{}
		if pid := callerPid(ctx); pid != 0 {
			s.closedBy[pid] = struct{}{}
		}
		s.mu.Unlock()
	}
	ctx, done := f.callCtx(ctx)
	defer done()
	if err := f.n.file.flushDeferred(); err != nil {
		return toErrno(err)
	}
	return toErrno(f.n.file.commitDirty(ctx))
}

// Fsync implements fs.FileFsyncer.
func (f *openFile) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if f.lost.Load() {
		return f.lostIO("fsync") // its lock was lost (lock.go)
	}
	ctx, done := f.callCtx(ctx)
	defer done()
	if err := f.n.file.flushDeferred(); err != nil {
		return toErrno(err)
	}
	return toErrno(f.n.file.commitDirty(ctx))
}

// Release implements fs.FileReleaser: the last close of a file commits what
// is left (writes through mmap) and removes a silly-renamed file.
func (f *openFile) Release(ctx context.Context) syscall.Errno {
	f.cancel()
	if f.ra != nil {
		f.ra.close()
	}
	ctx = f.wctx
	n, s := f.n, f.n.file
	s.mu.Lock()
	s.opens--
	if f.writer {
		if s.writers[f.pid]--; s.writers[f.pid] <= 0 {
			delete(s.writers, f.pid)
			delete(s.closedBy, f.pid)
		}
	}
	last := s.opens == 0
	silly := s.silly
	if last {
		s.silly = nil
		if s.closed != nil {
			s.closed.Broadcast()
		}
	}
	s.mu.Unlock()
	n.fsys.lockers.forget(f)
	f.releaseLocks(last)
	if f.writer {
		// A deferred SETATTR counts on its writer's open (setattr.go);
		// nobody is left to tell of a refusal, which flushDeferred
		// logs.
		_ = s.flushDeferred()
	}
	if !last {
		return 0
	}
	if err := s.commitDirty(ctx); err != nil {
		n.fsys.log.Warn("commit at last close failed", "err", err)
	}
	if silly != nil {
		var w nfs3.WccData
		err := silly.parent.do(ctx, func(dir nfs3.FileHandle) (err error) {
			w, err = n.fsys.c.Remove(ctx, dir, silly.name)
			return err
		})
		silly.parent.dir.changed(&w, err == nil, nameChange{remove: silly.name})
		n.invalidateAttr()
		if err != nil && !errors.Is(err, nfs3.ErrNoEnt) {
			n.fsys.log.Warn("removing silly-renamed file", "name", silly.name, "err", err)
		}
	}
	return 0
}
