package fusefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nfsrdma/nfsrdma/nfs3"
)

// openFile is an open regular file: the FUSE file handle.
type openFile struct {
	n      *node
	flags  uint32
	ra     *readAhead // nil: read-ahead off
	ctx    context.Context
	cancel context.CancelFunc
}

var (
	_ fs.FileReader   = (*openFile)(nil)
	_ fs.FileWriter   = (*openFile)(nil)
	_ fs.FileFlusher  = (*openFile)(nil)
	_ fs.FileFsyncer  = (*openFile)(nil)
	_ fs.FileReleaser = (*openFile)(nil)
)

// newOpenFile opens a handle on n.
func (n *node) newOpenFile(flags uint32) *openFile {
	f := &openFile{n: n, flags: flags}
	f.ctx, f.cancel = context.WithCancel(n.fsys.ctx)
	if n.fsys.readAhead > 0 && flags&syscall.O_ACCMODE != syscall.O_WRONLY {
		f.ra = newReadAhead(f, int(n.fsys.rsize), n.fsys.readAhead)
	}
	n.mu.Lock()
	n.opens++
	n.mu.Unlock()
	return f
}

// Open implements fs.NodeOpener with close-to-open consistency: a GETATTR
// revalidates the file; the kernel keeps its cached pages only if the file
// did not change since, else its cached attributes are dropped as well.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if n.fsys.opts.ReadOnly && (flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0) {
		return nil, 0, syscall.EROFS
	}
	n.mu.Lock()
	had := n.attrs.valid || !n.attrs.at.IsZero()
	n.mu.Unlock()
	var a nfs3.Attr
	err := n.do(func(fh nfs3.FileHandle) (err error) {
		a, err = n.fsys.c.Getattr(n.fsys.ctx, fh)
		return err
	})
	if err != nil {
		return nil, 0, toErrno(err)
	}
	changed := n.setAttr(&a)
	if a.Type != nfs3.TypeReg {
		return nil, 0, syscall.EINVAL
	}
	var fuseFlags uint32
	if had && !changed {
		fuseFlags = fuse.FOPEN_KEEP_CACHE
	} else if changed {
		n.dataGen.Add(1)
		// The page cache goes (no KEEP_CACHE); the kernel's size and times
		// must go too, or it would read up to the old size only.
		if errno := n.NotifyContent(-1, 0); errno != 0 && errno != syscall.ENOSYS {
			n.fsys.log.Debug("invalidating cached attributes", "errno", errno)
		}
	}
	return n.newOpenFile(flags), fuseFlags, 0
}

// Read implements fs.FileReader: through the read-ahead for a sequential
// reader, else pipelined READs (RFC 1813 §3.3.6) of rsize straight into the
// kernel's buffer.
func (f *openFile) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	var n int
	var err error
	if f.ra != nil {
		n, err = f.ra.read(dest, off)
	} else {
		n, err = f.n.readAt(f.ctx, dest, off)
	}
	if err != nil && err != io.EOF {
		return nil, toErrno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// Write implements fs.FileWriter: WRITE (RFC 1813 §3.3.7) UNSTABLE, or
// FILE_SYNC with Options.Sync; an UNSTABLE write is kept until a COMMIT
// proves it durable, and COMMITted early once MaxDirty bytes wait.
func (f *openFile) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	n := f.n
	if n.fsys.opts.ReadOnly {
		return 0, syscall.EROFS
	}
	how := nfs3.Unstable
	if n.fsys.opts.Sync || f.flags&(syscall.O_SYNC|syscall.O_DSYNC) != 0 {
		how = nfs3.FileSync
	}
	err := n.writeRange(data, off, how)
	n.dataGen.Add(1)
	if err != nil {
		return 0, toErrno(err)
	}
	n.mu.Lock()
	over := n.ndirty > n.fsys.maxDirty
	n.mu.Unlock()
	if over {
		if err := n.commitDirty(); err != nil {
			return 0, toErrno(err)
		}
	}
	return uint32(len(data)), 0
}

