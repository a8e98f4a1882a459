package nfs3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"sync"
)

// File is an open file of a Target: io.Reader, io.Writer, io.Seeker,
// io.ReaderAt, io.WriterAt and io.Closer. Methods without a context run under
// the Target's lifetime (Target.Close cancels them); the *Context variants take
// one.
//
// Writes of at least the WRITE size go out as pipelined UNSTABLE WRITEs and
// are COMMITted before WriteAt returns. Smaller writes are sent UNSTABLE at
// once and a copy is kept (up to MountOptions.MaxDirty bytes) until Sync or
// Close commits them; if the commit's verifier shows the server lost them, the
// copies are sent again with FILE_SYNC.
type File struct {
	t    *Target
	fh   FileHandle
	name string

	mu     sync.Mutex // pos, dirty, closed
	pos    int64
	dirty  []dirtyWrite
	ndirty int
	closed bool
}

// dirtyWrite is an UNSTABLE write not yet known to be committed.
type dirtyWrite struct {
	off  int64
	data []byte
	verf WriteVerf
}

func (t *Target) newFile(name string, fh FileHandle) *File {
	return &File{t: t, fh: fh, name: name}
}

// Name returns the path the file was opened with.
func (f *File) Name() string { return f.name }

// Handle returns the file handle.
func (f *File) Handle() FileHandle { return f.fh }

func (f *File) checkOpen() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return fs.ErrClosed
	}
	return nil
}

// Stat returns the file's attributes (GETATTR).
func (f *File) Stat() (*FileInfo, error) {
	a, err := f.t.c.Getattr(f.t.ctx, f.fh)
	if err != nil {
		return nil, pathErr("stat", f.name, err)
	}
	return &FileInfo{FileName: baseName(f.name), Attr: a, FH: f.fh}, nil
}

// ReadAt implements io.ReaderAt.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	return f.ReadAtContext(f.t.ctx, p, off)
}

// ReadAtContext reads len(p) bytes at off with pipelined READs. n < len(p)
// comes with an error: io.EOF when the file ends first.
func (f *File) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if err := f.checkOpen(); err != nil {
		return 0, pathErr("read", f.name, err)
	}
	n, err := f.t.c.ReadAt(ctx, f.fh, p, off)
	if err != nil && err != io.EOF {
		err = pathErr("read", f.name, err)
	}
	return n, err
}

// Read implements io.Reader from the current offset.
func (f *File) Read(p []byte) (int, error) {
	f.mu.Lock()
	pos := f.pos
	f.mu.Unlock()
	n, err := f.ReadAt(p, pos)
	f.mu.Lock()
	f.pos = pos + int64(n)
	f.mu.Unlock()
	if n > 0 && err == io.EOF {
		err = nil
	}
	return n, err
}

// WriteAt implements io.WriterAt.
func (f *File) WriteAt(p []byte, off int64) (int, error) {
	return f.WriteAtContext(f.t.ctx, p, off)
}

// WriteAtContext writes p at off. n < len(p) comes with an error.
func (f *File) WriteAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if err := f.checkOpen(); err != nil {
		return 0, pathErr("write", f.name, err)
	}
	if off < 0 {
		return 0, pathErr("write", f.name, fmt.Errorf("negative offset %d", off))
	}
	if len(p) == 0 {
		return 0, nil
	}
	_, wsize, err := f.t.c.IOSizes(ctx, f.fh)
	if err != nil {
		return 0, pathErr("write", f.name, err)
	}
	f.mu.Lock()
	full := f.ndirty+len(p) > f.t.maxDirty
	f.mu.Unlock()
	if full {
		if err := f.SyncContext(ctx); err != nil {
			return 0, err
		}
	}
	if len(p) >= int(wsize) || len(p) > f.t.maxDirty {
		n, err := f.t.c.WriteAt(ctx, f.fh, p, off)
		return n, pathErr("write", f.name, err)
	}
	res, err := f.t.c.writeAll(ctx, f.fh, p, off, Unstable, int(wsize))
	if err != nil {
		return res.n, pathErr("write", f.name, err)
	}
	if res.mixed {
		// The verifier changed under this very write: make it durable now.
		n, err := f.t.c.WriteAt(ctx, f.fh, p, off)
		return n, pathErr("write", f.name, err)
	}
	if res.unstable {
		f.mu.Lock()
		f.dirty = append(f.dirty, dirtyWrite{off: off, data: slices.Clone(p), verf: res.verf})
		f.ndirty += len(p)
		f.mu.Unlock()
	}
	return len(p), nil
}

