package fusefs

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nfsrdma/nfsrdma/nfs3"
)

// node is one NFS object (file, directory, symlink, special file) known to
// the kernel. Its identity (go-fuse StableAttr) is its type, fileid and a
// hash of its file handle.
//
// A node holds what every object has: its handle, its attributes, the
// rights the server granted each credential on it, and what the server
// and this mount's callers showed of it (gone, atimeStale, staleData,
// lookupChanged, entryUntil). A regular file's node holds its file state
// (file: data, writes, opens, deferred SETATTR), a directory's its
// directory state (dir: names, listings); which one is fixed at creation
// (newNode, by the object's type) and never changes, and no node has
// both. go-fuse calls directory operations (Lookup, Create, Mkdir...) on
// directory nodes only, and opens regular files only through Open.
//
// Locks: mu guards every field below it. It may be held while taking the
// node's file or directory state's mu (see fileState, dirState), never
// taken under one, and never with another node's mu.
type node struct {
	fs.Inode
	fsys *FS

	file *fileState // a regular file's; nil for any other type
	dir  *dirState  // a directory's; nil for any other type

	mu    sync.Mutex
	fh    nfs3.FileHandle // replaced only by refresh
	attrs attrCache

	// lookupChanged: attributes a LOOKUP or a listing brought since the
	// last open showed the object's data changed (see open). An open
	// always revalidates with a GETATTR of its own, as the kernel
	// client's open of a dentry it already had: a listing's attributes
	// (ls -l) may be a second old, and FUSE's LOOKUP is not known to be
	// of the open's own path walk.
	lookupChanged bool
	// acc: what the server said of each credential's rights on the
	// object, while its attributes are trusted and unchanged (access.go).
	acc map[string]accessEntry

	// staleData: attributes seen since the last open showed the data
	// changed (nocto opens go by it).
	staleData bool

	// gone: the server called the handle stale (NFS3ERR_STALE or
	// BADHANDLE) and a new LOOKUP found no same object under another
	// handle. As the Linux client's stale inode, every later GETATTR and
	// READ through the node gives ESTALE; a path walk finds whatever has
	// the name now (a new node).
	gone bool

	// atimeStale: a READ went to the server since the attributes came,
	// so the server's atime has moved on. As the Linux client after a READ
	// (unless mounted noatime), the next stat asks the server even while
	// the attributes are trusted. A stat reaches this server as a GETATTR
	// naming no file; the kernel's own check of the size in the read and
	// write paths (once a direct write made it forget the attributes)
	// names the open file, and is answered from the trusted attributes as
	// the Linux client's read path would (FS.ioGetattrs): a reader that
	// also writes would otherwise pay a GETATTR call every few reads.
	atimeStale bool

	// In a private directory (see private.go): until when the name under
	// which this node was last given to the kernel is trusted by this
	// mount (the kernel itself is told 0).
	entryUntil time.Time

	// acls: the server's last answer of the object's POSIX ACLs, the
	// mount's only record of them (xattrs, and a directory's umask rule):
	// used while the attributes are trusted and show the answer's ctime,
	// which this mount's own changes of a directory carry over (aclAnswer,
	// xattr.go).
	acls aclAnswer
}

// newNode returns the node of the object of type typ with handle fh, with
// the file or directory state its type has.
func newNode(f *FS, fh nfs3.FileHandle, typ nfs3.FileType) *node {
	n := &node{fsys: f, fh: fh}
	switch typ {
	case nfs3.TypeReg:
		n.file = &fileState{n: n}
	case nfs3.TypeDir:
		n.dir = &dirState{n: n}
	}
	return n
}

var (
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeGetattrer      = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeReadlinker     = (*node)(nil)
	_ fs.NodeStatfser       = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeAllocater      = (*node)(nil)
)

