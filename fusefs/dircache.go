package fusefs

import (
	"bytes"
	"context"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nfsrdma/nfsrdma/nfs3"
)

// The kernel's cache of a directory's listing (FUSE's FOPEN_CACHE_DIR).
//
// An open directory whose listing the kernel has kept is listed from that
// copy, with no READDIRPLUS request and no call: GNU rm -rf opens every
// directory twice (once to see whether it is empty, once to read it), ls
// and shells' completion list the same directory again and again. The
// kernel's NFS client keeps a directory's listing the same way, in its page
// cache. The kernel checks its copy against the directory when a reader
// starts at the beginning: any change this mount makes to the directory
// (create, remove, rename...) drops it, and so does a change of the
// directory's modification time, which it re-reads once its attributes
// have timed out, as the NFS client revalidates its copy.
//
// A copy is kept for opens within plusFresh of the READDIRPLUS that began
// it, not for as long as the directory is unchanged: a listing from the
// copy brings no attributes, where one from the server brings every
// entry's, so a later ls -l from an old copy would cost a GETATTR per entry
// whose attributes timed out, instead of one READDIRPLUS for all. An older
// copy is dropped at the next open, which fills a new one.
//
// Not kept with lookupcache=none, noac or actimeo=0 (every listing asks the
// server). Every opener of the directory has been let read it by the
// server first (OpendirHandle), as the Linux client checks the opener's
// ACCESS before it lists from its cache.

// listCacheFlags returns the open flags of a directory opened by the FUSE
// request of ctx: the kernel's listing cache kept and used
// (FOPEN_CACHE_DIR|FOPEN_KEEP_CACHE), or dropped (0).
func (n *node) listCacheFlags(ctx context.Context) uint32 {
	f := n.fsys
	if f.plusFresh() <= 0 || f.opts.LookupCache == LookupCacheNone {
		return 0
	}
	now := f.now()
	d := n.dir
	d.mu.Lock()
	old := !d.listCachedAt.IsZero() && now.Sub(d.listCachedAt) >= f.plusFresh()
	if old {
		d.listCachedAt = time.Time{}
	}
	d.mu.Unlock()
	if old {
		// The kernel's copy is too old: dropped, so that this open
		// fills a new one from the server. The directory's attributes
		// go too, and come back from this mount's cache.
		if errno := n.NotifyContent(0, 0); errno != 0 {
			f.log.Debug("dropping the kernel's listing of a directory", "errno", errno)
			return 0
		}
	}
	return fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE
}

// listCacheFilling records that a handle opened for the kernel's listing
// cache is reading the directory from its start, from a reply that came
// at: the kernel fills its copy from what it reads.
func (d *dirState) listCacheFilling(at time.Time) {
	d.mu.Lock()
	d.listCachedAt = at
	d.mu.Unlock()
}

// The mount's own copy of a directory's READDIRPLUS replies (keptListing).
//
// The kernel's copy is complete, and used, only once a reader has read the
// listing to its end. GNU rm -rf's first open of a directory reads one
// FUSE page, to see whether it is empty, and closes it: the kernel's copy
// stays incomplete, and the second open, which reads it all, would ask the
// server again for a directory that has not changed (two READDIRPLUS calls
// for every directory rm removes; the kernel client answers the second
// from its page cache). So the replies a handle opened for the kernel's
// copy got from the server are kept on the directory, and the next such
// handle to read from the start reads them, page by page as the server
// sent them (with their cookies and verifier), instead of calling: while
// they are within plusFresh of the first page, the directory's cached
// size, mtime and ctime are still those that page carried, and this mount
// changed nothing in it (any create, remove or rename drops them, as it
// drops the kernel's copy). A page not kept is read from the server and
// added.
//
// The entries' attributes are those of the reply. A file this mount knows
// whose attributes it learned after the reply (a write, a chmod through
// the mount) keeps its own: a kept page never takes them back in time.
//
// Kept listings are bounded for the whole mount (maxKeptDirs directories,
// maxKeptEntries entries, oldest dropped first): they serve a second open
// soon after the first, not a cache of the tree.

// keptListing is the start of a directory's listing as READDIRPLUS replies
// brought it.
type keptListing struct {
	at      time.Time // when the first page came
	dir     nfs3.Attr // the directory's attributes the first page carried
	pages   map[nfs3.Cookie]keptPage
	entries int
}

// keptPage is one READDIRPLUS reply, by the cookie it was asked at.
type keptPage struct {
	entries []nfs3.DirEntryPlus
	eof     bool
	verf    nfs3.CookieVerf
	at      time.Time
}