// Write implements io.Writer at the current offset.
func (f *File) Write(p []byte) (int, error) {
	f.mu.Lock()
	pos := f.pos
	f.mu.Unlock()
	n, err := f.WriteAt(p, pos)
	f.mu.Lock()
	f.pos = pos + int64(n)
	f.mu.Unlock()
	return n, err
}

// Seek implements io.Seeker; io.SeekEnd asks the server for the size.
func (f *File) Seek(offset int64, whence int) (int64, error) {
	if err := f.checkOpen(); err != nil {
		return 0, pathErr("seek", f.name, err)
	}
	var base int64
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		f.mu.Lock()
		base = f.pos
		f.mu.Unlock()
	case io.SeekEnd:
		a, err := f.t.c.Getattr(f.t.ctx, f.fh)
		if err != nil {
			return 0, pathErr("seek", f.name, err)
		}
		base = int64(a.Size)
	default:
		return 0, pathErr("seek", f.name, fmt.Errorf("invalid whence %d", whence))
	}
	pos := base + offset
	if pos < 0 {
		return 0, pathErr("seek", f.name, fmt.Errorf("negative position %d", pos))
	}
	f.mu.Lock()
	f.pos = pos
	f.mu.Unlock()
	return pos, nil
}

// Sync commits the file's unstable writes.
func (f *File) Sync() error { return f.SyncContext(f.t.ctx) }

// SyncContext COMMITs the file and resends, with FILE_SYNC, each small write
// whose verifier differs from the commit's.
func (f *File) SyncContext(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return pathErr("sync", f.name, f.syncLocked(ctx))
}

func (f *File) syncLocked(ctx context.Context) error {
	if len(f.dirty) == 0 {
		return nil
	}
	_, wsize, err := f.t.c.IOSizes(ctx, f.fh)
	if err != nil {
		return err
	}
	for try := 1; len(f.dirty) > 0; try++ {
		r, err := f.t.c.Commit(ctx, f.fh, 0, 0)
		if err != nil {
			return err
		}
		lost := f.dirty[:0]
		for _, d := range f.dirty {
			if d.verf != r.Verf {
				lost = append(lost, d)
			}
		}
		f.dirty = lost
		f.ndirty = 0
		for _, d := range lost {
			f.ndirty += len(d.data)
		}
		if len(lost) == 0 {
			return nil
		}
		if try == maxWriteTries {
			return &VerifierChangedError{Tries: try}
		}
		f.t.log.WarnContext(ctx, "write verifier changed; resending uncommitted writes with FILE_SYNC",
			"file", f.name, "writes", len(lost))
		for len(f.dirty) > 0 {
			d := f.dirty[0]
			res, err := f.t.c.writeAll(ctx, f.fh, d.data, d.off, FileSync, int(wsize))
			if err != nil {
				return err
			}
			if res.unstable { // the server would not sync: commit it next round
				d.verf = res.verf
				f.dirty = append(f.dirty[1:], d)
				break
			}
			f.ndirty -= len(d.data)
			f.dirty = f.dirty[1:]
		}
	}
	return nil
}

// Close commits the file's unstable writes (as Sync). Later calls return
// fs.ErrClosed.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return pathErr("close", f.name, fs.ErrClosed)
	}
	f.closed = true
	err := f.syncLocked(f.t.ctx)
	f.dirty, f.ndirty = nil, 0
	if err != nil && !errors.Is(err, fs.ErrClosed) {
		return pathErr("close", f.name, err)
	}
	return nil
}