// setAttr records attributes received at now; it reports whether the
// object's data changed since the previous ones.
func (n *node) setAttr(a *nfs3.Attr) (changed bool) {
	if a == nil {
		return false
	}
	lo, hi := n.fsys.acBounds(a.Type)
	n.mu.Lock()
	defer n.mu.Unlock()
	v := *a
	n.file.shown(&v, n.attrs.attr.Ctime)
	changed = n.attrs.update(v, n.fsys.now(), lo, hi)
	n.atimeStale = false
	if changed {
		n.dir.sawChangeLocked() // changed by someone: the names may be too
		n.staleData = true
	}
	return changed
}

// setWcc applies an operation's wcc_data: the post-operation attributes, or
// when the server sent none, the knowledge that the cached ones are stale.
func (n *node) setWcc(w *nfs3.WccData) {
	if w.After != nil {
		n.mu.Lock()
		n.carryAccessLocked(w) // the mount's own change (access.go)
		n.mu.Unlock()
		n.setAttr(w.After)
		return
	}
	n.invalidateAttr()
}

func (n *node) invalidateAttr() {
	n.fsys.events.add(evAttrInvalidate)
	n.mu.Lock()
	n.attrs.invalidate()
	n.mu.Unlock()
}

// getattr returns the object's attributes and how long they may be
// trusted: the cached ones while fresh, unless force, else the server's.
func (n *node) getattr(ctx context.Context, force bool) (nfs3.Attr, time.Duration, error) {
	if !force {
		n.mu.Lock()
		left, ok := n.attrs.fresh(n.fsys.now())
		a := n.attrs.attr
		n.file.floor(&a)
		n.mu.Unlock()
		if ok {
			return a, left, nil
		}
	}
	var a nfs3.Attr
	err := n.do(ctx, func(fh nfs3.FileHandle) (err error) {
		a, err = n.fsys.c.Getattr(ctx, fh)
		return err
	})
	if err != nil {
		return nfs3.Attr{}, 0, err
	}
	n.setAttr(&a)
	a, timeo := n.recorded()
	return a, timeo, nil
}

// recorded returns the attributes setAttr recorded last, as the kernel is
// to see them, and their timeout: the server's, with the size raised to
// the end of the WRITEs in flight and a deferred SETATTR's changes
// applied. Never the reply's own: a GETATTR that overtakes a write the
// kernel already made (a write gathered or behind, sent later) shows the
// file without it, and the kernel, told a smaller size, drops its cached
// pages past it and reads the file as that short.
func (n *node) recorded() (nfs3.Attr, time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	a := n.attrs.attr
	n.file.floor(&a)
	return a, n.attrs.timeo
}

// sameAccess reports whether attributes b leave the rights an ACCESS
// reply with attributes a granted as they were: the same ctime (the Linux
// client's change attribute for NFSv3), mode and owner.
func sameAccess(a, b *nfs3.Attr) bool {
	return a.Ctime == b.Ctime && a.Mode == b.Mode && a.UID == b.UID && a.GID == b.GID && a.Type == b.Type
}

// getattrByAccess is getattr for a caller's GETATTR of a regular file
// whose cached attributes went stale: an ACCESS with its credential,
// whose reply carries the attributes too. The caller's rights it learns
// answer an open that follows (a stat then an open; the kernel's exec
// re-reads the attributes first), and its attributes are that open's
// close-to-open revalidation (access.go): the open costs no call of its
// own. The kernel client sends a GETATTR and an ACCESS there. A reply
// without attributes, or an error other than a stale handle, falls back to
// a GETATTR.
func (n *node) getattrByAccess(ctx context.Context, force bool) (nfs3.Attr, time.Duration, error) {
	r, err := n.askAccess(ctx, true)
	var st nfs3.Status
	if err != nil && (isStale(err) || !errors.As(err, &st)) {
		// Stale, or no answer at all (a soft mount's timeout, an
		// interrupted call): a GETATTR after it would only wait as long
		// again, doubling what a soft mount's timeo×retrans promises.
		return nfs3.Attr{}, 0, err
	}
	if err != nil || r.Attr == nil {
		return n.getattr(ctx, force)
	}
	n.setAttr(r.Attr)
	a, timeo := n.recorded()
	return a, timeo, nil
}

