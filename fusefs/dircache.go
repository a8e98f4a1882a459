package fusefs

import (
	"context"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
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
// server), nor for root in a directory others may not read while the
// server may squash root (private.go): a squashed root is refused there,
// and would otherwise read the names another user's listing left.

// listCacheFlags returns the open flags of a directory opened by the FUSE
// request of ctx: the kernel's listing cache kept and used
// (FOPEN_CACHE_DIR|FOPEN_KEEP_CACHE), or dropped (0).
func (n *node) listCacheFlags(ctx context.Context) uint32 {
	f := n.fsys
	if f.plusFresh() <= 0 || f.opts.LookupCache == LookupCacheNone {
		return 0
	}
	now := f.now()
	n.mu.Lock()
	mode, fsid := n.attrs.attr.Mode, n.attrs.attr.FSID
	old := !n.listCachedAt.IsZero() && now.Sub(n.listCachedAt) >= f.plusFresh()
	if old {
		n.listCachedAt = time.Time{}
	}
	n.mu.Unlock()
	if f.shared && f.rootCalls(ctx) && mode&0o004 == 0 && !f.squash.unsquashed(fsid, now) {
		return 0 // the kernel drops its copy: no FOPEN_KEEP_CACHE
	}
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
// cache is reading the directory from its start: the kernel fills its copy
// from what it reads.
func (n *node) listCacheFilling() {
	now := n.fsys.now()
	n.mu.Lock()
	n.listCachedAt = now
	n.mu.Unlock()
}
