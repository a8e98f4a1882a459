package fusefs

import (
	"context"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
)

// A directory's whole listing, read for the LOOKUPs it saves. FUSE sends a
// LOOKUP before every mkdir, create and rename target, with no word of the
// intent, where the Linux client skips the LOOKUP of a name it is about to
// make; in a directory this mount did not make (names.go), each such name
// is a LOOKUP round trip that finds nothing, and each name renamed or
// opened without a listing before is one that finds it. When a directory's
// LOOKUPs have cost about what reading all of it would (one READDIRPLUS
// page per 4 KiB of its size, the rent-or-buy rule), the next LOOKUP reads
// the listing instead. The listing gives the directory's complete set of
// names (names.go: a missing name is then answered at once for as long as
// the directory's attributes are trusted, and this mount's own changes keep
// it exact), and every entry's handle and attributes (node.plus: found
// names answered for plusFresh, as after ls).
//
// The set is taken as complete only when the listing ran from the start to
// its end with the directory's attributes the same on every page and in the
// cache after it, and no change by this mount to the directory's names came
// between (node.nameGen): otherwise an entry made or removed while the
// pages were read could be missing from it. It is never read for a
// directory larger than maxListSize, nor with lookupcache=pos or none
// (which do not trust missing names), nor in a private directory.

// maxListSize is the largest directory (by its size attribute) whose
// listing is read for its LOOKUPs: about 10,000 entries on ext4.
const maxListSize = 256 << 10

// listBytesPerPage is the directory size taken to fill one READDIRPLUS
// page, for the cost of a listing.
const listBytesPerPage = 4096

// listingCost returns the READDIRPLUS pages that reading all of n is taken
// to cost, and whether n may be read for its LOOKUPs at all; n.mu is held.
func (n *node) listingCostLocked() (int, bool) {
	if !n.attrs.valid || n.attrs.attr.Type != nfs3.TypeDir || n.attrs.attr.Size > maxListSize {
		return 0, false
	}
	return max(2, int(n.attrs.attr.Size/listBytesPerPage)+1), true
}

// listForLookup counts a LOOKUP that n's caches could not answer, and
// reports whether the caller should read n's whole listing (listAll)
// instead of sending it.
func (n *node) listForLookup() bool {
	if !n.fsys.negativeCache() || n.fsys.plusFresh() <= 0 || n.private() {
		return false
	}
	now := n.fsys.now()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.listing {
		return false
	}
	if now.Sub(n.lookupsAt) > n.fsys.opts.AcDirMin {
		n.lookups = 0 // LOOKUPs that far apart are not a run of them
	}
	n.lookups++
	n.lookupsAt = now
	cost, ok := n.listingCostLocked()
	if !ok || n.lookups < cost {
		return false
	}
	n.lookups = 0
	n.listing = true
	return true
}

// listAll reads directory n's whole listing with READDIRPLUS: its entries
// answer the LOOKUPs that follow (putPlus), and, when it is complete (see
// above), its names answer missing names (names.go). Errors leave the
// caches as the pages read left them; the caller's LOOKUP goes ahead.
func (n *node) listAll(ctx context.Context) {
	n.mu.Lock()
	gen := n.nameGen
	cost, _ := n.listingCostLocked()
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		n.listing = false
		n.mu.Unlock()
	}()
	var (
		names    = make(map[string]struct{})
		first    *nfs3.Attr
		same     = true
		cookie   nfs3.Cookie
		verf     nfs3.CookieVerf
		asked    = make(map[nfs3.Cookie]struct{})
		maxPages = 4*cost + 4 // a directory that grew meanwhile: give up
	)
	for page := 0; ; page++ {
		if page == maxPages {
			return
		}
		if _, again := asked[cookie]; again {
			return // a looping listing (dirHandle.fetch logs it when read)
		}
		asked[cookie] = struct{}{}
		var r nfs3.ReaddirplusResult
		err := n.do(ctx, func(dir nfs3.FileHandle) (err error) {
			r, err = n.fsys.c.Readdirplus(ctx, dir, cookie, verf, 0, 0)
			return err
		})
		n.setAttr(r.DirAttr)
		if err != nil {
			// Refused (a directory its caller may search but not
			// read) or failed: the LOOKUPs go on, and the next try
			// waits for five times as many.
			n.mu.Lock()
			n.lookups = -4 * cost
			n.mu.Unlock()
			return
		}
		n.putPlus(r.Entries)
		switch {
		case r.DirAttr == nil:
			same = false
		case first == nil:
			a := *r.DirAttr
			first = &a
		case dataChanged(first, r.DirAttr):
			same = false
		}
		for i := range r.Entries {
			if name := r.Entries[i].Name; name != "." && name != ".." {
				names[name] = struct{}{}
			}
		}
		if len(names) > maxNames {
			same = false
		}
		if r.EOF {
			break
		}
		if len(r.Entries) == 0 {
			return // a page that does not advance
		}
		cookie, verf = r.Entries[len(r.Entries)-1].Cookie, r.Verf
	}
	if !same || first == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.nameGen != gen || !n.attrs.valid || dataChanged(&n.attrs.attr, first) {
		return // changed since the listing began, by this mount or another
	}
	n.names, n.namesOK, n.neg = names, true, nil
}

// lookupFromListing answers a LOOKUP of name in n from n's caches after
// listAll: missing (ok, with the negative entry's timeout) or found (c).
func (n *node) lookupFromListing(name string) (missing bool, left time.Duration, e plusEntry, found bool) {
	if left, ok := n.knownAbsent(name); ok {
		return true, left, plusEntry{}, false
	}
	e, found = n.takePlus(name)
	return false, 0, e, found
}
