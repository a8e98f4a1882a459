package fusefs

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
)

// dirState is what this mount keeps of a directory's contents, beside the
// object state every node has: the names it knows in it and knows
// missing (names.go), the entries its READDIRPLUS replies brought for the
// LOOKUPs that follow (plus), the replies kept for the next listing and
// when the kernel began its own copy (dircache.go), the run of LOOKUPs
// that decides when to read the whole listing instead (listing.go), and
// the LOOKUP that got no answer (unanswered). Only a directory's node has
// one (node.dir), made with the node and kept for its life.
//
// Every cache here describes the directory as its cached attributes (the
// node's) show it, and goes when they show a change that was not this
// mount's own (sawChangeLocked, from node.setAttr). This mount's own
// changes go through one entry point, changed: given the operation's
// wcc_data and the names it added and removed, it updates or drops every
// cache here and the directory's attributes together, so that no
// operation leaves one of them describing the directory before it.
//
// Invariants:
//   - namesOK: names is every name in the directory, as of the cached
//     attributes; neg holds names known missing, trusted while those
//     attributes are (see names.go).
//   - plus holds no entry of a name this mount changed since its listing
//     brought it, nor one older than plusFresh when it is used.
//   - kept, when not nil, is the start of a listing read while the
//     directory had the cached size, mtime and ctime, with no change by
//     this mount since.
//
// Locks: mu guards every field below it. The lock order is the node's mu,
// then dirState.mu: knownAbsent, keptPage and setAttr hold both, so that
// the names and kept replies are never trusted under attributes that
// showed them stale. Never the other way, and never two directories'
// states at once. What changed updates of the node's own state beside
// them (its access rights, its ACL answer) is under the node's mu. No NFS
// call is made with mu held.
type dirState struct {
	n *node // the directory's node: its handle and attributes

	mu sync.Mutex

	// The directory's complete set of names, while namesOK (see names.go).
	names   map[string]struct{}
	namesOK bool
	neg     map[string]struct{} // names found missing

	// unanswered: a LOOKUP in the directory that got no answer (a soft
	// mount's timeout), for the kernel's own retry (see node.Lookup).
	unanswered unansweredLookup

	// The LOOKUP calls in the directory that found their name, in a run
	// (none more than acdirmin apart); whether the next LOOKUP is to read
	// the whole listing first, and whether one is being read (see
	// listing.go).
	lookups   int
	lookupsAt time.Time
	listNext  bool
	listing   bool

	// The directory's entries as its last READDIRPLUS pages brought them,
	// by name, for the LOOKUPs that follow a listing (see takePlus).
	plus map[string]plusEntry

	// When the kernel last began to fill its cache of the directory's
	// listing, and the READDIRPLUS replies this mount keeps for the next
	// listing (see dircache.go).
	listCachedAt time.Time
	kept         *keptListing
}

// changed is the one entry point of a change this mount made in the
// directory (CREATE, MKDIR, SYMLINK, MKNOD, LINK, REMOVE, RMDIR, RENAME, a
// silly rename and its removal): w is the operation's wcc_data for the
// directory, ok whether it succeeded, changes the names it added and
// removed. The listed entries of those names go, and the kept listing;
// when the operation succeeded and the wcc before shows the directory as
// cached (or is absent), the known names follow the changes; then the
// post-operation attributes are recorded, which end the names' knowledge
// if they show a change that was not this operation's (without them, the
// attributes are stale).
func (d *dirState) changed(w *nfs3.WccData, ok bool, changes ...nameChange) {
	n := d.n
	n.mu.Lock()
	defer n.mu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range changes {
		// Changed by this mount: what a listing said of them is old.
		delete(d.plus, c.add)
		delete(d.plus, c.remove)
	}
	d.kept = nil // the listing changed (kept listings, dircache.go)
	own := false
	if (d.namesOK || d.neg != nil) && ok {
		if w.Before == nil || sameWcc(&n.attrs.attr, w.Before) {
			own = true
			for _, c := range changes {
				if c.remove != "" {
					delete(d.names, c.remove)
				}
				if c.add != "" {
					delete(d.neg, c.add)
					if d.namesOK {
						d.names[c.add] = struct{}{}
					}
				}
			}
			if len(d.names) > maxNames {
				d.dropNamesLocked()
			}
		} else {
			d.dropNamesLocked()
		}
	}
	if w.After == nil {
		n.attrs.invalidate()
		return
	}
	n.carryAccessLocked(w) // the mount's own change (access.go)
	n.carryACLsLocked(w)   // likewise: not of the ACLs (xattr.go)
	lo, hi := n.fsys.acBounds(w.After.Type)
	if n.attrs.update(*w.After, n.fsys.now(), lo, hi) && !own {
		d.dropNamesLocked()
	}
}