// cached returns the cached attributes and their timeout, fresh or not.
func (n *node) cached() (nfs3.Attr, time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	left, _ := n.attrs.fresh(n.fsys.now())
	a := n.attrs.attr
	n.file.floor(&a)
	return a, max(left, 0)
}

// fillOut fills FUSE attributes from a, hiding the extra link an unlinked
// open file keeps under its .nfs name.
func (n *node) fillOut(out *fuse.Attr, a *nfs3.Attr) {
	fillAttr(out, a)
	if n.file.sillyRenamed() && out.Nlink > 0 {
		out.Nlink--
	}
}

// entryOut fills a LOOKUP-style reply for child, found in directory n.
func (n *node) entryOut(child *node, out *fuse.EntryOut) {
	a, timeo := child.cached()
	child.fillOut(&out.Attr, &a)
	out.SetAttrTimeout(timeo)
	_, dirTimeo := n.cached()
	if n.fsys.opts.LookupCache == LookupCacheNone {
		dirTimeo = 0 // every path walk asks the server
	}
	if n.private() {
		// The kernel's entry expires at once, so that every path walk
		// through n comes to Lookup with its caller; this mount trusts
		// it for the usual time (see private.go).
		child.mu.Lock()
		child.entryUntil = n.fsys.now().Add(dirTimeo)
		child.mu.Unlock()
		dirTimeo = 0
	}
	out.SetEntryTimeout(dirTimeo)
}

// child returns the node for the object fh with attributes a, found in n
// under name: the node already known there if it has the same handle, else
// a new one (go-fuse merges it with any node of the same identity).
//
// unchanged reports that the node was known and its data did not change.
func (n *node) child(ctx context.Context, name string, fh nfs3.FileHandle, a *nfs3.Attr) (c *node, unchanged bool) {
	if name != "" {
		if in := n.GetChild(name); in != nil {
			if c, ok := in.Operations().(*node); ok && bytes.Equal(c.handle(), fh) {
				return c, !c.setAttr(a)
			}
		}
	}
	c = newNode(n.fsys, fh, a.Type)
	c.setAttr(a)
	n.NewInode(ctx, c, fs.StableAttr{Mode: typeMode(a.Type), Ino: ino(a.FileID), Gen: generation(fh)})
	return c, false
}

// lookupAttr returns the attributes of fh: a when the server sent them, else
// a GETATTR's.
func (n *node) lookupAttr(ctx context.Context, fh nfs3.FileHandle, a *nfs3.Attr) (*nfs3.Attr, error) {
	if a != nil {
		return a, nil
	}
	got, err := n.fsys.c.Getattr(ctx, fh)
	if err != nil {
		return nil, err
	}
	return &got, nil
}

// plusLookup answers a LOOKUP of name from a listing's entry e: READDIRPLUS
// just answered it (ls -l, a shell's glob, listing.go), so no LOOKUP.
func (n *node) plusLookup(ctx context.Context, name string, e plusEntry, out *fuse.EntryOut) *fs.Inode {
	c, unchanged := n.child(ctx, name, e.fh, &e.attr)
	c.mu.Lock()
	c.lookupChanged = c.lookupChanged || !unchanged
	c.mu.Unlock()
	n.entryOut(c, out)
	return c.EmbeddedInode()
}

