package nfs3

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
)

// Target is an fs.FS, fs.ReadDirFS, fs.StatFS and fs.ReadFileFS: Open, ReadDir,
// Stat and ReadFile take io/fs names (slash-separated, unrooted, "." for the
// root; see fs.ValidPath) and run under the Target's lifetime, so that
// fs.WalkDir, fs.Glob, http.FS and testing/fstest work on an export. Unlike
// os.DirFS they do not follow symbolic links: Open and Stat of a link
// describe the link itself.
var (
	_ fs.FS         = (*Target)(nil)
	_ fs.ReadDirFS  = (*Target)(nil)
	_ fs.StatFS     = (*Target)(nil)
	_ fs.ReadFileFS = (*Target)(nil)

	_ fs.ReadDirFile = (*File)(nil)
	_ io.ReaderAt    = (*File)(nil)
	_ io.WriterAt    = (*File)(nil)
	_ io.Seeker      = (*File)(nil)
)

// fsName checks an io/fs name and returns it as a Target path.
func fsName(op, name string) (string, error) {
	if !fs.ValidPath(name) {
		return "", &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	return name, nil
}

// Open opens the named file or directory for reading (fs.FS). The result is
// a *File.
func (t *Target) Open(name string) (fs.File, error) {
	if _, err := fsName("open", name); err != nil {
		return nil, err
	}
	f, err := t.openFile(t.ctx, name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	f.fsName = true
	return f, nil
}

// Stat describes the named file (fs.StatFS): LOOKUPs along the path and, when
// the server sent no attributes, GETATTR.
func (t *Target) Stat(name string) (fs.FileInfo, error) {
	if _, err := fsName("stat", name); err != nil {
		return nil, err
	}
	return t.StatContext(t.ctx, name)
}

// StatContext is Stat with a context.
func (t *Target) StatContext(ctx context.Context, name string) (fs.FileInfo, error) {
	fi, _, err := t.Lookup(ctx, name)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			pe.Op, pe.Path = "stat", name
		}
		return nil, err
	}
	if fi.FileName = baseName(name); fi.FileName == "/" {
		fi.FileName = "." // the root, as os.DirFS names it
	}
	return fi, nil
}

// ReadDirContext is ReadDir with a context.
func (t *Target) ReadDirContext(ctx context.Context, name string) ([]fs.DirEntry, error) {
	fis, err := t.ReadDirPlus(ctx, name)
	if err != nil {
		return nil, err
	}
	return sortedEntries(fis), nil
}

// ReadDir lists the named directory sorted by name, without "." and ".."
// (fs.ReadDirFS). The entries are *FileInfo.
func (t *Target) ReadDir(name string) ([]fs.DirEntry, error) {
	if _, err := fsName("readdir", name); err != nil {
		return nil, err
	}
	return t.ReadDirContext(t.ctx, name)
}

func sortedEntries(fis []*FileInfo) []fs.DirEntry {
	slices.SortFunc(fis, func(a, b *FileInfo) int { return strings.Compare(a.FileName, b.FileName) })
	out := make([]fs.DirEntry, len(fis))
	for i, fi := range fis {
		out[i] = fi
	}
	return out
}

// ReadFile returns the named file's contents (fs.ReadFileFS).
func (t *Target) ReadFile(name string) ([]byte, error) {
	if _, err := fsName("readfile", name); err != nil {
		return nil, err
	}
	return t.ReadFileContext(t.ctx, name)
}

