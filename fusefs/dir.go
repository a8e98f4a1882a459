package fusefs

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma/nfs3"
)

// created returns the node of an object just made in n under name: the
// reply's handle and attributes, or LOOKUP/GETATTR for what it omitted.
func (n *node) created(ctx context.Context, name string, r *nfs3.CreateResult) (*node, error) {
	fh, a := r.FH, r.Attr
	if fh == nil {
		var lr nfs3.LookupResult
		err := n.do(ctx, func(dir nfs3.FileHandle) (err error) {
			lr, err = n.fsys.c.Lookup(ctx, dir, name)
			return err
		})
		if err != nil {
			return nil, err
		}
		fh, a = lr.FH, lr.Attr
	}
	a, err := n.lookupAttr(ctx, fh, a)
	if err != nil {
		return nil, err
	}
	c, _ := n.child(ctx, name, fh, a)
	return c, nil
}

// Create implements fs.NodeCreater with CREATE (RFC 1813 §3.3.8): GUARDED for
// O_EXCL, else UNCHECKED (which opens a file another client made meanwhile,
// truncating it for O_TRUNC).
func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if errno := n.fsys.checkName(name); errno != 0 {
		return nil, nil, 0, errno
	}
	pid := callerPid(ctx)
	umask, umaskKnown := n.fsys.umaskOf(ctx)
	ctx, done := n.fsys.callCtx(ctx)
	defer done()
	if n.fsys.opts.ReadOnly {
		return nil, nil, 0, syscall.EROFS
	}
	mode, err := n.newMode(ctx, mode, umask, umaskKnown)
	if err != nil {
		return nil, nil, 0, toErrno(err)
	}
	how := nfs3.CreateHow{Mode: nfs3.Unchecked, Attr: nfs3.SetAttr{Mode: new(mode)}}
	if flags&syscall.O_EXCL != 0 {
		how.Mode = nfs3.Guarded
	} else if flags&syscall.O_TRUNC != 0 {
		how.Attr.Size = new(uint64(0))
	}
	var r nfs3.CreateResult
	err = n.do(ctx, func(dir nfs3.FileHandle) (err error) {
		r, err = n.fsys.c.Create(ctx, dir, name, how)
		return err
	})
	n.dir.changed(&r.DirWcc, err == nil, nameChange{add: name})
	n.learnRefused(ctx, err)
	if err != nil {
		return nil, nil, 0, toErrno(err)
	}
	if how.Mode == nfs3.Guarded {
		// Made just now, where an UNCHECKED CREATE may have opened a
		// file someone else made: its owner shows whether root is
		// squashed (rootsquash.go).
		n.fsys.learnCreated(ctx, r.Attr)
	}
	c, err := n.created(ctx, name, &r)
	if err != nil {
		return nil, nil, 0, toErrno(err)
	}
	if c.file == nil {
		return nil, nil, 0, syscall.EIO // the server made no regular file
	}
	n.entryOut(c, out)
	return c.EmbeddedInode(), c.newOpenFile(ctx, flags, pid), directIOFlags(flags), 0
}

// Mkdir implements fs.NodeMkdirer with MKDIR (RFC 1813 §3.3.9).
func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := n.fsys.checkName(name); errno != 0 {
		return nil, errno
	}
	umask, umaskKnown := n.fsys.umaskOf(ctx)
	ctx, done := n.fsys.callCtx(ctx)
	defer done()
	if n.fsys.opts.ReadOnly {
		return nil, syscall.EROFS
	}
	perm, err := n.newMode(ctx, mode, umask, umaskKnown)
	if err != nil {
		return nil, toErrno(err)
	}
	var r nfs3.CreateResult
	err = n.do(ctx, func(dir nfs3.FileHandle) (err error) {
		r, err = n.fsys.c.Mkdir(ctx, dir, name, nfs3.SetAttr{Mode: new(perm)})
		return err
	})
	in, errno := n.finishCreate(ctx, name, &r, err, out)
	if errno == 0 && r.FH != nil && r.Attr != nil {
		// Made just now: empty.
		if c, ok := in.Operations().(*node); ok {
			c.dir.startNames()
			c.madeBy(ctx)
		}
	}
	return in, errno
}

