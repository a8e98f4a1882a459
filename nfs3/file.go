package nfs3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"sync"
	"time"
)

// File is an open file or directory of a Target: an fs.File and
// fs.ReadDirFile, io.Reader, io.Writer, io.Seeker, io.ReaderAt, io.WriterAt
// and io.Closer. The methods without a context run under the Target's
// lifetime (Target.Close cancels them) and honour the deadlines of
// SetDeadline, SetReadDeadline and SetWriteDeadline; the *Context variants
// take a context instead.
//
// Writes of at least the WRITE size go out as pipelined UNSTABLE WRITEs and
// are COMMITted before WriteAt returns. Smaller writes are sent UNSTABLE at
// once and a copy is kept (up to MountOptions.MaxDirty bytes) until Sync or
// Close commits them; if the commit's verifier shows the server lost them, the
// copies are sent again with FILE_SYNC.
type File struct {
	t      *Target
	fh     FileHandle
	name   string
	flag   int  // the os.OpenFile flags it was opened with
	attr   Attr // at open
	fsName bool // opened through fs.FS: Stat names the root "."

	mu      sync.Mutex // everything below
	pos     int64
	dirty   []dirtyWrite
	ndirty  int
	closed  bool
	dirents []fs.DirEntry // ReadDir's listing, read at its first call
	dirPos  int
	rdl     time.Time // read and write deadlines
	wdl     time.Time
	ops     map[*fileOp]struct{} // calls in flight without a context
}

// fileOp is a call in flight under a deadline.
type fileOp struct {
	write  bool
	cancel context.CancelCauseFunc
}

// dirtyWrite is an UNSTABLE write not yet known to be committed.
type dirtyWrite struct {
	off  int64
	data []byte
	verf WriteVerf
}

func (t *Target) newFile(name string, fh FileHandle) *File {
	return &File{t: t, fh: fh, name: name, flag: os.O_RDWR}
}

// ErrDeadlineExceeded is the error (inside an *fs.PathError) of a File call
// that passed its deadline. errors.Is matches it with os.ErrDeadlineExceeded
// and context.DeadlineExceeded; it is a net.Error-style timeout.
var ErrDeadlineExceeded error = deadlineError{}

type deadlineError struct{}

func (deadlineError) Error() string   { return "i/o timeout" }
func (deadlineError) Timeout() bool   { return true }
func (deadlineError) Temporary() bool { return true }
func (deadlineError) Is(target error) bool {
	return target == os.ErrDeadlineExceeded || target == context.DeadlineExceeded
}

// errWriteAtInAppendMode is WriteAt's error on a File opened with O_APPEND.
var errWriteAtInAppendMode = errors.New("invalid use of WriteAt on file opened with O_APPEND")

// SetDeadline sets the read and write deadlines (SetReadDeadline and
// SetWriteDeadline).
func (f *File) SetDeadline(t time.Time) error {
	return errors.Join(f.SetReadDeadline(t), f.SetWriteDeadline(t))
}

// SetReadDeadline sets the time after which Read, ReadAt, ReadDir, Stat and
// Seek (from the end) fail with an error matching os.ErrDeadlineExceeded
// instead of waiting for a server that does not answer. A deadline in the
// past also interrupts such calls in flight; the zero time means none. The
// *Context methods ignore it.
func (f *File) SetReadDeadline(t time.Time) error { return f.setDeadline(t, false) }

// SetWriteDeadline sets the deadline of Write, WriteAt, Sync and Close, as
// SetReadDeadline does for reads.
func (f *File) SetWriteDeadline(t time.Time) error { return f.setDeadline(t, true) }

func (f *File) setDeadline(t time.Time, write bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return pathErr("setdeadline", f.name, fs.ErrClosed)
	}
	if write {
		f.wdl = t
	} else {
		f.rdl = t
	}
	if !t.IsZero() && !t.After(time.Now()) {
		for op := range f.ops {
			if op.write == write {
				op.cancel(ErrDeadlineExceeded)
			}
		}
	}
	return nil
}

