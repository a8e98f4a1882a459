package nfs4

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// Port is the NFSv4 port over TCP (RFC 8881 §2.9.3, the IANA "nfs" port);
// NFSv4 needs no port mapper and no MOUNT.
const Port = 2049

// MountOptions configures Mount.
type MountOptions struct {
	// Port is the NFS port; 0 is Port (2049). Dial does not use it.
	Port int
	// Dial, when set, opens the connection of the NFS calls to addr, the
	// server's address (package nfsrdma dials RPC-over-RDMA with it).
	Dial func(ctx context.Context, addr netip.Addr) (sunrpc.Transport, error)
	// Release, when set, is called once the Target's connection is closed,
	// or when Mount fails.
	Release func() error
	// Transport, when set, carries the calls instead of a connection Mount
	// opens; the Target owns it.
	Transport sunrpc.Transport
	// TCP configures the TCP connection (default: from a reserved port when
	// the process may bind one, as exports(5)'s "secure" wants).
	TCP *sunrpc.TCPOptions
	// Client configures the NFSv4.1 client.
	Client ClientOptions
}

// Target is a mounted NFSv4 export: a path API and an io/fs file system
// (fs.FS, fs.StatFS, fs.ReadDirFS, fs.ReadFileFS) over a Client, shaped like
// nfs3.Target (the same method set, less NFSv3's READDIRPLUS, FSINFO and
// FSSTAT) so that a program switches version by the mount call. Paths are
// io/fs names relative to the export ("." is its root); the methods that
// are not io/fs's also take rooted paths ("/docs/a"). Methods whose
// signatures io/fs fixes run under the Target's lifetime and have a
// Context twin. It is safe for concurrent use.
type Target struct {
	c       *Client
	root    FileHandle
	release func() error

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	once   sync.Once

	mu    sync.Mutex
	opens map[*File]struct{} // the regular files open (their OPEN not yet CLOSEd); guarded by mu
}

// MountTCP mounts spec, "host:/export" (or "[v6addr]:/export"), over TCP.
func MountTCP(ctx context.Context, spec string, opts *MountOptions) (*Target, error) {
	host, export, err := nfs3.SplitSpec(spec)
	if err != nil {
		return nil, err
	}
	return Mount(ctx, host, export, opts)
}

// Mount connects to host (over TCP at Port, or through opts.Dial or
// opts.Transport), establishes the NFSv4.1 client and session, and looks
// export up from the server's root (with knfsd the pseudo-root, where
// exports appear at their paths).
func Mount(ctx context.Context, host, export string, opts *MountOptions) (_ *Target, err error) {
	var o MountOptions
	if opts != nil {
		o = *opts
	}
	defer func() {
		if err != nil && o.Release != nil {
			err = errors.Join(err, o.Release())
		}
	}()
	t := o.Transport
	if t == nil {
		addr, err := nfs3.ResolveHost(ctx, host)
		if err != nil {
			return nil, fmt.Errorf("nfs4: mount %s:%s: %w", host, export, err)
		}
		if o.Dial != nil {
			t, err = o.Dial(ctx, addr)
		} else {
			port := o.Port
			if port == 0 {
				port = Port
			}
			t, err = sunrpc.DialTCP(ctx, net.JoinHostPort(addr.String(), strconv.Itoa(port)), o.TCP)
		}
		if err != nil {
			return nil, fmt.Errorf("nfs4: mount %s:%s: %w", host, export, err)
		}
	}
	c, err := NewClient(ctx, t, &o.Client)
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("nfs4: mount %s:%s: %w", host, export, err)
	}
	var comps []string
	for _, s := range strings.Split(export, "/") {
		if s != "" {
			comps = append(comps, s)
		}
	}
	root, a, err := c.LookupPath(ctx, nil, comps...)
	if err == nil && a.Type != TypeDir {
		err = ErrNotDir
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("nfs4: mount %s:%s: %w", host, export, err)
	}
	tg := &Target{c: c, root: root, release: o.Release, opens: map[*File]struct{}{}}
	tg.ctx, tg.cancel = context.WithCancel(context.Background())
	return tg, nil
}

// Client returns the Target's client.
func (t *Target) Client() *Client { return t.c }

// Root returns the export's root handle.
func (t *Target) Root() FileHandle { return t.root }

