package nfs3

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// MountOptions configures Mount. The zero value is usable.
type MountOptions struct {
	// MountPort is the TCP port of the MOUNT service; 0 asks the port
	// mapper on the host.
	MountPort int
	// NFSPort is the TCP port of the NFS service; 0 asks the port mapper.
	// Dial does not use it (nfsrdma's Mount: 0 is port 20049 over RDMA).
	NFSPort int
	// NConnect is the number of connections the NFS calls are spread over
	// (nfs(5) "nconnect"; default 1, at most MaxNConnect).
	NConnect int
	// Dial, when set, opens each of the NConnect connections of the NFS
	// calls, to addr, the server's address (package nfsrdma's Mount dials
	// RPC-over-RDMA with it). host is then resolved once (ResolveHost) and
	// MOUNT goes to that address too.
	Dial func(ctx context.Context, addr netip.Addr) (sunrpc.Transport, error)
	// Release, when set, is called once the Target's connections are
	// closed (at Close or Unmount), or when Mount fails: it releases what
	// Dial made them from (nfsrdma's Mount: the RDMA fabric it opened).
	// Mount owns it from the moment it is called.
	Release func() error
	// Transport, when set, carries the NFS calls instead of connections
	// Mount opens (NConnect and Dial are then unused, and Dial must be
	// nil). The Target owns it.
	Transport sunrpc.Transport
	// TCP configures the TCP connections (MOUNT, port mapper, and NFS unless
	// Transport is set).
	TCP *sunrpc.TCPOptions
	// Cred is the credential of the MOUNT and NFS calls; nil means
	// ProcessCred (AUTH_SYS with the process's ids, as the Linux client
	// sends). &sunrpc.AuthNone sends AUTH_NONE.
	Cred *sunrpc.OpaqueAuth
	// NoResvPort connects MOUNT, the port mapper and NFS over TCP from an
	// ordinary source port (nfs(5) "noresvport"). By default, as the Linux
	// client's "resvport", a process that may bind ports below 1024 (root)
	// uses one, which exports with "secure" (the exports(5) default) and
	// rpc.mountd require; other processes use an ordinary port.
	NoResvPort bool
	// Client configures the NFS client; its Cred is replaced by Cred.
	Client ClientOptions
	// MaxDirty bounds the bytes of small writes each File keeps uncommitted
	// (and copied, to resend them should the server lose them) until Sync or
	// Close; default 4 MiB.
	MaxDirty int
}

// DefaultMaxDirty is MountOptions.MaxDirty's default.
const DefaultMaxDirty = 4 << 20

// ProcessCred returns an AUTH_SYS credential for the calling process: its uid,
// gid, supplementary groups (at most 16) and host name.
func ProcessCred() (sunrpc.OpaqueAuth, error) {
	host, _ := os.Hostname()
	if len(host) > sunrpc.MaxMachineName {
		host = host[:sunrpc.MaxMachineName]
	}
	a := sunrpc.AuthSys{Stamp: uint32(time.Now().Unix()), MachineName: host}
	if uid, gid := os.Getuid(), os.Getgid(); uid >= 0 && gid >= 0 {
		a.UID, a.GID = uint32(uid), uint32(gid)
	}
	if groups, err := os.Getgroups(); err == nil {
		for _, g := range groups[:min(len(groups), sunrpc.MaxAuthSysGIDs)] {
			a.GIDs = append(a.GIDs, uint32(g))
		}
	}
	return a.Credential()
}

// Target is a mounted export. It is safe for concurrent use.
//
// Paths are io/fs names: slash-separated, relative to the export's root,
// "." for the root ("docs/a"; see fs.ValidPath). The io/fs methods (Open,
// Stat, ReadDir, ReadFile) accept only those, as io/fs requires. The other
// methods accept them too and, for go-nfs-client's callers, rooted paths
// ("/docs/a", "/" or "" for the root, "." and ".." resolved within the
// export); that form is deprecated. Symbolic links in paths are not
// followed.
//
// Every method that calls the server takes a context first, except the
// io/fs ones, whose signatures io/fs fixes: they run under the Target's
// lifetime (Close cancels them), and each has a twin with the Context
// suffix that takes one (StatContext, ReadDirContext, ReadFileContext,
// OpenContext; OpenFileContext for OpenFile).
//
// Methods return *fs.PathError around the NFS error, so errors.Is(err,
// fs.ErrNotExist) and the like work.
type Target struct {
	c        *Client
	root     FileHandle
	log      *slog.Logger
	maxDirty int

	// ctx bounds the io.Reader/io.Writer style File methods, which take no
	// context; Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc

	mount     *mountInfo   // nil unless made by Mount
	release   func() error // MountOptions.Release
	closeOnce sync.Once
	closeErr  error
}

