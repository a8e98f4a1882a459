package fusefs

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nfsrdma/nfsrdma/nfs3"
)

// The creator's umask and a directory's default POSIX ACL.
//
// The Linux client's NFSv3 superblock has POSIX ACLs (through the NFSACL
// side protocol): at CREATE, MKDIR and MKNOD it looks for the parent
// directory's default ACL and, if there is one, leaves the umask out of the
// mode it sends (the server's file system then gives the new object the
// mode and ACL that inheritance gives, acl(5)); if there is none, it
// applies the umask itself. With nfs(5) noacl, or when the server has no
// NFSACL, it always applies the umask.
//
// The FUSE kernel module does the same split: its superblock has POSIX
// ACLs, and a server that asks for FUSE_DONT_MASK (FUSEOptions) gets the
// requested mode unmasked with the caller's umask beside it. rawFS keeps
// that umask for the request (FS.umasks, by the request's cancel channel)
// and node.newMode decides here, with the directory's default ACL asked
// once (GETACL) and cached with the directory's attributes.

// defaultACLs caches, per directory, whether it has a default ACL: the
// answer holds while the directory's ctime is the one it was given with
// and for the directory's attribute timeout from then (the Linux client
// keeps ACLs with the inode and drops them when the ctime changes). Its
// mutex guards the map.
type defaultACLs struct {
	mu sync.Mutex
	m  map[string]defaultACL // by file handle
}

// defaultACL is one directory's answer.
type defaultACL struct {
	has   bool      // the directory has a default ACL
	ctime nfs3.Time // the directory's ctime when it was asked
	until time.Time // the directory's attribute timeout then
}

// maxDefaultACLs bounds the cache; past it, expired answers are dropped,
// and all of them if none had.
const maxDefaultACLs = 4096

func (c *defaultACLs) get(fh nfs3.FileHandle, ctime nfs3.Time, now time.Time) (has, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, found := c.m[string(fh)]
	if !found || e.ctime != ctime || !now.Before(e.until) {
		return false, false
	}
	return e.has, true
}

func (c *defaultACLs) put(fh nfs3.FileHandle, e defaultACL, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]defaultACL)
	}
	if len(c.m) >= maxDefaultACLs {
		for k, old := range c.m {
			if !now.Before(old.until) {
				delete(c.m, k)
			}
		}
		if len(c.m) >= maxDefaultACLs {
			clear(c.m)
		}
	}
	c.m[string(fh)] = e
}

// changedBy carries fh's answer over a change the mount made itself: the
// directory's ctime moved from its pre-operation value (w.Before's, or
// the cached one's, cached, when the reply has none) to w.After's by this
// client's own operation, which does not change the default ACL (as the
// Linux client keeps its cached ACL across its own changes).
func (c *defaultACLs) changedBy(fh nfs3.FileHandle, cached *nfs3.Attr, w *nfs3.WccData) {
	if w.After == nil {
		return
	}
	before := cached.Ctime
	if w.Before != nil {
		before = w.Before.Ctime
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[string(fh)]; ok && e.ctime == before {
		e.ctime = w.After.Ctime
		c.m[string(fh)] = e
	}
}

// umaskOf returns the umask of the FUSE request of ctx, when the kernel
// sent it for rawFS to apply (FUSE_DONT_MASK).
func (f *FS) umaskOf(ctx context.Context) (uint32, bool) {
	fc, ok := ctx.(*fuse.Context)
	if !ok || fc.Cancel == nil {
		return 0, false
	}
	v, ok := f.umasks.Load(fc.Cancel)
	if !ok {
		return 0, false
	}
	return v.(uint32), true
}

// newMode returns the mode to send for an object made in n with the
// requested mode and the creator's umask (known: the kernel left it to
// us): the mode as requested when n has a default ACL, else without the
// umask's bits. ctx is the request's call context.
func (n *node) newMode(ctx context.Context, mode, umask uint32, known bool) (uint32, error) {
	mode &= 0o7777
	if !known || mode&umask == 0 {
		return mode, nil // the umask changes nothing: no need to ask
	}
	has, err := n.hasDefaultACL(ctx)
	if err != nil {
		return 0, err
	}
	if has {
		return mode, nil
	}
	return mode &^ umask, nil
}

// hasDefaultACL reports whether directory n has a default ACL: false with
// noacl or a server without NFSACL, else the cached answer or GETACL's.
// Other failures of GETACL are the creation's, as on the Linux client.
func (n *node) hasDefaultACL(ctx context.Context) (bool, error) {
	f := n.fsys
	if f.opts.NoACL || f.noACLProgram.Load() {
		return false, nil
	}
	n.mu.Lock()
	ctime, valid := n.attrs.attr.Ctime, n.attrs.valid
	n.mu.Unlock()
	fh := n.handle()
	if valid {
		if has, ok := f.defaultACLs.get(fh, ctime, f.now()); ok {
			return has, nil
		}
	}
	var r nfs3.GetACLResult
	err := n.do(ctx, func(fh nfs3.FileHandle) (err error) {
		r, err = f.c.GetACL(ctx, fh, nfs3.ACLDefault|nfs3.ACLDefaultCount)
		return err
	})
	switch {
	case nfs3.NoACLProgram(err):
		if !f.noACLProgram.Swap(true) {
			f.log.Info("the server has no NFSACL: the creator's umask applies to every new file, as with noacl", "err", err)
		}
		return false, nil
	case errors.Is(err, nfs3.ErrNotSupp):
		// The export's file system has no ACLs.
		r = nfs3.GetACLResult{Attr: r.Attr}
	case err != nil:
		return false, err
	}
	n.setAttr(r.Attr)
	now := f.now()
	n.mu.Lock()
	e := defaultACL{has: r.Default.Count > 0, ctime: n.attrs.attr.Ctime, until: n.attrs.at.Add(n.attrs.timeo)}
	if r.Attr == nil {
		e.until = now.Add(n.attrs.timeo)
	}
	n.mu.Unlock()
	f.defaultACLs.put(n.handle(), e, now)
	return e.has, nil
}