// ReadFileContext returns the contents of file p, read with pipelined READs.
func (t *Target) ReadFileContext(ctx context.Context, p string) ([]byte, error) {
	f, err := t.openFile(ctx, p, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if f.attr.Type == TypeDir {
		return nil, pathErr("read", p, ErrIsDir)
	}
	// One byte more than the size: a READ that returns short with the end
	// of file ends the loop, where one of exactly the size would be
	// followed by another to learn that the file ends there.
	size := int64(f.attr.Size)
	buf := make([]byte, max(size+1, 512))
	n := 0
	for {
		if n == len(buf) {
			buf = slices.Grow(buf, len(buf))[:2*len(buf)]
		}
		k, err := f.ReadAtContext(ctx, buf[n:], int64(n))
		n += k
		if err == io.EOF {
			return buf[:n], nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// WriteFile writes data to file p, creating it with permissions perm (before
// the umask the server applies, if any) or truncating it, as os.WriteFile
// does. Data that fits in one WRITE goes as one FILE_SYNC WRITE, durable when
// it returns with no COMMIT after it; more goes as WriteAt sends it
// (pipelined UNSTABLE WRITEs, then a COMMIT).
func (t *Target) WriteFile(ctx context.Context, p string, data []byte, perm fs.FileMode) error {
	f, err := t.openFile(ctx, p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if f.attr.Type != TypeReg {
		return pathErr("write", p, ErrInval)
	}
	if len(data) == 0 {
		return nil
	}
	_, wsize, err := t.c.IOSizes(ctx, f.fh)
	if err != nil {
		return pathErr("write", p, err)
	}
	if len(data) <= int(wsize) {
		res, err := t.c.writeAll(ctx, f.fh, data, 0, FileSync, int(wsize))
		if err != nil {
			return pathErr("write", p, err)
		}
		if !res.unstable {
			return nil
		}
		// The server kept it UNSTABLE all the same: write it as WriteAt
		// does, which commits it.
	}
	_, err = t.c.WriteAt(ctx, f.fh, data, 0)
	return pathErr("write", p, err)
}

// OpenContext opens existing file or directory p for reading, as os.Open
// does (the path API's Open before Target became an fs.FS).
func (t *Target) OpenContext(ctx context.Context, p string) (*File, error) {
	return t.openFile(ctx, p, os.O_RDONLY, 0)
}

// OpenFile opens p with os.OpenFile's flags under the Target's lifetime; see
// OpenFileContext.
//
// Deprecated: use OpenFileContext, which takes a context as every method
// outside io/fs's does (or Open, for reading).
func (t *Target) OpenFile(p string, flag int, perm fs.FileMode) (*File, error) {
	return t.openFile(t.ctx, p, flag, perm)
}

// OpenFileContext opens p as os.OpenFile does:
//
//   - os.O_RDONLY, os.O_WRONLY or os.O_RDWR: what the File allows (Read on a
//     write-only File and Write on a read-only one fail with EBADF); a
//     directory opens only read-only (EISDIR otherwise);
//   - os.O_CREATE: a missing p is created as a regular file with permissions
//     perm (CREATE UNCHECKED, which opens a file created meanwhile by
//     another client);
//   - os.O_CREATE|os.O_EXCL: p must not exist (CREATE EXCLUSIVE with a
//     random verifier, so a retransmitted CREATE is recognised; then SETATTR
//     of the mode, as the server kept the verifier in place of attributes;
//     GUARDED when the server does not support EXCLUSIVE); fs.ErrExist
//     otherwise;
//   - os.O_TRUNC: an existing regular file opened for writing is truncated
//     (SETATTR size 0);
//   - os.O_APPEND: every Write goes to the end of the file as the server
//     reports it at that moment (GETATTR, then WRITE: not atomic with other
//     clients' writes, as on a kernel NFS mount); WriteAt fails.
//
// Other flags are ignored.
func (t *Target) OpenFileContext(ctx context.Context, p string, flag int, perm fs.FileMode) (*File, error) {
	return t.openFile(ctx, p, flag, perm)
}

const accModes = os.O_RDONLY | os.O_WRONLY | os.O_RDWR

func (t *Target) openFile(ctx context.Context, p string, flag int, perm fs.FileMode) (*File, error) {
	acc := flag & accModes
	if acc != os.O_RDONLY && acc != os.O_WRONLY && acc != os.O_RDWR {
		return nil, pathErr("open", p, ErrInval)
	}
	var (
		fh   FileHandle
		attr *Attr
		err  error
	)
	if flag&(os.O_CREATE|os.O_EXCL) == os.O_CREATE|os.O_EXCL {
		fh, attr, err = t.createExclusive(ctx, p, perm)
	} else {
		var dir FileHandle
		var name string
		fh, attr, dir, name, err = t.walkCreate(ctx, p)
		if errors.Is(err, fs.ErrNotExist) && flag&os.O_CREATE != 0 && dir != nil {
			fh, attr, err = t.createUncheckedIn(ctx, dir, name, perm, flag&os.O_TRUNC != 0)
		} else if err == nil && flag&os.O_TRUNC != 0 && acc != os.O_RDONLY {
			err = t.truncateOpen(ctx, fh, attr)
			attr = nil
		}
	}
	if err == nil && attr == nil {
		var a Attr
		a, err = t.c.Getattr(ctx, fh)
		attr = &a
	}
	if err != nil {
		return nil, pathErr("open", p, unwrapPathErr(err))
	}
	if attr.Type == TypeDir && acc != os.O_RDONLY {
		return nil, pathErr("open", p, ErrIsDir)
	}
	f := t.newFile(p, fh)
	f.flag = flag
	f.attr = *attr
	return f, nil
}

// truncateOpen truncates the opened file to 0 (O_TRUNC); a directory or a
// file already empty is left alone.
func (t *Target) truncateOpen(ctx context.Context, fh FileHandle, attr *Attr) error {
	if attr != nil && (attr.Type != TypeReg || attr.Size == 0) {
		return nil
	}
	if attr == nil {
		a, err := t.c.Getattr(ctx, fh)
		if err != nil {
			return err
		}
		if a.Type != TypeReg || a.Size == 0 {
			return nil
		}
	}
	_, err := t.c.Setattr(ctx, fh, SetAttr{Size: new(uint64(0))}, nil)
	return err
}

// walkCreate is walk for an open that may create p: when only p's last
// component is missing, it returns the error with p's directory and that
// name, so that the create need not walk the path again.
func (t *Target) walkCreate(ctx context.Context, p string) (fh FileHandle, attr *Attr, dir FileHandle, name string, err error) {
	fh = t.root
	cs := components(p)
	if err := checkNames(cs); err != nil {
		return nil, nil, nil, "", err
	}
	for i, c := range cs {
		r, err := t.c.Lookup(ctx, fh, c)
		if err != nil {
			if i == len(cs)-1 {
				return nil, nil, fh, c, err
			}
			return nil, nil, nil, "", err
		}
		fh, attr = r.FH, r.Attr
	}
	return fh, attr, nil, "", nil
}

// createUncheckedIn creates name in directory dir for an open with
// O_CREATE (CREATE UNCHECKED, which opens a file created meanwhile).
func (t *Target) createUncheckedIn(ctx context.Context, dir FileHandle, name string, perm fs.FileMode, trunc bool) (FileHandle, *Attr, error) {
	sa := SetAttr{Mode: new(modeBits(perm))}
	if trunc {
		// Applies only if the file appeared meanwhile (an UNCHECKED create
		// of an existing file sets just the size).
		sa.Size = new(uint64(0))
	}
	r, err := t.c.Create(ctx, dir, name, CreateHow{Mode: Unchecked, Attr: sa})
	if err != nil {
		return nil, nil, err
	}
	fh, err := t.created(ctx, dir, name, r)
	return fh, r.Attr, err
}

func (t *Target) createExclusive(ctx context.Context, p string, perm fs.FileMode) (FileHandle, *Attr, error) {
	dir, name, err := t.walkParent(ctx, p)
	if err != nil {
		return nil, nil, err
	}
	var verf CreateVerf
	rand.Read(verf[:])
	r, err := t.c.Create(ctx, dir, name, CreateHow{Mode: Exclusive, Verf: verf})
	if errors.Is(err, ErrNotSupp) {
		r, err = t.c.Create(ctx, dir, name, CreateHow{Mode: Guarded, Attr: SetAttr{Mode: new(modeBits(perm))}})
		if err != nil {
			return nil, nil, err
		}
		fh, err := t.created(ctx, dir, name, r)
		return fh, r.Attr, err
	}
	if err != nil {
		return nil, nil, err
	}
	fh, err := t.created(ctx, dir, name, r)
	if err != nil {
		return nil, nil, err
	}
	// The server keeps the verifier in the new file's attributes (knfsd: in
	// its times) and sets no mode: set them now (RFC 1813 §3.3.8).
	_, err = t.c.Setattr(ctx, fh, SetAttr{
		Mode:  new(modeBits(perm)),
		Atime: SetTime{How: SetToServerTime},
		Mtime: SetTime{How: SetToServerTime},
	}, nil)
	if err != nil {
		return nil, nil, err
	}
	return fh, nil, nil
}

// errBadFD is the error of a Read on a write-only File or a Write on a
// read-only one, as os gives.
var errBadFD error = syscall.EBADF

func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