// Close ends the opens of the Files still open (CLOSE), closes the client
// (destroying its session and client ID: a server refuses to destroy a
// client ID that still holds state) and its transport. Idempotent.
func (t *Target) Close() error {
	var err error
	t.once.Do(func() {
		t.cancel()
		t.mu.Lock()
		open := make([]*File, 0, len(t.opens))
		for f := range t.opens {
			open = append(open, f)
		}
		t.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), max(t.c.Lease(), time.Second))
		for _, f := range open {
			if e := f.CloseContext(ctx); e != nil && !errors.Is(e, fs.ErrClosed) {
				err = errors.Join(err, e)
			}
		}
		cancel()
		err = errors.Join(err, t.c.Close())
		if t.release != nil {
			err = errors.Join(err, t.release())
		}
	})
	return err
}

func pathErr(op, name string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return err
	}
	var oe *OpError
	if errors.As(err, &oe) {
		err = oe.Status
	}
	return &fs.PathError{Op: op, Path: name, Err: err}
}

// split checks an io/fs name and returns its components ("." has none).
func split(op, name string) ([]string, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	if name == "." {
		return nil, nil
	}
	return strings.Split(name, "/"), nil
}

// splitPath is split for the methods that are not io/fs's, which also take
// rooted paths ("/docs/a"), as nfs3.Target's do.
func splitPath(op, name string) ([]string, error) {
	p := strings.TrimPrefix(path.Clean("/"+name), "/")
	if p == "" {
		p = "."
	}
	return split(op, p)
}

// FileInfo is a file's name, attributes and handle as fs.FileInfo; Sys
// returns the *Attr.
type FileInfo struct {
	FileName string
	Attr     Attr
	FH       FileHandle // nil when not known (a READDIR entry without filehandle)
}

func (fi *FileInfo) Name() string       { return fi.FileName }
func (fi *FileInfo) Size() int64        { return int64(fi.Attr.Size) }
func (fi *FileInfo) Mode() fs.FileMode  { return fi.Attr.FileMode() }
func (fi *FileInfo) ModTime() time.Time { return fi.Attr.MTime.Time() }
func (fi *FileInfo) IsDir() bool        { return fi.Attr.Type == TypeDir }
func (fi *FileInfo) Sys() any           { return &fi.Attr }

// dirEntry is a DirEntry as fs.DirEntry.
type dirEntry struct{ fi *FileInfo }

func (d dirEntry) Name() string               { return d.fi.FileName }
func (d dirEntry) IsDir() bool                { return d.fi.IsDir() }
func (d dirEntry) Type() fs.FileMode          { return d.fi.Mode().Type() }
func (d dirEntry) Info() (fs.FileInfo, error) { return d.fi, nil }

// Stat returns name's attributes (not following a final symbolic link: the
// server's LOOKUP does not).
func (t *Target) Stat(name string) (fs.FileInfo, error) { return t.StatContext(t.ctx, name) }

// StatContext is Stat under ctx.
func (t *Target) StatContext(ctx context.Context, name string) (fs.FileInfo, error) {
	comps, err := split("stat", name)
	if err != nil {
		return nil, err
	}
	_, a, err := t.c.LookupPath(ctx, t.root, comps...)
	if err != nil {
		return nil, pathErr("stat", name, err)
	}
	return &FileInfo{FileName: path.Base(name), Attr: a}, nil
}

// ReadDir returns name's entries sorted by name.
func (t *Target) ReadDir(name string) ([]fs.DirEntry, error) { return t.ReadDirContext(t.ctx, name) }

// ReadDirContext is ReadDir under ctx.
func (t *Target) ReadDirContext(ctx context.Context, name string) ([]fs.DirEntry, error) {
	comps, err := split("readdir", name)
	if err != nil {
		return nil, err
	}
	fh, _, err := t.c.LookupPath(ctx, t.root, comps...)
	if err != nil {
		return nil, pathErr("readdir", name, err)
	}
	es, err := t.c.ReadDirAll(ctx, fh)
	if err != nil {
		return nil, pathErr("readdir", name, err)
	}
	return sortedEntries(es), nil
}