// finishCreate ends an exclusive creation (MKDIR, SYMLINK, MKNOD, CREATE
// GUARDED) of name in n, made with the call context ctx.
func (n *node) finishCreate(ctx context.Context, name string, r *nfs3.CreateResult, err error, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.dir.changed(&r.DirWcc, err == nil, nameChange{add: name})
	n.learnRefused(ctx, err)
	if err != nil {
		return nil, toErrno(err)
	}
	// The new object's owner shows whether root is squashed
	// (rootsquash.go).
	n.fsys.learnCreated(ctx, r.Attr)
	c, err := n.created(ctx, name, r)
	if err != nil {
		return nil, toErrno(err)
	}
	n.entryOut(c, out)
	return c.EmbeddedInode(), 0
}

// Mknod implements fs.NodeMknoder with MKNOD (RFC 1813 §3.3.11) for devices,
// FIFOs and sockets, and CREATE (GUARDED) for regular files.
func (n *node) Mknod(ctx context.Context, name string, mode, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := n.fsys.checkName(name); errno != 0 {
		return nil, errno
	}
	umask, umaskKnown := n.fsys.umaskOf(ctx)
	ctx, done := n.fsys.callCtx(ctx)
	defer done()
	if n.fsys.opts.ReadOnly {
		return nil, syscall.EROFS
	}
	perm, err := n.newMode(ctx, mode, umask, umaskKnown)
	if err != nil {
		return nil, toErrno(err)
	}
	attr := nfs3.SetAttr{Mode: new(perm)}
	var what nfs3.MknodData
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG, 0:
		var r nfs3.CreateResult
		err := n.do(ctx, func(dir nfs3.FileHandle) (err error) {
			r, err = n.fsys.c.Create(ctx, dir, name, nfs3.CreateHow{Mode: nfs3.Guarded, Attr: attr})
			return err
		})
		return n.finishCreate(ctx, name, &r, err, out)
	case syscall.S_IFCHR:
		what = nfs3.MknodData{Type: nfs3.TypeChr, Attr: attr, Spec: nfs3.SpecData{Major: unix.Major(uint64(dev)), Minor: unix.Minor(uint64(dev))}}
	case syscall.S_IFBLK:
		what = nfs3.MknodData{Type: nfs3.TypeBlk, Attr: attr, Spec: nfs3.SpecData{Major: unix.Major(uint64(dev)), Minor: unix.Minor(uint64(dev))}}
	case syscall.S_IFIFO:
		what = nfs3.MknodData{Type: nfs3.TypeFIFO, Attr: attr}
	case syscall.S_IFSOCK:
		what = nfs3.MknodData{Type: nfs3.TypeSock, Attr: attr}
	default:
		return nil, syscall.EINVAL
	}
	var r nfs3.CreateResult
	err = n.do(ctx, func(dir nfs3.FileHandle) (err error) {
		r, err = n.fsys.c.Mknod(ctx, dir, name, what)
		return err
	})
	return n.finishCreate(ctx, name, &r, err, out)
}

// Symlink implements fs.NodeSymlinker with SYMLINK (RFC 1813 §3.3.10).
func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := n.fsys.checkName(name); errno != 0 {
		return nil, errno
	}
	ctx, done := n.fsys.callCtx(ctx)
	defer done()
	if n.fsys.opts.ReadOnly {
		return nil, syscall.EROFS
	}
	var r nfs3.CreateResult
	err := n.do(ctx, func(dir nfs3.FileHandle) (err error) {
		r, err = n.fsys.c.Symlink(ctx, dir, name, nfs3.SetAttr{Mode: new(uint32(0o777))}, target)
		return err
	})
	return n.finishCreate(ctx, name, &r, err, out)
}