// begin returns the context of a call without one: the Target's lifetime,
// bounded by the read or write deadline. end turns the call's error into
// ErrDeadlineExceeded when the deadline ended it.
func (f *File) begin(op string, write bool) (ctx context.Context, end func(error) error) {
	ctx, cancel := context.WithCancelCause(f.t.ctx)
	o := &fileOp{write: write, cancel: cancel}
	f.mu.Lock()
	d := f.rdl
	if write {
		d = f.wdl
	}
	if f.ops == nil {
		f.ops = make(map[*fileOp]struct{})
	}
	f.ops[o] = struct{}{}
	f.mu.Unlock()
	stop := func() {}
	if !d.IsZero() {
		var c context.CancelFunc
		ctx, c = context.WithDeadlineCause(ctx, d, ErrDeadlineExceeded)
		stop = c
	}
	return ctx, func(err error) error {
		timedOut := err != nil && context.Cause(ctx) == ErrDeadlineExceeded
		stop()
		cancel(nil)
		f.mu.Lock()
		delete(f.ops, o)
		f.mu.Unlock()
		if timedOut {
			return pathErr(op, f.name, ErrDeadlineExceeded)
		}
		return err
	}
}

func (f *File) checkAccess(write bool) error {
	acc := f.flag & accModes
	if write && acc == os.O_RDONLY || !write && acc == os.O_WRONLY {
		return errBadFD
	}
	return nil
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

// Stat returns the file's attributes (GETATTR) as a *FileInfo (fs.File).
func (f *File) Stat() (fs.FileInfo, error) {
	ctx, end := f.begin("stat", false)
	fi, err := f.StatContext(ctx)
	if err = end(err); err != nil {
		return nil, err
	}
	return fi, nil
}

// StatContext returns the file's attributes (GETATTR).
func (f *File) StatContext(ctx context.Context) (*FileInfo, error) {
	if err := f.checkOpen(); err != nil {
		return nil, pathErr("stat", f.name, err)
	}
	a, err := f.t.c.Getattr(ctx, f.fh)
	if err != nil {
		return nil, pathErr("stat", f.name, err)
	}
	name := baseName(f.name)
	if f.fsName {
		name = path.Base(f.name)
	}
	return &FileInfo{FileName: name, Attr: a, FH: f.fh}, nil
}

// ReadDir reads the directory's entries in name order (fs.ReadDirFile): with
// n > 0 at most n more, and io.EOF once none are left; with n <= 0 all that
// are left, and a nil error. The listing (READDIRPLUS, without "." and "..")
// is read at the first call. The entries are *FileInfo.
func (f *File) ReadDir(n int) ([]fs.DirEntry, error) {
	ctx, end := f.begin("readdir", false)
	ents, err := f.ReadDirContext(ctx, n)
	return ents, end(err)
}

// ReadDirContext is ReadDir with a context.
func (f *File) ReadDirContext(ctx context.Context, n int) ([]fs.DirEntry, error) {
	if err := f.checkOpen(); err != nil {
		return nil, pathErr("readdir", f.name, err)
	}
	f.mu.Lock()
	loaded := f.dirents != nil
	f.mu.Unlock()
	if !loaded {
		fis, err := f.t.readDir(ctx, f.fh, f.name)
		if err != nil {
			return nil, err
		}
		ents := sortedEntries(fis)
		f.mu.Lock()
		if f.dirents == nil {
			f.dirents = ents
		}
		f.mu.Unlock()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	rest := f.dirents[f.dirPos:]
	if n <= 0 {
		f.dirPos = len(f.dirents)
		return slices.Clip(rest), nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	k := min(n, len(rest))
	f.dirPos += k
	return rest[:k:k], nil
}

// ReadAt implements io.ReaderAt.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	ctx, end := f.begin("read", false)
	n, err := f.ReadAtContext(ctx, p, off)
	if err != io.EOF {
		err = end(err)
	} else {
		end(nil)
	}
	return n, err
}

// ReadAtContext reads len(p) bytes at off with pipelined READs. n < len(p)
// comes with an error: io.EOF when the file ends first.
func (f *File) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if err := f.checkOpen(); err != nil {
		return 0, pathErr("read", f.name, err)
	}
	if err := f.checkAccess(false); err != nil {
		return 0, pathErr("read", f.name, err)
	}
	if off < 0 {
		return 0, pathErr("read", f.name, fmt.Errorf("negative offset %d", off))
	}
	n, err := f.t.c.ReadAt(ctx, f.fh, p, off)
	if err != nil && err != io.EOF {
		err = pathErr("read", f.name, err)
	}
	return n, err
}

// Read implements io.Reader from the current offset.
func (f *File) Read(p []byte) (int, error) {
	ctx, end := f.begin("read", false)
	n, err := f.ReadContext(ctx, p)
	if err != io.EOF {
		err = end(err)
	} else {
		end(nil)
	}
	return n, err
}

// ReadContext reads from the current offset, as Read.
func (f *File) ReadContext(ctx context.Context, p []byte) (int, error) {
	f.mu.Lock()
	pos := f.pos
	f.mu.Unlock()
	n, err := f.ReadAtContext(ctx, p, pos)
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
	ctx, end := f.begin("write", true)
	n, err := f.WriteAtContext(ctx, p, off)
	return n, end(err)
}

// WriteAtContext writes p at off. n < len(p) comes with an error.
func (f *File) WriteAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if f.flag&os.O_APPEND != 0 {
		return 0, pathErr("writeat", f.name, errWriteAtInAppendMode)
	}
	return f.writeAt(ctx, p, off)
}