func sortedEntries(es []DirEntry) []fs.DirEntry {
	out := make([]fs.DirEntry, 0, len(es))
	for _, e := range es {
		out = append(out, dirEntry{&FileInfo{FileName: e.Name, Attr: e.Attr, FH: e.Attr.FileHandle}})
	}
	slices.SortFunc(out, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out
}

// ReadFile reads the whole of name.
func (t *Target) ReadFile(name string) ([]byte, error) { return t.ReadFileContext(t.ctx, name) }

// ReadFileContext is ReadFile under ctx.
func (t *Target) ReadFileContext(ctx context.Context, name string) ([]byte, error) {
	f, err := t.OpenFileContext(ctx, name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.CloseContext(ctx)
	if f.attr.Type == TypeDir {
		return nil, pathErr("read", name, ErrIsDir)
	}
	buf := make([]byte, f.attr.Size)
	n, err := t.c.ReadAt(ctx, f.fh, f.sid(), buf, 0)
	if err == io.EOF {
		err = nil
	}
	if err != nil {
		return nil, pathErr("read", name, err)
	}
	buf = buf[:n]
	// The file may have grown since OPEN returned its size.
	for {
		var more [64 << 10]byte
		m, err := t.c.ReadAt(ctx, f.fh, f.sid(), more[:], int64(len(buf)))
		buf = append(buf, more[:m]...)
		if err == io.EOF || m == 0 {
			return buf, nil
		}
		if err != nil {
			return nil, pathErr("read", name, err)
		}
	}
}

// Open opens name for reading (fs.FS).
func (t *Target) Open(name string) (fs.File, error) {
	f, err := t.OpenFileContext(t.ctx, name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// OpenFile opens name with os.OpenFile's flags under the Target's lifetime.
func (t *Target) OpenFile(name string, flag int, perm fs.FileMode) (*File, error) {
	return t.OpenFileContext(t.ctx, name, flag, perm)
}

const accModes = os.O_RDONLY | os.O_WRONLY | os.O_RDWR

// OpenFileContext opens name with os.OpenFile's flags: the access mode
// becomes OPEN's share access; O_CREATE an UNCHECKED4 create with perm (and
// size 0 with O_TRUNC), O_CREATE|O_EXCL an EXCLUSIVE4_1 create (RFC 8881
// §18.16.3) with perm; O_TRUNC of an existing file a SETATTR of size 0 under
// the open's stateid; O_APPEND writes at the size the server reports. A
// directory opens (read-only) without an OPEN: NFSv4 opens only regular
// files.
func (t *Target) OpenFileContext(ctx context.Context, name string, flag int, perm fs.FileMode) (*File, error) {
	comps, err := split("open", name)
	if err != nil {
		return nil, err
	}
	acc := flag & accModes
	var share uint32
	switch acc {
	case os.O_RDONLY:
		share = ShareAccessRead
	case os.O_WRONLY:
		share = ShareAccessWrite
	case os.O_RDWR:
		share = ShareAccessBoth
	default:
		return nil, pathErr("open", name, ErrInval)
	}
	if len(comps) == 0 {
		return t.openDir(ctx, name, t.root, acc, nil)
	}
	how := &OpenHow{}
	if flag&os.O_CREATE != 0 {
		how.Create = true
		how.Attr.Mode = Ptr(uint32(perm.Perm()) | modeExtra(perm))
		switch {
		case flag&os.O_EXCL != 0:
			how.Mode = Exclusive41
			if _, err := randRead(how.Verf[:]); err != nil {
				return nil, err
			}
		default:
			how.Mode = Unchecked
			if flag&os.O_TRUNC != 0 && acc != os.O_RDONLY {
				how.Attr.Size = Ptr(uint64(0))
			}
		}
	}
	o, err := t.c.openAt(ctx, t.root, comps[:len(comps)-1], comps[len(comps)-1], share, ShareDenyNone, how)
	if errors.Is(err, ErrIsDir) || errors.Is(err, ErrSymlink) {
		// OPEN refuses non-regular files: a directory (or a link) is
		// opened by handle, read-only.
		fh, a, lerr := t.c.LookupPath(ctx, t.root, comps...)
		if lerr == nil {
			return t.openDir(ctx, name, fh, acc, &a)
		}
	}
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	if flag&os.O_TRUNC != 0 && acc != os.O_RDONLY && !how.Create && o.Attr.Size != 0 {
		a, err := t.c.Setattr(ctx, o.FH, o.StateID(), SetAttr{Size: Ptr(uint64(0))})
		if err != nil {
			t.c.CloseFile(ctx, o.FH, o.StateID())
			return nil, pathErr("open", name, err)
		}
		o.Attr = a
	}
	if how.Create && how.Mode == Exclusive41 && !o.Result.AttrSet.Has(AttrMode) {
		// The server did not keep the mode with the verifier: set it now
		// (RFC 8881 §18.16.3: attributes not in suppattr_exclcreat).
		if a, err := t.c.Setattr(ctx, o.FH, o.StateID(), SetAttr{Mode: how.Attr.Mode}); err == nil {
			o.Attr = a
		}
	}
	f := &File{t: t, name: name, fh: o.FH, attr: o.Attr, open: o, flag: flag}
	t.mu.Lock()
	t.opens[f] = struct{}{}
	t.mu.Unlock()
	return f, nil
}

// openDir returns a File for a directory, opened by handle; attr is its
// attributes when already known. A symbolic link (which OPEN also refuses)
// is ErrSymlink: the path API does not follow links.
func (t *Target) openDir(ctx context.Context, name string, fh FileHandle, acc int, attr *Attr) (*File, error) {
	if attr == nil {
		a, err := t.c.Getattr(ctx, fh, nil)
		if err != nil {
			return nil, pathErr("open", name, err)
		}
		attr = &a
	}
	a := *attr
	if a.Type == TypeDir && acc != os.O_RDONLY {
		return nil, pathErr("open", name, ErrIsDir)
	}
	if a.Type != TypeDir {
		return nil, pathErr("open", name, ErrSymlink)
	}
	return &File{t: t, name: name, fh: fh, attr: a}, nil
}

func modeExtra(m fs.FileMode) uint32 {
	var x uint32
	if m&fs.ModeSetuid != 0 {
		x |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		x |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		x |= 0o1000
	}
	return x
}

// parent returns the handle of name's directory and its last component.
func (t *Target) parent(ctx context.Context, op, name string) (FileHandle, string, error) {
	comps, err := splitPath(op, name)
	if err != nil {
		return nil, "", err
	}
	if len(comps) == 0 {
		return nil, "", &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	if len(comps) == 1 {
		return t.root, comps[0], nil
	}
	fh, _, err := t.c.LookupPath(ctx, t.root, comps[:len(comps)-1]...)
	if err != nil {
		return nil, "", pathErr(op, name, err)
	}
	return fh, comps[len(comps)-1], nil
}

// walk resolves p (io/fs or rooted) to its handle and attributes.
func (t *Target) walk(ctx context.Context, op, p string) (FileHandle, Attr, error) {
	comps, err := splitPath(op, p)
	if err != nil {
		return nil, Attr{}, err
	}
	fh, a, err := t.c.LookupPath(ctx, t.root, comps...)
	if err != nil {
		return nil, Attr{}, pathErr(op, p, err)
	}
	return fh, a, nil
}

func permBits(perm fs.FileMode) *uint32 { return Ptr(uint32(perm.Perm()) | modeExtra(perm)) }

// OpenContext opens name for reading under ctx.
func (t *Target) OpenContext(ctx context.Context, name string) (*File, error) {
	return t.OpenFileContext(ctx, name, os.O_RDONLY, 0)
}

// Lookup resolves p and returns its attributes and handle.
func (t *Target) Lookup(ctx context.Context, p string) (*FileInfo, FileHandle, error) {
	fh, a, err := t.walk(ctx, "lookup", p)
	if err != nil {
		return nil, nil, err
	}
	return &FileInfo{FileName: path.Base(path.Clean("/" + p)), Attr: a, FH: fh}, fh, nil
}

// Getattr returns p's attributes (StatAttrs).
func (t *Target) Getattr(ctx context.Context, p string) (Attr, error) {
	_, a, err := t.walk(ctx, "getattr", p)
	return a, err
}

// Setattr sets p's attributes (SETATTR with the anonymous stateid: a size
// change of a file others have open may be refused; File.Truncate holds
// the open's stateid).
func (t *Target) Setattr(ctx context.Context, p string, attr SetAttr) error {
	fh, _, err := t.walk(ctx, "setattr", p)
	if err != nil {
		return err
	}
	if _, err := t.c.Setattr(ctx, fh, AnonymousStateID, attr); err != nil {
		return pathErr("setattr", p, err)
	}
	return nil
}

// Mkdir creates directory p with perm (CREATE).
func (t *Target) Mkdir(ctx context.Context, p string, perm fs.FileMode) (FileHandle, error) {
	dir, base, err := t.parent(ctx, "mkdir", p)
	if err != nil {
		return nil, err
	}
	fh, _, err := t.c.Mkdir(ctx, dir, base, SetAttr{Mode: permBits(perm)})
	if err != nil {
		return nil, pathErr("mkdir", p, err)
	}
	return fh, nil
}

// Create creates regular file p with perm; it fails with fs.ErrExist if p
// exists (OPEN with a GUARDED4 create, then CLOSE).
func (t *Target) Create(ctx context.Context, p string, perm fs.FileMode) (FileHandle, error) {
	dir, base, err := t.parent(ctx, "create", p)
	if err != nil {
		return nil, err
	}
	o, err := t.c.Open(ctx, dir, base, ShareAccessWrite, ShareDenyNone, &OpenHow{Create: true, Mode: Guarded, Attr: SetAttr{Mode: permBits(perm)}})
	if err != nil {
		return nil, pathErr("create", p, err)
	}
	if err := t.c.CloseFile(ctx, o.FH, o.StateID()); err != nil {
		return nil, pathErr("create", p, err)
	}
	return o.FH, nil
}

// Remove removes p, a file or an empty directory (REMOVE, which in NFSv4
// removes either).
func (t *Target) Remove(ctx context.Context, p string) error {
	dir, base, err := t.parent(ctx, "remove", p)
	if err != nil {
		return err
	}
	if _, err := t.c.Remove(ctx, dir, base); err != nil {
		return pathErr("remove", p, err)
	}
	return nil
}

// RmDir removes empty directory p; a p that is not a directory is
// ENOTDIR, as rmdir(2) says.
func (t *Target) RmDir(ctx context.Context, p string) error {
	_, a, err := t.walk(ctx, "rmdir", p)
	if err != nil {
		return err
	}
	if a.Type != TypeDir {
		return pathErr("rmdir", p, ErrNotDir)
	}
	return t.Remove(ctx, p)
}

// RemoveAll removes p and, if it is a directory, everything below it. A
// missing p is not an error. The root itself is emptied but kept.
func (t *Target) RemoveAll(ctx context.Context, p string) error {
	fh, a, err := t.walk(ctx, "removeall", p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if a.Type == TypeDir {
		if err := t.removeContents(ctx, p, fh); err != nil {
			return err
		}
		if comps, _ := splitPath("removeall", p); len(comps) == 0 {
			return nil
		}
	}
	if err := t.Remove(ctx, p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (t *Target) removeContents(ctx context.Context, p string, dir FileHandle) error {
	es, err := t.c.ReadDirAll(ctx, dir)
	if err != nil {
		return pathErr("removeall", p, err)
	}
	for _, e := range es {
		child := path.Join(p, e.Name)
		if e.Attr.Type == TypeDir {
			fh := e.Attr.FileHandle
			if fh == nil {
				var err error
				fh, _, err = t.c.Lookup(ctx, dir, e.Name)
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				if err != nil {
					return pathErr("removeall", child, err)
				}
			}
			if err := t.removeContents(ctx, child, fh); err != nil {
				return err
			}
		}
		if _, err := t.c.Remove(ctx, dir, e.Name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return pathErr("removeall", child, err)
		}
	}
	return nil
}

// Rename renames from to to (SAVEFH, RENAME).
func (t *Target) Rename(ctx context.Context, from, to string) error {
	fd, fb, err := t.parent(ctx, "rename", from)
	if err != nil {
		return err
	}
	td, tb, err := t.parent(ctx, "rename", to)
	if err != nil {
		return err
	}
	if err := t.c.Rename(ctx, fd, fb, td, tb); err != nil {
		return pathErr("rename", from, err)
	}
	return nil
}

// Symlink creates symbolic link link pointing to target (CREATE of
// NF4LNK); the argument order is os.Symlink's.
func (t *Target) Symlink(ctx context.Context, target, link string) error {
	dir, base, err := t.parent(ctx, "symlink", link)
	if err != nil {
		return err
	}
	if _, _, err := t.c.Symlink(ctx, dir, base, target, SetAttr{}); err != nil {
		return pathErr("symlink", link, err)
	}
	return nil
}

// Readlink returns the text of symbolic link p (READLINK).
func (t *Target) Readlink(ctx context.Context, p string) (string, error) {
	fh, _, err := t.walk(ctx, "readlink", p)
	if err != nil {
		return "", err
	}
	s, err := t.c.Readlink(ctx, fh)
	if err != nil {
		return "", pathErr("readlink", p, err)
	}
	return s, nil
}

// Link creates hard link newname to oldname (SAVEFH, LINK).
func (t *Target) Link(ctx context.Context, oldname, newname string) error {
	fh, _, err := t.walk(ctx, "link", oldname)
	if err != nil {
		return err
	}
	dir, base, err := t.parent(ctx, "link", newname)
	if err != nil {
		return err
	}
	if err := t.c.Link(ctx, fh, dir, base); err != nil {
		return pathErr("link", newname, err)
	}
	return nil
}

// Unmount closes the Target: NFSv4 has no MOUNT protocol to tell, and
// Close already destroys the session and client ID. ctx bounds nothing
// more than Close's own lease-time bound; it is there for nfs3.Target's
// shape.
func (t *Target) Unmount(ctx context.Context) error { return t.Close() }

// File is an open file or directory of a Target: an fs.File,
// fs.ReadDirFile, io.ReaderAt, io.Seeker, io.Writer and io.WriterAt. A
// regular file holds an open (its stateid) until Close. mu guards off and
// dir.
type File struct {
	t    *Target
	name string
	fh   FileHandle
	attr Attr
	open *OpenFile // nil for a directory
	flag int

	mu     sync.Mutex
	off    int64
	dir    []fs.DirEntry // the listing ReadDir(n) hands out, read at the first call
	dirPos int
	closed bool
}

func (f *File) sid() StateID {
	if f.open == nil {
		return AnonymousStateID
	}
	return f.open.StateID()
}

// Handle returns the file's handle.
func (f *File) Handle() FileHandle { return f.fh }

// Name returns the name the file was opened with.
func (f *File) Name() string { return f.name }

// Open returns the open's state (nil for a directory).
func (f *File) Open() *OpenFile { return f.open }

// Stat returns the file's current attributes.
func (f *File) Stat() (fs.FileInfo, error) {
	a, err := f.t.c.Getattr(f.t.ctx, f.fh, nil)
	if err != nil {
		return nil, pathErr("stat", f.name, err)
	}
	return &FileInfo{FileName: path.Base(f.name), Attr: a, FH: f.fh}, nil
}

func (f *File) check(op string, write bool) error {
	f.mu.Lock()
	closed := f.closed
	f.mu.Unlock()
	switch {
	case closed:
		return pathErr(op, f.name, fs.ErrClosed)
	case f.attr.Type == TypeDir && op != "readdir":
		return pathErr(op, f.name, ErrIsDir)
	case write && f.flag&accModes == os.O_RDONLY, !write && f.flag&accModes == os.O_WRONLY:
		return pathErr(op, f.name, ErrOpenMode)
	}
	return nil
}

// ReadAt reads len(p) bytes at off (io.ReaderAt).
func (f *File) ReadAt(p []byte, off int64) (int, error) { return f.ReadAtContext(f.t.ctx, p, off) }

// ReadAtContext is ReadAt under ctx.
func (f *File) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if err := f.check("read", false); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, pathErr("read", f.name, ErrInval)
	}
	n, err := f.t.c.ReadAt(ctx, f.fh, f.sid(), p, off)
	if err != nil && err != io.EOF {
		err = pathErr("read", f.name, err)
	}
	return n, err
}

// Read reads from the file's offset (io.Reader).
func (f *File) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, f.check("read", false)
	}
	f.mu.Lock()
	off := f.off
	f.mu.Unlock()
	n, err := f.ReadAtContext(f.t.ctx, p, off)
	f.mu.Lock()
	f.off = off + int64(n)
	f.mu.Unlock()
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

// WriteAt writes p at off (io.WriterAt).
func (f *File) WriteAt(p []byte, off int64) (int, error) { return f.WriteAtContext(f.t.ctx, p, off) }

// WriteAtContext is WriteAt under ctx.
func (f *File) WriteAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if err := f.check("write", true); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, pathErr("write", f.name, ErrInval)
	}
	n, err := f.t.c.WriteAt(ctx, f.fh, f.sid(), p, off)
	if err != nil {
		return n, pathErr("write", f.name, err)
	}
	return n, nil
}

// Write writes at the file's offset, or with O_APPEND at its end.
func (f *File) Write(p []byte) (int, error) {
	f.mu.Lock()
	off := f.off
	f.mu.Unlock()
	if f.flag&os.O_APPEND != 0 {
		a, err := f.t.c.Getattr(f.t.ctx, f.fh, NewBitmap(AttrSize))
		if err != nil {
			return 0, pathErr("write", f.name, err)
		}
		off = int64(a.Size)
	}
	n, err := f.WriteAtContext(f.t.ctx, p, off)
	f.mu.Lock()
	f.off = off + int64(n)
	f.mu.Unlock()
	return n, err
}

// Truncate changes the file's size (SETATTR under the open's stateid).
func (f *File) Truncate(size int64) error { return f.TruncateContext(f.t.ctx, size) }

// TruncateContext is Truncate under ctx.
func (f *File) TruncateContext(ctx context.Context, size int64) error {
	if err := f.check("truncate", true); err != nil {
		return err
	}
	if size < 0 {
		return pathErr("truncate", f.name, ErrInval)
	}
	if _, err := f.t.c.Setattr(ctx, f.fh, f.sid(), SetAttr{Size: Ptr(uint64(size))}); err != nil {
		return pathErr("truncate", f.name, err)
	}
	return nil
}

// Seek sets the offset of the next Read or Write (io.Seeker).
func (f *File) Seek(offset int64, whence int) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return 0, pathErr("seek", f.name, fs.ErrClosed)
	}
	var base int64
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		base = f.off
	case io.SeekEnd:
		a, err := f.t.c.Getattr(f.t.ctx, f.fh, NewBitmap(AttrSize))
		if err != nil {
			return 0, pathErr("seek", f.name, err)
		}
		base = int64(a.Size)
	default:
		return 0, pathErr("seek", f.name, ErrInval)
	}
	if base+offset < 0 {
		return 0, pathErr("seek", f.name, ErrInval)
	}
	f.off = base + offset
	return f.off, nil
}