// Link implements fs.NodeLinker with LINK (RFC 1813 §3.3.15).
func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := n.fsys.checkName(name); errno != 0 {
		return nil, errno
	}
	caller, _ := fuse.FromContext(ctx)
	ctx, done := n.fsys.callCtx(ctx)
	defer done()
	if n.fsys.opts.ReadOnly {
		return nil, syscall.EROFS
	}
	t, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	if errno := t.mayLink(ctx, caller); errno != 0 {
		return nil, errno
	}
	var r nfs3.LinkResult
	err := n.do(ctx, func(dir nfs3.FileHandle) error {
		return t.do(ctx, func(file nfs3.FileHandle) (err error) {
			r, err = n.fsys.c.Link(ctx, file, dir, name)
			return err
		})
	})
	n.dir.changed(&r.DirWcc, err == nil, nameChange{add: name})
	if r.Attr != nil {
		t.setAttr(r.Attr)
	} else {
		t.invalidateAttr()
	}
	if err != nil {
		return nil, toErrno(err)
	}
	if _, _, err := t.getattr(ctx, false); err != nil {
		return nil, toErrno(err)
	}
	n.entryOut(t, out)
	return t.EmbeddedInode(), 0
}

// openChild returns the node of n's child name if the kernel knows it and
// it is open: unlinking it must keep it reachable.
func (n *node) openChild(name string) *node {
	in := n.GetChild(name)
	if in == nil {
		return nil
	}
	c, ok := in.Operations().(*node)
	if !ok {
		return nil
	}
	if !c.file.waitClosed(releaseWait) {
		return c
	}
	return nil
}

// releaseWait is how long an unlink waits for a file just closed to be
// released: close(2) returns before the kernel's RELEASE reaches the file
// system, so a file closed right before its unlink still looks open.
const releaseWait = 100 * time.Millisecond

// waitClosed waits up to d for the file to have no open handle; it reports
// false if it stays open (or is already silly renamed). A nil s (not a
// regular file) is never open.
func (s *fileState) waitClosed(d time.Duration) bool {
	if s == nil {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opens == 0 {
		return true
	}
	if s.silly != nil {
		return false
	}
	if s.closed == nil {
		s.closed = sync.NewCond(&s.mu)
	}
	// The timer's wake-up ends the wait: a deadline read from the clock
	// could still lie ahead when the timer fires, and no second wake-up
	// would come (the open file's holder may be the caller of this wait).
	expired := false
	timer := s.n.fsys.after(d, func() {
		s.mu.Lock()
		expired = true
		s.closed.Broadcast()
		s.mu.Unlock()
	})
	defer timer.Stop()
	for s.opens > 0 && !expired {
		s.closed.Wait()
	}
	return s.opens == 0
}

// sillyRename renames n's open child c (now at name) to a hidden .nfs name
// in n (the NFS client's silly rename), to be removed at c's last close.
func (n *node) sillyRename(ctx context.Context, c *node, name string) error {
	a, _ := c.cached()
	silly := fmt.Sprintf(".nfs%016x%08x", a.FileID, n.fsys.sillyCount.Add(1))
	var r nfs3.RenameResult
	err := n.do(ctx, func(dir nfs3.FileHandle) (err error) {
		r, err = n.fsys.c.Rename(ctx, dir, name, dir, silly)
		return err
	})
	n.dir.changed(&r.FromDirWcc, err == nil, nameChange{remove: name}, nameChange{add: silly})
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.attrs.invalidate()
	c.mu.Unlock()
	c.file.mu.Lock()
	c.file.silly = &sillyName{parent: n, name: silly}
	c.file.mu.Unlock()
	n.fsys.events.add(evSillyRename)
	n.fsys.log.Debug("silly rename", "name", name, "to", silly)
	return nil
}

// Unlink implements fs.NodeUnlinker with REMOVE (RFC 1813 §3.3.12), or a
// silly rename when the file is open.
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	if errno := n.fsys.checkName(name); errno != 0 {
		return errno
	}
	ctx, done := n.fsys.callCtx(ctx)
	defer done()
	if n.fsys.opts.ReadOnly {
		return syscall.EROFS
	}
	if c := n.openChild(name); c != nil {
		return toErrno(n.sillyRename(ctx, c, name))
	}
	var w nfs3.WccData
	err := n.do(ctx, func(dir nfs3.FileHandle) (err error) {
		w, err = n.fsys.c.Remove(ctx, dir, name)
		return err
	})
	n.dir.changed(&w, err == nil, nameChange{remove: name})
	if in := n.GetChild(name); in != nil {
		if c, ok := in.Operations().(*node); ok {
			c.invalidateAttr() // nlink and ctime changed
		}
	}
	return toErrno(err)
}