// sawChangeLocked drops what attributes showing a change by someone else
// make stale: the names and the kept listing. The node's mu is held.
func (d *dirState) sawChangeLocked() {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dropNamesLocked()
	d.kept = nil
}

// revalidated records the attributes a of an open's close-to-open
// revalidation of the directory (revalidateDir): when they show it
// changed, the entries kept for lookups go too, and the kernel's copy of
// the listing is dropped at this open (listCacheFlags).
func (d *dirState) revalidated(a *nfs3.Attr) {
	if !d.n.setAttr(a) {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.plus = nil
	if !d.listCachedAt.IsZero() {
		// Older than any use: listCacheFlags drops the kernel's copy.
		d.listCachedAt = time.Unix(1, 0)
	}
}

// plusEntry is one entry of a READDIRPLUS reply.
type plusEntry struct {
	fh   nfs3.FileHandle
	attr nfs3.Attr
	at   time.Time
}

// maxPlus bounds the entries a directory keeps from its listings.
const maxPlus = 1 << 16

// plusFresh returns how long an entry of a listing answers LOOKUPs: no
// longer than its directory's or its own attributes would be trusted.
func (f *FS) plusFresh() time.Duration {
	return min(f.opts.AcDirMin, f.opts.AcRegMin)
}

// putPlus keeps the entries of a READDIRPLUS page that have a handle and
// attributes.
func (d *dirState) putPlus(ents []nfs3.DirEntryPlus) {
	f := d.n.fsys
	if f.plusFresh() <= 0 {
		return
	}
	now := f.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range ents {
		e := &ents[i]
		if e.FH == nil || e.Attr == nil || e.Name == "." || e.Name == ".." {
			continue
		}
		if d.plus == nil {
			d.plus = make(map[string]plusEntry)
		}
		if len(d.plus) >= maxPlus {
			for k, p := range d.plus {
				if now.Sub(p.at) >= f.plusFresh() {
					delete(d.plus, k)
				}
			}
			if len(d.plus) >= maxPlus {
				return
			}
		}
		d.plus[e.Name] = plusEntry{fh: e.FH, attr: *e.Attr, at: now}
	}
}

// takePlus returns (and forgets) name's entry from a recent listing.
func (d *dirState) takePlus(name string) (plusEntry, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.plus[name]
	if !ok {
		return plusEntry{}, false
	}
	delete(d.plus, name)
	if len(d.plus) == 0 {
		d.plus = nil
	}
	return e, d.n.fsys.now().Sub(e.at) < d.n.fsys.plusFresh()
}

// unansweredLookup is a LOOKUP that got no answer from the server.
type unansweredLookup struct {
	name string
	at   time.Time
	err  error
}

// unansweredRetry bounds how soon after a LOOKUP that got no answer the
// kernel's retry of it is answered with the same error.
const unansweredRetry = time.Second

// noteUnanswered records a LOOKUP of name that got no answer (err is not
// a status from the server: a soft mount's timeout), or forgets one.
//
// The kernel's FUSE layer revalidates a cached name with a LOOKUP; when
// that fails with an error other than EINTR or ENOMEM it drops the name
// and looks it up again at once, so a path walk on a silent server would
// wait for two timeouts where the kernel's NFS client, which returns the
// revalidation's error, waits for one (soft mounts: timeo×retrans). That
// immediate retry (takeUnanswered, once, within unansweredRetry) gets the
// first one's error without a call: the application sees the kernel
// client's outcome after the kernel client's wait. A later lookup, or an
// application's own retry after the first, asks the server again.
func (d *dirState) noteUnanswered(name string, err error) {
	var st nfs3.Status
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil && !errors.As(err, &st) && !errors.Is(err, context.Canceled) {
		d.unanswered = unansweredLookup{name: name, at: d.n.fsys.now(), err: err}
		return
	}
	if d.unanswered.name == name {
		d.unanswered = unansweredLookup{}
	}
}

// takeUnanswered returns, once, the error of a LOOKUP of name that got no
// answer within unansweredRetry (see noteUnanswered).
func (d *dirState) takeUnanswered(name string) (error, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	u := d.unanswered
	if u.err == nil || u.name != name || d.n.fsys.now().Sub(u.at) >= unansweredRetry {
		return nil, false
	}
	d.unanswered = unansweredLookup{}
	return u.err, true
}
