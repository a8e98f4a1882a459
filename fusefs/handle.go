package fusefs

import (
	"bytes"
	"context"
	"errors"
	"io"
	"syscall"

	"github.com/nfsrdma/nfsrdma/nfs3"
)

// handle returns n's current file handle.
func (n *node) handle() nfs3.FileHandle {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.fh
}

// do runs op with n's file handle. A handle the server calls stale stays
// stale, as the Linux client's inode does (it never changes the handle of
// an inode): the error stands, and a path walk finds whatever has the name
// now as a new node (child). Looking the name up again and adopting what
// has the same fileid and type would move an open descriptor onto another
// file: ext4 and xfs give a new file the inode number of one just removed,
// and a write through the descriptor of a file another client replaced
// would land in its successor.
//
// One exception, an object this mount moved itself: the file it renamed to
// its .nfs name (sillyRename), which no one else names. A server whose
// handles follow paths (go-nfs and other user-space servers; the Linux
// server exporting with subtree_check, across directories) gives it a new
// handle there; the object under that name is the one this mount put
// there, and it adopts that handle (refresh). The Linux server with its
// default no_subtree_check never changes a handle, and a stale one there
// means the .nfs file itself was removed.
func (n *node) do(ctx context.Context, op func(fh nfs3.FileHandle) error) error {
	fh := n.handle()
	err := op(fh)
	if !isStale(err) {
		return err
	}
	if nfh, ok := n.refresh(ctx, fh); ok {
		return op(nfh)
	}
	return err
}

func isStale(err error) bool {
	return errors.Is(err, nfs3.ErrStale) || errors.Is(err, nfs3.ErrBadHandle)
}

// refresh looks up the .nfs name of n, silly renamed by this mount, and
// adopts the new handle of the same object there (see do). Any other node
// keeps its handle.
func (n *node) refresh(ctx context.Context, old nfs3.FileHandle) (nfs3.FileHandle, bool) {
	n.mu.Lock()
	if !bytes.Equal(n.fh, old) { // another call refreshed it meanwhile
		fh := n.fh
		n.mu.Unlock()
		return fh, true
	}
	want := n.attrs.attr
	n.mu.Unlock()
	silly, ok := n.file.sillyNamed()
	if !ok {
		return nil, false
	}
	dir, name := silly.parent, silly.name
	var r nfs3.LookupResult
	err := dir.do(ctx, func(dfh nfs3.FileHandle) (err error) {
		r, err = n.fsys.c.Lookup(ctx, dfh, name)
		return err
	})
	if err != nil {
		return nil, false
	}
	a, err := dir.lookupAttr(ctx, r.FH, r.Attr)
	if err != nil || a.FileID != want.FileID || a.Type != want.Type {
		return nil, false
	}
	n.mu.Lock()
	n.fh = r.FH
	n.mu.Unlock()
	n.setAttr(a)
	n.fsys.log.Debug("file handle refreshed", "name", name, "fileid", a.FileID)
	return r.FH, true
}

// readAt reads len(p) bytes at off with pipelined READs (RFC 1813 §3.3.6;
// a request of at most rsize runs in the caller's goroutine: nfs3's
// ReadAt); n < len(p) comes with io.EOF when the file ends first.
func (n *node) readAt(ctx context.Context, p []byte, off int64) (int, error) {
	var m int
	err := n.do(ctx, func(fh nfs3.FileHandle) (err error) {
		m, err = n.fsys.c.ReadAt(ctx, fh, p, off)
		return err
	})
	if (err == nil || err == io.EOF) && !n.fsys.noAtime.Load() {
		n.mu.Lock()
		n.atimeStale = true
		n.mu.Unlock()
	}
	return m, err
}

// markGone records that err, the result of a call with n's handle after
// do's refresh, says n's object is gone from the server (see node.gone).
// The kernel's cached pages are left alone: past the attribute timeout it
// asks for the attributes before a read (FUSE auto_inval_data), and gets
// ESTALE then, as the Linux client does.
func (n *node) markGone(err error) {
	if !isStale(err) {
		return
	}
	n.mu.Lock()
	was := n.gone
	n.gone = true
	fileid := n.attrs.attr.FileID
	n.mu.Unlock()
	if !was {
		n.fsys.log.Debug("file handle stale: the object is gone from the server", "fileid", fileid)
	}
}

// isGone reports whether n's object is known gone from the server.
func (n *node) isGone() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.gone
}

// forgetIfStale drops the kernel's dentry of n when err says n's object is
// gone from the server (another client, or a rename over it, removed it),
// so that the next path walk looks the name up again and finds the object
// that has it now (the VFS retries an open that failed with ESTALE once).
// Only for calls during which the kernel holds no directory lock (open):
// the invalidation takes the parent's.
func (n *node) forgetIfStale(err error) {
	if !isStale(err) {
		return
	}
	name, parent := n.Parent()
	if parent == nil {
		return
	}
	if errno := parent.NotifyEntry(name); errno != 0 && errno != syscall.ENOENT {
		n.fsys.log.Debug("invalidating the entry of a stale handle", "name", name, "errno", errno)
	}
}