// Rmdir implements fs.NodeRmdirer with RMDIR (RFC 1813 §3.3.13).
func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	if errno := n.fsys.checkName(name); errno != 0 {
		return errno
	}
	ctx, done := n.fsys.callCtx(ctx)
	defer done()
	if n.fsys.opts.ReadOnly {
		return syscall.EROFS
	}
	var w nfs3.WccData
	err := n.do(ctx, func(dir nfs3.FileHandle) (err error) {
		w, err = n.fsys.c.Rmdir(ctx, dir, name)
		return err
	})
	n.dir.changed(&w, err == nil, nameChange{remove: name})
	return toErrno(err)
}

// Rename implements fs.NodeRenamer with RENAME (RFC 1813 §3.3.14). NFSv3
// renames have no flags, so renameat2(2) with RENAME_NOREPLACE,
// RENAME_EXCHANGE or RENAME_WHITEOUT fails with EINVAL, as on the kernel's
// NFSv3 client. The first such request answers ENOSYS, on which the kernel
// stops sending them and answers EINVAL itself: mv(1) tries
// RENAME_NOREPLACE before every plain rename, and would otherwise pay a
// FUSE round trip (and a LOOKUP of the target) for each. An open file it
// would replace is silly renamed first.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if flags != 0 {
		return syscall.ENOSYS
	}
	if errno := n.fsys.checkName(newName); errno != 0 {
		return errno
	}
	ctx, done := n.fsys.callCtx(ctx)
	defer done()
	if n.fsys.opts.ReadOnly {
		return syscall.EROFS
	}
	to, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	if c := to.openChild(newName); c != nil {
		if moved := n.GetChild(name); moved == nil || moved != c.EmbeddedInode() {
			if err := to.sillyRename(ctx, c, newName); err != nil {
				return toErrno(err)
			}
		}
	}
	var r nfs3.RenameResult
	err := n.do(ctx, func(from nfs3.FileHandle) error {
		return to.do(ctx, func(toDir nfs3.FileHandle) (err error) {
			r, err = n.fsys.c.Rename(ctx, from, name, toDir, newName)
			return err
		})
	})
	if to == n {
		// Both wcc_data are of this directory; the first one's before
		// is its state before the rename.
		n.dir.changed(&r.FromDirWcc, err == nil, nameChange{remove: name}, nameChange{add: newName})
	} else {
		n.dir.changed(&r.FromDirWcc, err == nil, nameChange{remove: name})
		to.dir.changed(&r.ToDirWcc, err == nil, nameChange{add: newName})
	}
	for _, in := range []*fs.Inode{n.GetChild(name), to.GetChild(newName)} {
		if in == nil {
			continue
		}
		if c, ok := in.Operations().(*node); ok {
			c.invalidateAttr() // ctime, and nlink of a replaced target
		}
	}
	return toErrno(err)
}

// revalidateDir is close-to-open for a directory: the kernel client
// revalidates a directory's attributes with a GETATTR at each open of it
// (a path walk with LOOKUP_OPEN) and, when its modification time or change
// moved, drops its copy of the listing, so that another client's create or
// unlink is in the next listing at once. Here a change drops the kernel's
// copy (listCacheFlags), the kept READDIRPLUS replies, the entries kept for
// lookups and the set of names (setAttr). Not with nocto.
func (n *node) revalidateDir(ctx context.Context) syscall.Errno {
	if n.fsys.opts.NoCTO {
		return 0
	}
	cctx, done := n.fsys.callCtx(ctx)
	defer done()
	var a nfs3.Attr
	err := n.do(cctx, func(fh nfs3.FileHandle) (err error) {
		a, err = n.fsys.c.Getattr(cctx, fh)
		return err
	})
	if err != nil {
		n.forgetIfStale(err)
		n.markGone(err)
		return toErrno(err)
	}
	n.dir.revalidated(&a)
	return 0
}

