package fusefs

import (
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
)

// A directory's names: when this mount made a directory (MKDIR), it knows
// all the names in it (none), and every change it makes there keeps that
// knowledge exact as long as the reply's pre-operation attributes (wcc
// before) match the attributes cached: no other client changed the
// directory in between. A reply without pre-operation attributes is taken
// as this mount's change alone, as the Linux client takes it (its
// "force_wcc"). Attributes that show any other change (a GETATTR, LOOKUP or
// READDIRPLUS seeing a new mtime, size or ctime, a mismatched wcc before)
// end the knowledge for good.
//
// A name it does not hold is missing without a LOOKUP for a moment only:
// namesFresh (a second at most) after the server last showed the
// directory's state (attributes fetched, or this mount's own change with
// a matching wcc before), and the kernel is told so for no longer. The
// kernel's lookup before a mkdir, create or rename target then costs no
// round trip (the Linux client skips the LOOKUP of a name it is about to
// create, and FUSE does not say why it looks a name up): tar -x and cp -r
// make each name soon after the one before. A name never looked up has no
// negative entry on the Linux client, which asks the server for it: past
// that moment, so does this mount, and a name another client made in a
// directory this mount made is found as soon as on the Linux client
// (within the second otherwise). lookupcache=pos and none turn it off, and
// noac (no fresh attributes) never uses it.

//
// Names a LOOKUP found missing are kept (neg) while the directory's
// attributes are fresh, as the Linux client trusts a negative dentry
// (nfs(5) lookupcache=all): they answer the kernel's LOOKUPs of a rename
// target or a mkdir or exclusive create, which FUSE sends even over a
// negative dentry it holds, where the Linux client would trust that
// dentry.

// maxNames bounds the names a directory keeps (beyond, it forgets them all).
const maxNames = 1 << 16

// maxNeg bounds the missing names a directory keeps.
const maxNeg = 1 << 12

// startNames records that directory n was just made by this mount: empty.
func (n *node) startNames() {
	if !n.fsys.negativeCache() {
		return
	}
	n.mu.Lock()
	n.names, n.namesOK = make(map[string]struct{}), true
	n.mu.Unlock()
}

// dropNamesLocked forgets n's names and missing names; n.mu is held.
func (n *node) dropNamesLocked() {
	n.names, n.namesOK, n.neg = nil, false, nil
}

// sawMissing notes that a LOOKUP found name missing from n.
func (n *node) sawMissing(name string) {
	if !n.fsys.negativeCache() {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.neg == nil {
		n.neg = make(map[string]struct{})
	} else if len(n.neg) >= maxNeg {
		clear(n.neg)
	}
	n.neg[name] = struct{}{}
}

// namesFresh is how long after the server last showed a directory's state
// its complete set of names answers for a name not in it (see above).
func (f *FS) namesFresh() time.Duration {
	return min(f.opts.AcDirMin, lookupFresh)
}

// knownAbsent reports whether name is known missing from directory n
// without asking the server, and for how long that may be trusted.
func (n *node) knownAbsent(name string) (time.Duration, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.fsys.now()
	left, fresh := n.attrs.fresh(now)
	if _, missing := n.neg[name]; missing || !fresh {
		return left, fresh && missing
	}
	if !n.namesOK {
		return 0, false
	}
	if _, ok := n.names[name]; ok {
		return 0, false
	}
	w := n.fsys.namesFresh() - now.Sub(n.attrs.at)
	if w <= 0 {
		return 0, false
	}
	return min(left, w), true
}

// sawName notes that a LOOKUP found name in n: if n's names lack it,
// they were wrong and go.
func (n *node) sawName(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, missing := n.neg[name]
	if _, ok := n.names[name]; missing || n.namesOK && !ok {
		n.dropNamesLocked()
	}
}

// nameChange is one change of a directory's names by an operation.
type nameChange struct {
	add, remove string
}

// dirChanged applies the wcc_data of an operation on directory n: when it
// succeeded and the wcc before shows the directory as cached (or is
// absent), the names it added or removed; then the post-operation
// attributes, which end the names' knowledge if they show a change that
// was not this operation's. A failed operation gives ok false.
func (n *node) dirChanged(w *nfs3.WccData, ok bool, changes ...nameChange) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.kept = nil // the listing changed (kept listings, dircache.go)
	own := false
	if (n.namesOK || n.neg != nil) && ok {
		if w.Before == nil || sameWcc(&n.attrs.attr, w.Before) {
			own = true
			for _, c := range changes {
				if c.remove != "" {
					delete(n.names, c.remove)
				}
				if c.add != "" {
					delete(n.neg, c.add)
					if n.namesOK {
						n.names[c.add] = struct{}{}
					}
				}
			}
			if len(n.names) > maxNames {
				n.dropNamesLocked()
			}
		} else {
			n.dropNamesLocked()
		}
	}
	if w.After == nil {
		n.attrs.invalidate()
		return
	}
	n.carryAccessLocked(w)                               // the mount's own change (access.go)
	n.fsys.defaultACLs.changedBy(n.fh, &n.attrs.attr, w) // likewise (acl.go)
	lo, hi := n.fsys.acBounds(w.After.Type)
	v := *w.After
	n.floorSize(&v)
	if n.attrs.update(v, n.fsys.now(), lo, hi) && !own {
		n.dropNamesLocked()
	}
}

// sameWcc reports whether pre-operation attributes b are those of a.
func sameWcc(a *nfs3.Attr, b *nfs3.WccAttr) bool {
	return a.Size == b.Size && a.Mtime == b.Mtime && a.Ctime == b.Ctime
}