type mountInfo struct {
	host   string
	port   int
	export string
	cred   sunrpc.OpaqueAuth
	tcp    *sunrpc.TCPOptions
}

// Mount mounts export from host: MOUNT (RFC 1813 Appendix I) over TCP for the
// root handle, then the NFS connections (opts.NConnect of them, over TCP or
// opts.Dial) or opts.Transport, and FSINFO for the transfer sizes. host is a
// name or an address. MountTCP takes a "host:/export" spec, and package
// nfsrdma's Mount mounts over RDMA. The Target owns what Mount opened; a
// failed Mount leaves nothing open.
func Mount(ctx context.Context, host, export string, opts *MountOptions) (t *Target, err error) {
	var o MountOptions
	if opts != nil {
		o = *opts
	}
	if o.Release != nil {
		defer func() {
			if err != nil {
				err = errors.Join(err, o.Release())
			}
		}()
	}
	name := host // as given: errors name the server so
	fail := func(err error) error { return fmt.Errorf("nfs3: mount %s:%s: %w", name, export, err) }
	if o.Transport != nil && o.Dial != nil {
		return nil, errors.New("nfs3: MountOptions.Transport and Dial both given")
	}
	if o.Cred != nil {
		o.Client.Cred = *o.Cred
		o.Client.AuthNone = o.Cred.Flavor == sunrpc.AuthFlavorNone && len(o.Cred.Body) == 0
	} else {
		cred, err := ProcessCred()
		if err != nil {
			return nil, err
		}
		o.Client.Cred = cred
	}
	var tcp sunrpc.TCPOptions
	if o.TCP != nil {
		tcp = *o.TCP
	}
	if tcp.Logger == nil {
		tcp.Logger = o.Client.Logger
	}
	if o.NoResvPort {
		tcp.NoResvPort = true
	}
	o.TCP = &tcp
	var addr netip.Addr
	if o.Dial != nil {
		if addr, err = ResolveHost(ctx, host); err != nil {
			return nil, fail(err)
		}
		host = addr.String()
	}
	mc, err := DialMount(ctx, host, o.MountPort, o.Client.Cred, o.TCP)
	if err != nil {
		return nil, fail(err)
	}
	mres, err := mc.Mnt(ctx, export)
	mc.Close()
	if err != nil {
		return nil, fail(err)
	}
	tr := o.Transport
	if tr == nil {
		if tr, err = dialNFS(ctx, &o, host, addr); err != nil {
			return nil, fail(err)
		}
	}
	c, err := NewClient(tr, &o.Client)
	if err != nil {
		tr.Close()
		return nil, err
	}
	t = NewTarget(c, mres.FH, o.MaxDirty)
	t.mount = &mountInfo{host: host, port: o.MountPort, export: export, cred: o.Client.Cred, tcp: o.TCP}
	if _, _, err := c.IOSizes(ctx, mres.FH); err != nil {
		t.Close()
		return nil, fail(fmt.Errorf("FSINFO: %w", err))
	}
	t.release = o.Release // only now: a failure above releases it itself
	return t, nil
}

// NewTarget returns a Target over c rooted at root (e.g. from MountClient.Mnt).
// maxDirty is MountOptions.MaxDirty (0: the default). Close closes c.
func NewTarget(c *Client, root FileHandle, maxDirty int) *Target {
	if maxDirty <= 0 {
		maxDirty = DefaultMaxDirty
	}
	t := &Target{c: c, root: root, log: c.log, maxDirty: maxDirty}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	return t
}

// Client returns the handle-based client.
func (t *Target) Client() *Client { return t.c }

// Root returns the export's root handle.
func (t *Target) Root() FileHandle { return t.root }

// Close cancels the Files' pending I/O, closes the NFS transport, and with
// it everything Mount opened, then calls MountOptions.Release. It does not
// tell the server (see Unmount). Idempotent.
func (t *Target) Close() error {
	t.closeOnce.Do(func() {
		t.cancel()
		t.closeErr = t.c.Close()
		if t.release != nil {
			t.closeErr = errors.Join(t.closeErr, t.release())
		}
	})
	return t.closeErr
}