const (
	maxKeptDirs    = 64
	maxKeptEntries = 1 << 15
)

// keptLists is the mount's kept listings' pages, oldest first.
type keptLists struct {
	mu      sync.Mutex
	q       []keptRef
	entries int // in q
	dirs    int // listings begun in q
}

type keptRef struct {
	d       *dirState
	l       *keptListing
	entries int
	first   bool // the page at cookie 0: it began l
}

// add counts k more entries kept in directory d's listing l (first: its
// first page), dropping the oldest listings, and those too old to be read,
// to make room; it reports whether there is room. No node's or
// directory's mu is held (kl.mu is taken before a dirState's).
func (kl *keptLists) add(d *dirState, l *keptListing, k int, first bool, now time.Time, fresh time.Duration) bool {
	if k > maxKeptEntries {
		return false
	}
	kl.mu.Lock()
	defer kl.mu.Unlock()
	for len(kl.q) > 0 {
		old := kl.q[0]
		full := kl.entries+k > maxKeptEntries || (first && kl.dirs >= maxKeptDirs)
		if !full && now.Sub(old.l.at) < fresh {
			break
		}
		kl.q[0] = keptRef{}
		kl.q = kl.q[1:]
		kl.entries -= old.entries
		if old.first {
			kl.dirs--
		}
		old.d.dropKept(old.l)
	}
	kl.q = append(kl.q, keptRef{d: d, l: l, entries: k, first: first})
	kl.entries += k
	if first {
		kl.dirs++
	}
	return true
}

// dropKept forgets the kept listing if it is l (a page of it was dropped).
func (d *dirState) dropKept(l *keptListing) {
	d.mu.Lock()
	if d.kept == l {
		d.kept = nil
	}
	d.mu.Unlock()
}

// keptPage returns the kept page of d's directory that starts at cookie,
// for handle d opened for the kernel's copy. A page at cookie 0 makes d a
// reader of the kept listing; pages after it are d's only if it is.
func (d *dirHandle) keptPage(cookie nfs3.Cookie) (keptPage, bool) {
	n, ds := d.n, d.n.dir
	now := n.fsys.now()
	n.mu.Lock()
	defer n.mu.Unlock()
	ds.mu.Lock()
	defer ds.mu.Unlock()
	l := ds.kept
	if l == nil {
		return keptPage{}, false
	}
	if now.Sub(l.at) >= n.fsys.plusFresh() || dataChanged(&l.dir, &n.attrs.attr) {
		ds.kept = nil
		return keptPage{}, false
	}
	if cookie == 0 {
		d.kept = l
	} else if d.kept != l {
		return keptPage{}, false
	}
	p, ok := l.pages[cookie]
	return p, ok
}

// keepPage keeps the READDIRPLUS reply r that handle d asked for at cookie:
// at cookie 0 it begins the directory's kept listing, after that it adds
// to the listing d began or reads.
func (d *dirHandle) keepPage(cookie nfs3.Cookie, r *nfs3.ReaddirplusResult) {
	ds, f := d.n.dir, d.n.fsys
	now := f.now()
	var l *keptListing
	if cookie == 0 {
		if r.DirAttr == nil {
			return // nothing to check the directory against
		}
		l = &keptListing{at: now, dir: *r.DirAttr, pages: make(map[nfs3.Cookie]keptPage)}
	} else {
		ds.mu.Lock()
		l = d.kept
		if l == nil || ds.kept != l {
			ds.mu.Unlock()
			return
		}
		ds.mu.Unlock()
	}
	k := max(len(r.Entries), 1)
	if !f.kept.add(ds, l, k, cookie == 0, now, f.plusFresh()) {
		return
	}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if cookie == 0 {
		ds.kept, d.kept = l, l
	} else if ds.kept != l {
		return
	}
	l.pages[cookie] = keptPage{entries: r.Entries, eof: r.EOF, verf: r.Verf, at: now}
	l.entries += k
}

// newerAttrs reports whether name in d's directory is a node with handle fh
// whose attributes are not to be replaced by those of a kept page that
// came at t: learned since, or forgotten (invalidated) meanwhile.
func (d *dirHandle) newerAttrs(name string, fh nfs3.FileHandle, t time.Time) (*node, bool) {
	in := d.n.GetChild(name)
	if in == nil {
		return nil, false
	}
	c, ok := in.Operations().(*node)
	if !ok || !bytes.Equal(c.handle(), fh) {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c, !c.attrs.valid || !c.attrs.at.Before(t)
}