// Lookup implements fs.NodeLookuper with LOOKUP (RFC 1813 §3.3.3).
func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := n.fsys.checkName(name); errno != 0 {
		return nil, errno
	}
	d := n.dir
	if d == nil {
		return nil, syscall.ENOTDIR // not reached: the kernel looks up in directories only
	}
	// askServer: the caller's search of a private directory is not
	// known; the server decides (see private.go).
	priv, askServer := n.private(), false
	if priv {
		var c *fs.Inode
		var errno syscall.Errno
		var done bool
		c, errno, askServer, done = n.privateLookup(name, n.fsys.accessKeyOf(ctx), out)
		if done {
			return c, errno
		}
	}
	if left, ok := d.knownAbsent(name); ok && !askServer {
		// This mount knows every name of the directory (see names.go).
		if priv {
			left = 0
		}
		out.SetEntryTimeout(left)
		return nil, syscall.ENOENT
	}
	if n.GetChild(name) != nil {
		n.fsys.events.add(evDentryRevalidate)
	}
	ctx, done := n.fsys.callCtx(ctx)
	defer done()
	if e, ok := d.takePlus(name); ok && !askServer {
		return n.plusLookup(ctx, name, e, out), 0
	}
	if !askServer && d.listForLookup() {
		// The directory's LOOKUPs have cost what reading all of it
		// does (listing.go): read it, and answer this one from it if
		// it has the name.
		d.listAll(ctx)
		if e, ok := d.takePlus(name); ok {
			return n.plusLookup(ctx, name, e, out), 0
		}
	}
	if err, ok := d.takeUnanswered(name); ok {
		return nil, toErrno(err)
	}
	var r nfs3.LookupResult
	err := n.do(ctx, func(dir nfs3.FileHandle) (err error) {
		r, err = n.fsys.c.Lookup(ctx, dir, name)
		return err
	})
	d.noteUnanswered(name, err)
	n.setAttr(r.DirAttr)
	if priv {
		n.learnSearch(ctx, err)
	}
	n.learnRefused(ctx, err)
	if err != nil {
		if errno := toErrno(err); errno != syscall.ENOENT {
			return nil, errno
		}
		// A negative entry, trusted as long as the directory
		// (lookupcache=all); by the kernel not at all in a private
		// directory (this mount keeps it: knownAbsent).
		if n.fsys.negativeCache() {
			d.sawMissing(name)
			_, dirTimeo := n.cached()
			if priv {
				dirTimeo = 0
			}
			out.SetEntryTimeout(dirTimeo)
		}
		return nil, syscall.ENOENT
	}
	d.sawName(name)
	if !askServer {
		d.foundByLookup()
	}
	a, err := n.lookupAttr(ctx, r.FH, r.Attr)
	if err != nil {
		return nil, toErrno(err)
	}
	c, unchanged := n.child(ctx, name, r.FH, a)
	c.mu.Lock()
	c.lookupChanged = c.lookupChanged || !unchanged
	c.mu.Unlock()
	n.entryOut(c, out)
	return c.EmbeddedInode(), 0
}

// Getattr implements fs.NodeGetattrer: the cached attributes while fresh,
// else GETATTR (RFC 1813 §3.3.1).
func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if !n.fsys.ioGetattr(ctx) && n.file.writesPending() {
		// A stat sees the writes made so far: the kernel client sends
		// them before its GETATTR (nfs_getattr), so that the server's
		// modification and change times are the stat's. Here the
		// WRITEs' replies bring them (wcc_data). Not for FUSE's own
		// GETATTR ahead of a read (ioGetattr).
		n.file.drainWriteBehind()
	}
	n.mu.Lock()
	if n.gone {
		n.mu.Unlock()
		return syscall.ESTALE
	}
	left, fresh := n.attrs.fresh(n.fsys.now())
	viaFile := n.fsys.ioGetattr(ctx)
	force := n.atimeStale && !viaFile
	a0 := n.attrs.attr
	n.file.floor(&a0)
	n.mu.Unlock()
	if fresh && !force {
		// Answered from the cache: no call, no call context.
		n.fillOut(&out.Attr, &a0)
		out.SetTimeout(left)
		return 0
	}
	byAccess := !fresh && !viaFile && a0.Type == nfs3.TypeReg && callerPid(ctx) != 0 && n.fsys.opts.CallerIdentity
	ctx, done := n.fsys.callCtx(ctx)
	defer done()
	var a nfs3.Attr
	var timeo time.Duration
	var err error
	if byAccess {
		// Timed out: an ACCESS, whose rights answer an open that
		// follows (see getattrByAccess). A stat after a READ (force) is
		// a GETATTR.
		a, timeo, err = n.getattrByAccess(ctx, force)
	} else {
		a, timeo, err = n.getattr(ctx, force)
	}
	if err != nil {
		// Gone from the server (removed or renamed over by another
		// client): ESTALE, open or not, as the Linux client's
		// revalidation gives once the attribute cache times out. (A file
		// this mount unlinks while open lives on under its .nfs name.)
		n.markGone(err)
		return toErrno(err)
	}
	n.fillOut(&out.Attr, &a)
	out.SetTimeout(timeo)
	return 0
}