// Unmount sends MOUNTPROC3_UMNT for the export (when the Target came from
// Mount) and closes the Target.
func (t *Target) Unmount(ctx context.Context) error {
	var err error
	if m := t.mount; m != nil {
		var mc *MountClient
		mc, err = DialMount(ctx, m.host, m.port, m.cred, m.tcp)
		if err == nil {
			err = mc.Umnt(ctx, m.export)
			mc.Close()
		}
	}
	return errors.Join(err, t.Close())
}

func pathErr(op, p string, err error) error {
	if err == nil {
		return nil
	}
	return &fs.PathError{Op: op, Path: p, Err: err}
}

// components splits a path relative to the root, resolving "." and "..".
func components(p string) []string {
	p = path.Clean("/" + p)
	if p == "/" {
		return nil
	}
	return strings.Split(p[1:], "/")
}

// checkNames fails with ErrNameTooLong, before any call, when a component of
// cs is longer than NFSv3's 255 bytes: the Linux client caps a server's
// name_max (PATHCONF) at that, so over-long names fail the same way on every
// server; names a server with a smaller name_max refuses come back as its
// NFS3ERR_NAMETOOLONG.
func checkNames(cs []string) error {
	for _, c := range cs {
		if len(c) > MaxNameLen {
			return ErrNameTooLong
		}
	}
	return nil
}

// walk resolves p to a handle (and its attributes, when the server sent them).
func (t *Target) walk(ctx context.Context, p string) (FileHandle, *Attr, error) {
	fh := t.root
	var attr *Attr
	cs := components(p)
	if err := checkNames(cs); err != nil {
		return nil, nil, err
	}
	for _, name := range cs {
		r, err := t.c.Lookup(ctx, fh, name)
		if err != nil {
			return nil, nil, err
		}
		fh, attr = r.FH, r.Attr
	}
	return fh, attr, nil
}

// walkParent resolves p's directory and returns it with p's last component.
func (t *Target) walkParent(ctx context.Context, p string) (FileHandle, string, error) {
	cs := components(p)
	if len(cs) == 0 {
		return nil, "", ErrInval // the root has no parent in the export
	}
	if err := checkNames(cs); err != nil {
		return nil, "", err
	}
	dir := t.root
	for _, name := range cs[:len(cs)-1] {
		r, err := t.c.Lookup(ctx, dir, name)
		if err != nil {
			return nil, "", err
		}
		dir = r.FH
	}
	return dir, cs[len(cs)-1], nil
}

// FileInfo describes a file: its name, attributes and handle. It implements
// fs.FileInfo; Sys returns *Attr.
type FileInfo struct {
	FileName string
	Attr     Attr
	FH       FileHandle
}

func (fi *FileInfo) Name() string       { return fi.FileName }
func (fi *FileInfo) Size() int64        { return int64(fi.Attr.Size) }
func (fi *FileInfo) Mode() fs.FileMode  { return fi.Attr.FileMode() }
func (fi *FileInfo) ModTime() time.Time { return fi.Attr.Mtime.Time() }
func (fi *FileInfo) IsDir() bool        { return fi.Attr.Type == TypeDir }
func (fi *FileInfo) Sys() any           { return &fi.Attr }

// Type returns the type bits of Mode, for fs.DirEntry.
func (fi *FileInfo) Type() fs.FileMode { return fi.Mode().Type() }

// Info returns fi itself, for fs.DirEntry (ReadDir's entries are *FileInfo).
func (fi *FileInfo) Info() (fs.FileInfo, error) { return fi, nil }

func baseName(p string) string {
	cs := components(p)
	if len(cs) == 0 {
		return "/"
	}
	return cs[len(cs)-1]
}

// Lookup resolves p and returns its attributes and handle.
func (t *Target) Lookup(ctx context.Context, p string) (*FileInfo, FileHandle, error) {
	fh, attr, err := t.walk(ctx, p)
	if err == nil && attr == nil {
		var a Attr
		a, err = t.c.Getattr(ctx, fh)
		attr = &a
	}
	if err != nil {
		return nil, nil, pathErr("lookup", p, err)
	}
	return &FileInfo{FileName: baseName(p), Attr: *attr, FH: fh}, fh, nil
}

// Getattr returns p's attributes (GETATTR).
func (t *Target) Getattr(ctx context.Context, p string) (Attr, error) {
	fh, _, err := t.walk(ctx, p)
	if err != nil {
		return Attr{}, pathErr("getattr", p, err)
	}
	a, err := t.c.Getattr(ctx, fh)
	return a, pathErr("getattr", p, err)
}