// OpendirHandle implements fs.NodeOpendirHandler: the listing is read with
// READDIRPLUS, whose attributes and handles answer the kernel's
// readdirplus lookups without more calls, and kept by the kernel for the
// opens soon after (dircache.go).
//
// The caller must be allowed to read the directory, as the server says
// (access.go): the kernel's copy of the listing and this mount's kept
// replies are otherwise served to anyone.
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if n.dir == nil {
		return nil, 0, syscall.ENOTDIR // not reached: the kernel opens directories only so
	}
	if errno := n.revalidateDir(ctx); errno != 0 {
		return nil, 0, errno
	}
	if errno := n.opendirAccess(ctx); errno != 0 {
		return nil, 0, errno
	}
	cache := n.listCacheFlags(ctx)
	return &dirHandle{n: n, cached: cache != 0}, cache, 0
}

// dirHandle is an open directory: a cursor over READDIRPLUS pages (RFC 1813
// §3.3.17). Directory offsets are entry positions 1, 2, 3... (offset k is
// "after the k-th entry"); the cookie to resume after each is remembered so
// seekdir works.
type dirHandle struct {
	n *node

	// go-fuse serialises the calls on one handle.
	verf nfs3.CookieVerf
	seen []dirPos // seen[k-1]: the k-th entry
	page []nfs3.DirEntryPlus
	pos  int         // next entry of page
	eof  bool        // the server has no more pages after page
	next nfs3.Cookie // where the next page starts
	skip int         // entries still to pass over after a seek (see Seekdir)
	last *nfs3.DirEntryPlus
	at   time.Time // when page came

	// A server that repeats cookies would make the listing endless (and
	// seen grow without bound): every entry's cookie and every cookie
	// asked for must be new, and a listing has at most MaxDirEntries.
	cookies map[nfs3.Cookie]struct{} // of the entries in seen (not "." or "..")
	asked   map[nfs3.Cookie]struct{} // READDIRPLUS cookies since the start or seek

	// cached: opened for the kernel's listing cache, whose offsets this
	// handle may be asked to seek to without having handed them out;
	// catchUp: entries to read and pass over from the start to reach
	// such an offset (see Seekdir).
	cached  bool
	catchUp int

	// kept: the directory's kept listing this handle began or reads
	// (dircache.go); fromKept: page is one of its pages, not a reply to
	// this handle.
	kept     *keptListing
	fromKept bool
}

// MaxDirEntries bounds the entries of one directory listing (the memory
// an open directory takes: about 50 bytes an entry).
const MaxDirEntries = 1 << 22

// errDirLoop is what a looping or endless listing returns.
const errDirLoop = syscall.EIO

// dirPos is where an entry was: the cookie to resume after it, and whether
// it was "." or "..".
type dirPos struct {
	cookie nfs3.Cookie
	dot    bool
}

var (
	_ fs.FileReaddirenter = (*dirHandle)(nil)
	_ fs.FileLookuper     = (*dirHandle)(nil)
	_ fs.FileSeekdirer    = (*dirHandle)(nil)
)

// Readdirent implements fs.FileReaddirenter.
func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	ctx, done := d.n.fsys.callCtx(ctx)
	defer done()
	for {
		if d.pos >= len(d.page) {
			if d.eof {
				return nil, 0
			}
			if errno := d.fetch(ctx); errno != 0 {
				return nil, errno
			}
			if d.pos >= len(d.page) {
				return nil, 0
			}
		}
		e := &d.page[d.pos]
		d.pos++
		d.next = e.Cookie
		if d.skip > 0 {
			d.skip--
			continue
		}
		dot := e.Name == "." || e.Name == ".."
		if !dot {
			if d.cookies == nil {
				d.cookies = make(map[nfs3.Cookie]struct{})
			}
			if _, dup := d.cookies[e.Cookie]; dup {
				d.n.fsys.log.Error("READDIRPLUS: the server repeated a cookie; the listing would not end", "cookie", e.Cookie, "name", e.Name, "entries", len(d.seen))
				return nil, errDirLoop
			}
			d.cookies[e.Cookie] = struct{}{}
		}
		if len(d.seen) >= MaxDirEntries {
			d.n.fsys.log.Error("READDIRPLUS: directory listing too long", "entries", len(d.seen))
			return nil, errDirLoop
		}
		d.seen = append(d.seen, dirPos{cookie: e.Cookie, dot: dot})
		if len(d.seen) <= d.catchUp {
			continue
		}
		d.last = e
		de := &fuse.DirEntry{Name: e.Name, Ino: ino(e.FileID), Off: uint64(len(d.seen))}
		if e.Attr != nil {
			de.Mode = typeMode(e.Attr.Type)
		}
		return de, 0
	}
}