// ioGetattr reports whether the GETATTR of ctx came through an open file
// (see node.atimeStale).
func (f *FS) ioGetattr(ctx context.Context) bool {
	fc, ok := ctx.(*fuse.Context)
	if !ok || fc.Cancel == nil {
		return false
	}
	_, io := f.ioGetattrs.Load(fc.Cancel)
	return io
}

// Setattr implements fs.NodeSetattrer with SETATTR (RFC 1813 §3.3.2): chmod,
// chown, truncate and utimens.
//
// A SETATTR through an open file (the kernel gives FUSE the handle for an
// ftruncate, as it gives the NFS client the file: ATTR_FILE) carries the
// opener's credential, as the kernel client's does.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	caller, _ := fuse.FromContext(ctx)
	var done context.CancelFunc
	if of, ok := f.(*openFile); ok {
		ctx, done = of.callCtx(ctx)
	} else {
		ctx, done = n.fsys.callCtx(ctx)
	}
	defer done()
	if n.fsys.opts.ReadOnly {
		return syscall.EROFS
	}
	var s nfs3.SetAttr
	if m, ok := in.GetMode(); ok {
		s.Mode = new(m & 0o7777)
	}
	if uid, ok := in.GetUID(); ok {
		s.UID = new(uid)
	}
	if gid, ok := in.GetGID(); ok {
		s.GID = new(gid)
	}
	size, truncate := in.GetSize()
	if truncate {
		s.Size = new(size)
	}
	s.Atime = setTime(in.Valid, fuse.FATTR_ATIME, fuse.FATTR_ATIME_NOW, in.Atime, in.Atimensec)
	s.Mtime = setTime(in.Valid, fuse.FATTR_MTIME, fuse.FATTR_MTIME_NOW, in.Mtime, in.Mtimensec)
	if s == (nfs3.SetAttr{}) {
		return n.Getattr(ctx, f, out)
	}
	if of, ok := f.(*openFile); truncate && (!ok || of.flags&syscall.O_ACCMODE == syscall.O_RDONLY) {
		// truncate(2) by path, or O_TRUNC on a descriptor opened for
		// reading: the caller must be allowed to write, as the server
		// says (access.go). (ftruncate(2) needs a descriptor open for
		// writing, which the open checked.)
		if _, errno := n.checkAccess(ctx, mayWrite, false); errno != 0 {
			return errno
		}
	}
	if a, timeo, ok := n.file.deferSetattr(ctx, caller, s); ok {
		n.fillOut(&out.Attr, &a)
		out.SetTimeout(timeo)
		return 0
	}
	// One deferred before goes first.
	if err := n.file.flushDeferred(); err != nil {
		return toErrno(err)
	}
	// Writes behind land first: a later one would undo a truncation or
	// an explicit mtime. Gathered writes that are all the file's unsaved
	// data go FILE_SYNC (as the Linux client flushes a file before
	// SETATTR): tar's chown, chmod and utimes then leave no COMMIT to
	// close.
	if synced, err := n.file.syncPend(ctx); synced && err != nil {
		return toErrno(err)
	}
	n.file.drainWriteBehind()
	if truncate {
		// Writes still uncommitted must not be resent over the truncation.
		if err := n.file.commitDirty(ctx); err != nil {
			return toErrno(err)
		}
	}
	wasPrivate := n.private()
	var w nfs3.WccData
	err := n.do(ctx, func(fh nfs3.FileHandle) (err error) {
		w, err = n.fsys.c.Setattr(ctx, fh, s, nil)
		return err
	})
	defer func() {
		if s.Mode != nil && !wasPrivate && n.private() {
			go n.expireEntries()
		}
	}()
	if truncate {
		n.file.changedData()
	}
	if s.Mode != nil {
		n.forgetACLs() // a chmod changes the access ACL (xattr.go)
	}
	if err != nil {
		n.setWcc(&w)
		return toErrno(err)
	}
	if w.After == nil {
		n.invalidateAttr()
		return n.Getattr(ctx, f, out)
	}
	n.setAttr(w.After)
	a, timeo := n.cached()
	n.fillOut(&out.Attr, &a)
	out.SetTimeout(timeo)
	return 0
}