// Setattr sets p's attributes (SETATTR, unguarded).
func (t *Target) Setattr(ctx context.Context, p string, attr SetAttr) error {
	fh, _, err := t.walk(ctx, p)
	if err == nil {
		_, err = t.c.Setattr(ctx, fh, attr, nil)
	}
	return pathErr("setattr", p, err)
}

// ReadDirPlus lists directory dir without "." and "..", with attributes
// (READDIRPLUS; GETATTR for entries the server sent none for).
func (t *Target) ReadDirPlus(ctx context.Context, dir string) ([]*FileInfo, error) {
	fh, _, err := t.walk(ctx, dir)
	if err != nil {
		return nil, pathErr("readdir", dir, err)
	}
	return t.readDir(ctx, fh, dir)
}

// readDir lists directory fh (at path dir) as ReadDirPlus does.
func (t *Target) readDir(ctx context.Context, fh FileHandle, dir string) ([]*FileInfo, error) {
	ents, err := t.c.ReadDirPlusAll(ctx, fh)
	if err != nil {
		return nil, pathErr("readdir", dir, err)
	}
	out := make([]*FileInfo, 0, len(ents))
	for _, e := range ents {
		if e.Name == "." || e.Name == ".." {
			continue
		}
		fi := &FileInfo{FileName: e.Name, FH: e.FH}
		switch {
		case e.Attr != nil:
			fi.Attr = *e.Attr
		case e.FH != nil:
			if fi.Attr, err = t.c.Getattr(ctx, e.FH); err != nil {
				return nil, pathErr("readdir", path.Join(dir, e.Name), err)
			}
		default:
			r, err := t.c.Lookup(ctx, fh, e.Name)
			if err == nil && r.Attr == nil {
				var a Attr
				a, err = t.c.Getattr(ctx, r.FH)
				r.Attr = &a
			}
			if err != nil {
				return nil, pathErr("readdir", path.Join(dir, e.Name), err)
			}
			fi.FH, fi.Attr = r.FH, *r.Attr
		}
		out = append(out, fi)
	}
	return out, nil
}

// modeBits returns perm's permission and setuid/setgid/sticky bits as mode3.
func modeBits(perm fs.FileMode) uint32 {
	m := uint32(perm.Perm())
	if perm&fs.ModeSetuid != 0 {
		m |= 0o4000
	}
	if perm&fs.ModeSetgid != 0 {
		m |= 0o2000
	}
	if perm&fs.ModeSticky != 0 {
		m |= 0o1000
	}
	return m
}

// created returns the new object's handle, looking it up when the reply
// omitted it.
func (t *Target) created(ctx context.Context, dir FileHandle, name string, r CreateResult) (FileHandle, error) {
	if r.FH != nil {
		return r.FH, nil
	}
	lr, err := t.c.Lookup(ctx, dir, name)
	return lr.FH, err
}

// Mkdir creates directory p with permissions perm (MKDIR).
func (t *Target) Mkdir(ctx context.Context, p string, perm fs.FileMode) (FileHandle, error) {
	dir, name, err := t.walkParent(ctx, p)
	if err != nil {
		return nil, pathErr("mkdir", p, err)
	}
	r, err := t.c.Mkdir(ctx, dir, name, SetAttr{Mode: new(modeBits(perm))})
	if err == nil {
		var fh FileHandle
		fh, err = t.created(ctx, dir, name, r)
		return fh, pathErr("mkdir", p, err)
	}
	return nil, pathErr("mkdir", p, err)
}

// Create creates regular file p with permissions perm; it fails with
// fs.ErrExist if p exists (CREATE, GUARDED).
func (t *Target) Create(ctx context.Context, p string, perm fs.FileMode) (FileHandle, error) {
	dir, name, err := t.walkParent(ctx, p)
	if err != nil {
		return nil, pathErr("create", p, err)
	}
	r, err := t.c.Create(ctx, dir, name, CreateHow{Mode: Guarded, Attr: SetAttr{Mode: new(modeBits(perm))}})
	if err == nil {
		var fh FileHandle
		fh, err = t.created(ctx, dir, name, r)
		return fh, pathErr("create", p, err)
	}
	return nil, pathErr("create", p, err)
}