// fetch reads the page after the last entry read.
func (d *dirHandle) fetch(ctx context.Context) syscall.Errno {
	if d.asked == nil {
		d.asked = make(map[nfs3.Cookie]struct{})
	}
	if _, again := d.asked[d.next]; again {
		d.n.fsys.log.Error("READDIRPLUS: the server's pages lead back to a cookie already read; the listing would not end", "cookie", d.next)
		return errDirLoop
	}
	d.asked[d.next] = struct{}{}
	filling := d.cached && d.next == 0 && len(d.seen) == 0 && d.catchUp == 0
	if d.cached {
		if p, ok := d.keptPage(d.next); ok {
			if filling {
				d.n.dir.listCacheFilling(p.at)
			}
			d.page, d.pos, d.eof, d.verf, d.at, d.fromKept = p.entries, 0, p.eof, p.verf, p.at, true
			return 0
		}
	}
	if filling {
		d.n.dir.listCacheFilling(d.n.fsys.now())
	}
	var r nfs3.ReaddirplusResult
	err := d.n.do(ctx, func(dir nfs3.FileHandle) (err error) {
		r, err = d.n.fsys.c.Readdirplus(ctx, dir, d.next, d.verf, 0, 0)
		return err
	})
	d.n.setAttr(r.DirAttr)
	if err != nil {
		return toErrno(err)
	}
	if len(r.Entries) == 0 && !r.EOF {
		return syscall.EIO // a page that does not advance
	}
	if d.cached {
		d.keepPage(d.next, &r)
	}
	d.page, d.pos, d.eof, d.verf, d.at, d.fromKept = r.Entries, 0, r.EOF, r.Verf, d.n.fsys.now(), false
	d.n.dir.putPlus(r.Entries)
	return 0
}

// Seekdir implements fs.FileSeekdirer: back to any offset handed out. The
// listing resumes at the server's cookie of the entry before; except after
// "." or "..", whose cookies some servers cannot resume from (go-nfs gives
// "." cookie 0, which means the start): the listing then starts over and
// passes over the entries up to the offset.
//
// A handle opened for the kernel's listing cache may be asked for an
// offset the cache handed out (the cache was dropped under a reader, the
// directory having changed): the listing starts over and reads its way
// to it, as a reader that had read that far would be.
func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	catchUp := off > uint64(len(d.seen))
	if catchUp && (!d.cached || off > MaxDirEntries) {
		return syscall.EINVAL
	}
	d.page, d.pos, d.eof, d.last, d.skip, d.catchUp = nil, 0, false, nil, 0, 0
	clear(d.asked)
	if catchUp {
		clear(d.cookies)
		d.seen, d.next, d.verf, d.catchUp = d.seen[:0], 0, nfs3.CookieVerf{}, int(off)
		return 0
	}
	for _, p := range d.seen[off:] {
		if !p.dot {
			delete(d.cookies, p.cookie)
		}
	}
	if off == 0 || d.seen[off-1].dot {
		d.skip, d.next, d.verf = int(off), 0, nfs3.CookieVerf{}
	} else {
		d.next = d.seen[off-1].cookie
	}
	d.seen = d.seen[:off]
	return 0
}

// Lookup implements fs.FileLookuper for readdirplus: the entry just returned
// brings its own attributes and handle; LOOKUP only when it lacks them.
func (d *dirHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	e := d.last
	if e == nil || e.Name != name || e.FH == nil || e.Attr == nil {
		return d.n.Lookup(ctx, name, out)
	}
	d.n.dir.takePlus(name) // the kernel has it from this listing now
	if d.fromKept {
		// A kept page's attributes never replace ones learned since.
		if c, newer := d.newerAttrs(name, e.FH, d.at); newer {
			d.n.entryOut(c, out)
			return c.EmbeddedInode(), 0
		}
	}
	c, unchanged := d.n.child(ctx, name, e.FH, e.Attr)
	c.mu.Lock()
	c.lookupChanged = c.lookupChanged || !unchanged
	c.mu.Unlock()
	d.n.entryOut(c, out)
	return c.EmbeddedInode(), 0
}