// setTime converts one FUSE time of SETATTR to set_atime / set_mtime.
func setTime(valid, bit, now uint32, sec uint64, nsec uint32) nfs3.SetTime {
	switch {
	case valid&bit == 0:
		return nfs3.SetTime{}
	case valid&now != 0:
		return nfs3.SetTime{How: nfs3.SetToServerTime}
	}
	// FUSE carries the kernel's signed seconds as 64 bits; NFSv3 has
	// unsigned 32-bit seconds: clamp as the Linux client does.
	return nfs3.SetTime{How: nfs3.SetToClientTime, Time: nfs3.TimeOfUnix(int64(sec), int64(nsec))}
}

// Readlink implements fs.NodeReadlinker with READLINK (RFC 1813 §3.3.5).
func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	ctx, done := n.fsys.callCtx(ctx)
	defer done()
	var r nfs3.ReadlinkResult
	err := n.do(ctx, func(fh nfs3.FileHandle) (err error) {
		r, err = n.fsys.c.Readlink(ctx, fh)
		return err
	})
	n.setAttr(r.Attr)
	if err != nil {
		return nil, toErrno(err)
	}
	return []byte(r.Target), 0
}

// Statfs implements fs.NodeStatfser with FSSTAT (RFC 1813 §3.3.18).
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	ctx, done := n.fsys.callCtx(ctx)
	defer done()
	var r nfs3.FSStat
	err := n.do(ctx, func(fh nfs3.FileHandle) (err error) {
		r, err = n.fsys.c.Fsstat(ctx, fh)
		return err
	})
	if err != nil {
		return toErrno(err)
	}
	const bsize = 4096
	out.Bsize, out.Frsize = bsize, bsize
	out.Blocks = r.TotalBytes / bsize
	out.Bfree = r.FreeBytes / bsize
	out.Bavail = r.AvailBytes / bsize
	out.Files, out.Ffree = r.TotalFiles, r.FreeFiles
	out.NameLen = n.fsys.nameMax
	return 0
}

// Fsync implements fs.NodeFsyncer: COMMIT (RFC 1813 §3.3.21) of the file's
// UNSTABLE writes. Directories have nothing to sync: NFSv3 directory
// operations are synchronous.
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	if of, ok := f.(*openFile); ok {
		// go-fuse asks the node first: the open file's (its lock, its
		// opener's credential, a deferred SETATTR).
		return of.Fsync(ctx, flags)
	}
	ctx, done := n.fsys.callCtx(ctx)
	defer done()
	return toErrno(n.file.commitDirty(ctx))
}

// Allocate implements fs.NodeAllocater: NFSv3 cannot preallocate.
func (n *node) Allocate(ctx context.Context, f fs.FileHandle, off, size uint64, mode uint32) syscall.Errno {
	return syscall.EOPNOTSUPP
}