// Remove removes non-directory p (REMOVE).
func (t *Target) Remove(ctx context.Context, p string) error {
	dir, name, err := t.walkParent(ctx, p)
	if err == nil {
		_, err = t.c.Remove(ctx, dir, name)
	}
	return pathErr("remove", p, err)
}

// RmDir removes empty directory p (RMDIR).
func (t *Target) RmDir(ctx context.Context, p string) error {
	dir, name, err := t.walkParent(ctx, p)
	if err == nil {
		_, err = t.c.Rmdir(ctx, dir, name)
	}
	return pathErr("rmdir", p, err)
}

// RemoveAll removes p and, if it is a directory, everything below it. A
// missing p is not an error. The root itself is emptied but kept.
func (t *Target) RemoveAll(ctx context.Context, p string) error {
	fi, fh, err := t.Lookup(ctx, p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		if err := t.removeContents(ctx, p, fh); err != nil {
			return err
		}
		if len(components(p)) == 0 {
			return nil
		}
		err = t.RmDir(ctx, p)
	} else {
		err = t.Remove(ctx, p)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

func (t *Target) removeContents(ctx context.Context, p string, dir FileHandle) error {
	ents, err := t.c.ReadDirPlusAll(ctx, dir)
	if err != nil {
		return pathErr("removeall", p, err)
	}
	for _, e := range ents {
		if e.Name == "." || e.Name == ".." {
			continue
		}
		child := path.Join(p, e.Name)
		isDir := e.Attr != nil && e.Attr.Type == TypeDir
		if e.Attr == nil || e.FH == nil {
			r, err := t.c.Lookup(ctx, dir, e.Name)
			if err == nil && r.Attr == nil {
				var a Attr
				a, err = t.c.Getattr(ctx, r.FH)
				r.Attr = &a
			}
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return pathErr("removeall", child, err)
			}
			e.FH, isDir = r.FH, r.Attr.Type == TypeDir
		}
		if isDir {
			if err := t.removeContents(ctx, child, e.FH); err != nil {
				return err
			}
			_, err = t.c.Rmdir(ctx, dir, e.Name)
		} else {
			_, err = t.c.Remove(ctx, dir, e.Name)
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return pathErr("removeall", child, err)
		}
	}
	return nil
}

// Rename renames from to to (RENAME).
func (t *Target) Rename(ctx context.Context, from, to string) error {
	fdir, fname, err := t.walkParent(ctx, from)
	if err != nil {
		return pathErr("rename", from, err)
	}
	tdir, tname, err := t.walkParent(ctx, to)
	if err != nil {
		return pathErr("rename", to, err)
	}
	_, err = t.c.Rename(ctx, fdir, fname, tdir, tname)
	return pathErr("rename", from, err)
}

// Symlink creates symbolic link link pointing to target (SYMLINK); the
// argument order is go-nfs-client's (and os.Symlink's).
func (t *Target) Symlink(ctx context.Context, target, link string) error {
	dir, name, err := t.walkParent(ctx, link)
	if err == nil {
		_, err = t.c.Symlink(ctx, dir, name, SetAttr{Mode: new(uint32(0o777))}, target)
	}
	return pathErr("symlink", link, err)
}

// Readlink returns the target of symbolic link p (READLINK).
func (t *Target) Readlink(ctx context.Context, p string) (string, error) {
	fh, _, err := t.walk(ctx, p)
	if err != nil {
		return "", pathErr("readlink", p, err)
	}
	r, err := t.c.Readlink(ctx, fh)
	return r.Target, pathErr("readlink", p, err)
}

// Link creates hard link newname to oldname (LINK).
func (t *Target) Link(ctx context.Context, oldname, newname string) error {
	fh, _, err := t.walk(ctx, oldname)
	if err != nil {
		return pathErr("link", oldname, err)
	}
	dir, name, err := t.walkParent(ctx, newname)
	if err == nil {
		_, err = t.c.Link(ctx, fh, dir, name)
	}
	return pathErr("link", newname, err)
}

// FSInfo returns the export's static information (FSINFO).
func (t *Target) FSInfo(ctx context.Context) (FSInfo, error) {
	r, err := t.c.Fsinfo(ctx, t.root)
	return r, pathErr("fsinfo", "/", err)
}

// FSStat returns the export's space and file counts (FSSTAT).
func (t *Target) FSStat(ctx context.Context) (FSStat, error) {
	r, err := t.c.Fsstat(ctx, t.root)
	return r, pathErr("fsstat", "/", err)
}