// writeRange WRITEs data at off in WRITEs of at most wsize, until the server
// took all of it, keeping copies of what it took UNSTABLE.
func (n *node) writeRange(data []byte, off int64, how nfs3.StableHow) error {
	wsize := int(n.fsys.wsize)
	for done := 0; done < len(data); {
		chunk := data[done:min(len(data), done+wsize)]
		var r nfs3.WriteResult
		err := n.do(func(fh nfs3.FileHandle) (err error) {
			r, err = n.fsys.c.Write(n.fsys.ctx, fh, uint64(off)+uint64(done), chunk, how)
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
			n.mu.Lock()
			n.dirty = append(n.dirty, dirtyWrite{off: off + int64(done), data: slices.Clone(chunk[:r.Count]), verf: r.Verf})
			n.ndirty += int(r.Count)
			n.mu.Unlock()
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
func (n *node) commitDirty() error {
	n.commit.Lock()
	defer n.commit.Unlock()
	for try := 1; ; try++ {
		n.mu.Lock()
		pending := n.dirty
		n.dirty, n.ndirty = nil, 0
		n.mu.Unlock()
		if len(pending) == 0 {
			return nil
		}
		var r nfs3.CommitResult
		err := n.do(func(fh nfs3.FileHandle) (err error) {
			r, err = n.fsys.c.Commit(n.fsys.ctx, fh, 0, 0)
			return err
		})
		n.setWcc(&r.Wcc)
		if err != nil {
			n.requeue(pending)
			return err
		}
		lost := pending[:0]
		for _, d := range pending {
			if d.verf != r.Verf {
				lost = append(lost, d)
			}
		}
		if len(lost) == 0 {
			return nil
		}
		if try == maxCommitTries {
			n.requeue(lost)
			return &nfs3.VerifierChangedError{Tries: try}
		}
		n.fsys.log.Warn("write verifier changed; resending uncommitted writes with FILE_SYNC", "writes", len(lost))
		for i, d := range lost {
			// Writes the server takes UNSTABLE again are requeued by
			// writeRange and committed on the next round.
			if err := n.writeRange(d.data, d.off, nfs3.FileSync); err != nil {
				n.requeue(lost[i+1:])
				return err
			}
		}
		n.dataGen.Add(1)
	}
}

// requeue puts writes back in front of the dirty list.
func (n *node) requeue(ws []dirtyWrite) {
	if len(ws) == 0 {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, d := range ws {
		n.ndirty += len(d.data)
	}
	n.dirty = append(slices.Clone(ws), n.dirty...)
}

// Flush implements fs.FileFlusher: close(2) commits the file's writes
// (close-to-open), and reports their failure.
func (f *openFile) Flush(ctx context.Context) syscall.Errno {
	return toErrno(f.n.commitDirty())
}

// Fsync implements fs.FileFsyncer.
func (f *openFile) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return toErrno(f.n.commitDirty())
}

// Release implements fs.FileReleaser: the last close of a file commits what
// is left (writes through mmap) and removes a silly-renamed file.
func (f *openFile) Release(ctx context.Context) syscall.Errno {
	f.cancel()
	n := f.n
	n.mu.Lock()
	n.opens--
	last := n.opens == 0
	silly := n.silly
	if last {
		n.silly = nil
		if n.closed != nil {
			n.closed.Broadcast()
		}
	}
	n.mu.Unlock()
	if !last {
		return 0
	}
	if err := n.commitDirty(); err != nil {
		n.fsys.log.Warn("commit at last close failed", "err", err)
	}
	if silly != nil {
		var w nfs3.WccData
		err := silly.dir.do(func(dir nfs3.FileHandle) (err error) {
			w, err = n.fsys.c.Remove(n.fsys.ctx, dir, silly.name)
			return err
		})
		silly.dir.setWcc(&w)
		n.invalidateAttr()
		if err != nil && !errors.Is(err, nfs3.ErrNoEnt) {
			n.fsys.log.Warn("removing silly-renamed file", "name", silly.name, "err", err)
		}
	}
	return 0
}