func (f *File) writeAt(ctx context.Context, p []byte, off int64) (int, error) {
	if err := f.checkOpen(); err != nil {
		return 0, pathErr("write", f.name, err)
	}
	if err := f.checkAccess(true); err != nil {
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

// Write implements io.Writer at the current offset (at the end of the file
// with O_APPEND).
func (f *File) Write(p []byte) (int, error) {
	ctx, end := f.begin("write", true)
	n, err := f.WriteContext(ctx, p)
	return n, end(err)
}

// WriteContext writes at the current offset, as Write.
func (f *File) WriteContext(ctx context.Context, p []byte) (int, error) {
	f.mu.Lock()
	pos := f.pos
	f.mu.Unlock()
	if f.flag&os.O_APPEND != 0 {
		if err := f.checkOpen(); err != nil {
			return 0, pathErr("write", f.name, err)
		}
		a, err := f.t.c.Getattr(ctx, f.fh)
		if err != nil {
			return 0, pathErr("write", f.name, err)
		}
		pos = int64(a.Size)
	}
	n, err := f.writeAt(ctx, p, pos)
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
		ctx, end := f.begin("seek", false)
		a, err := f.t.c.Getattr(ctx, f.fh)
		if err = end(err); err != nil {
			return 0, pathErr("seek", f.name, unwrapPathErr(err))
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
func (f *File) Sync() error {
	ctx, end := f.begin("sync", true)
	return end(f.SyncContext(ctx))
}

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

// Close commits the file's unstable writes (as Sync), under the write
// deadline. Later calls return fs.ErrClosed.
func (f *File) Close() error {
	ctx, end := f.begin("close", true)
	return end(f.CloseContext(ctx))
}

// CloseContext is Close with a context.
func (f *File) CloseContext(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return pathErr("close", f.name, fs.ErrClosed)
	}
	f.closed = true
	err := f.syncLocked(ctx)
	f.dirty, f.ndirty = nil, 0
	f.dirents = nil
	if err != nil && !errors.Is(err, fs.ErrClosed) {
		return pathErr("close", f.name, err)
	}
	return nil
}
