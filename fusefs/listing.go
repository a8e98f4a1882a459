package fusefs

import (
	"context"

	"github.com/nfsrdma/nfsrdma/nfs3"
)

// A directory's whole listing, read for the LOOKUPs it saves. Names looked
// up one by one without a listing first (renames of files this mount has
// not seen, a program opening a list of files it knows, a build stating its
// sources) cost a LOOKUP round trip each. When the LOOKUPs that found their
// name in a directory have cost about what reading all of it would (one
// READDIRPLUS page per 4 KiB of its size: the rent-or-buy rule, so a
// listing never costs more than twice what it saves), the next LOOKUP
// reads the listing instead, and its entries' handles and attributes answer
// the found names for plusFresh, exactly as after ls (dirState.plus).
//
// A listing never answers a name as missing. The Linux client asks the
// server for every name it has not looked up before (only the LOOKUP of a
// name it is about to make, a mkdir's or an exclusive create's, it skips),
// so a file another client just made is found at once; a name missing from
// a listing read a moment ago could have been made since. Missing names
// are trusted only as names.go keeps them. LOOKUPs that find nothing do
// not count toward a listing, which would not save them.
//
// It is never read for a directory larger than maxListSize, nor in a
// private directory (private.go), nor with lookupcache=none (every lookup
// asks the server), nor when listings answer nothing (plusFresh 0: noac,
// or actimeo=0).

// maxListSize is the largest directory (by its size attribute) whose
// listing is read for its LOOKUPs: about 10,000 entries on ext4.
const maxListSize = 256 << 10

// listBytesPerPage is the directory size taken to fill one READDIRPLUS
// page, for the cost of a listing.
const listBytesPerPage = 4096

// listingCost returns the READDIRPLUS pages that reading all of n is
// taken to cost, and whether n may be read for its LOOKUPs at all.
func (n *node) listingCost() (int, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.attrs.valid || n.attrs.attr.Type != nfs3.TypeDir || n.attrs.attr.Size > maxListSize {
		return 0, false
	}
	return max(2, int(n.attrs.attr.Size/listBytesPerPage)+1), true
}

// listingUsable reports whether n's listing may answer its LOOKUPs.
func (n *node) listingUsable() bool {
	return n.fsys.plusFresh() > 0 && n.fsys.opts.LookupCache != LookupCacheNone && !n.private()
}

// foundByLookup counts a LOOKUP call in the directory that found its
// name; once they have cost what its listing would, the next LOOKUP reads
// it (listNext).
func (d *dirState) foundByLookup() {
	n := d.n
	if !n.listingUsable() {
		return
	}
	now := n.fsys.now()
	cost, ok := n.listingCost()
	d.mu.Lock()
	defer d.mu.Unlock()
	if now.Sub(d.lookupsAt) > n.fsys.opts.AcDirMin {
		d.lookups = 0 // LOOKUPs that far apart are not a run of them
	}
	d.lookupsAt = now
	d.lookups++
	if ok && d.lookups >= cost && !d.listing {
		d.listNext = true
	}
}

// listForLookup reports whether the caller, about to send a LOOKUP in the
// directory, should read its whole listing (listAll) first.
func (d *dirState) listForLookup() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.listNext || d.listing {
		return false
	}
	d.listNext, d.listing, d.lookups = false, true, 0
	return true
}

// listAll reads the directory's whole listing with READDIRPLUS, for the
// LOOKUPs that follow (putPlus). An error ends it with the pages read so
// far kept, and the next try waits for five times as many LOOKUPs.
func (d *dirState) listAll(ctx context.Context) {
	n := d.n
	cost, _ := n.listingCost()
	failed := false
	defer func() {
		d.mu.Lock()
		d.listing = false
		if failed {
			// Refused (a directory its caller may search but not
			// read) or broken: the LOOKUPs go on.
			d.lookups = -4 * cost
		}
		d.mu.Unlock()
	}()
	var (
		cookie nfs3.Cookie
		verf   nfs3.CookieVerf
		asked  = make(map[nfs3.Cookie]struct{})
	)
	// A directory that grew meanwhile: give up after 4 times its cost.
	for range 4*cost + 4 {
		if _, again := asked[cookie]; again {
			failed = true // a looping listing (dirHandle.fetch logs it when read)
			return
		}
		asked[cookie] = struct{}{}
		var r nfs3.ReaddirplusResult
		err := n.do(ctx, func(dir nfs3.FileHandle) (err error) {
			r, err = n.fsys.c.Readdirplus(ctx, dir, cookie, verf, 0, 0)
			return err
		})
		n.setAttr(r.DirAttr)
		if err != nil {
			failed = ctx.Err() == nil
			return
		}
		d.putPlus(r.Entries)
		if r.EOF {
			return
		}
		if len(r.Entries) == 0 {
			failed = true // a page that does not advance
			return
		}
		cookie, verf = r.Entries[len(r.Entries)-1].Cookie, r.Verf
	}
}