// ReadDir reads a directory's entries (fs.ReadDirFile): n > 0 returns at
// most n, io.EOF at the end; n <= 0 all that remain.
func (f *File) ReadDir(n int) ([]fs.DirEntry, error) {
	if err := f.check("readdir", false); err != nil {
		return nil, err
	}
	if f.attr.Type != TypeDir {
		return nil, pathErr("readdir", f.name, ErrNotDir)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dir == nil {
		es, err := f.t.c.ReadDirAll(f.t.ctx, f.fh)
		if err != nil {
			return nil, pathErr("readdir", f.name, err)
		}
		f.dir = sortedEntries(es)
	}
	rest := f.dir[f.dirPos:]
	if n <= 0 {
		f.dirPos = len(f.dir)
		return rest, nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	rest = rest[:min(n, len(rest))]
	f.dirPos += len(rest)
	return rest, nil
}

// Close ends the open (CLOSE). Idempotent after the first call's result.
func (f *File) Close() error { return f.CloseContext(f.t.ctx) }

// CloseContext is Close under ctx.
func (f *File) CloseContext(ctx context.Context) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return pathErr("close", f.name, fs.ErrClosed)
	}
	f.closed = true
	f.mu.Unlock()
	if f.open == nil {
		return nil
	}
	f.t.mu.Lock()
	delete(f.t.opens, f)
	f.t.mu.Unlock()
	if err := f.t.c.CloseFile(ctx, f.fh, f.open.StateID()); err != nil {
		return pathErr("close", f.name, err)
	}
	return nil
}

var (
	_ fs.FS          = (*Target)(nil)
	_ fs.StatFS      = (*Target)(nil)
	_ fs.ReadDirFS   = (*Target)(nil)
	_ fs.ReadFileFS  = (*Target)(nil)
	_ fs.ReadDirFile = (*File)(nil)
	_ io.ReaderAt    = (*File)(nil)
	_ io.Seeker      = (*File)(nil)
	_ io.WriterAt    = (*File)(nil)
)
