package fusefs

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"

	"github.com/nfsrdma/nfsrdma/nfs3"
)

// Extended attributes: POSIX ACLs, as on the Linux client's NFSv3 mount.
//
// NFSv3 has no extended attributes; the Linux client's NFSv3 superblock
// has two, system.posix_acl_access and system.posix_acl_default, which it
// reads and sets with the NFSACL side protocol (GETACL, SETACL). Every
// other name gives EOPNOTSUPP, and so do these two with nfs(5) noacl or
// a server without NFSACL (its listxattr then lists nothing).
//
// The FUSE kernel module passes these names to the mount unless it was
// told FUSE_POSIX_ACL, which this mount does not ask for (it would turn
// on default_permissions: the server decides permissions here). The
// kernel keeps no ACLs of its own then; node.acls keeps the server's
// answer instead, as the Linux client keeps an inode's ACLs: one GETACL
// answers both names (and, for a directory, both ACLs, which also decide
// whether the creator's umask applies in it, acl.go) until the
// attributes show a change that was not this mount's own.
//
// Reading: the server's entries are sorted as the kernel sorts them (by
// type, then id), a four-entry ACL's mask equal to the owning group's
// entry is dropped (the wire's minimal ACL, see nfs3.ACLProgram), and an
// access ACL that says no more than the mode is none (ENODATA).
//
// Setting: the caller's credential (the server refuses one that does not
// own the object, EPERM). A directory's SETACL carries both ACLs, the one
// not being set as the mount has it, as the Linux client sends them; an
// access ACL removed is sent as the one the mode gives, which the server
// takes as no ACL. The server sets the mode from an access ACL (an ACL
// equal to a mode only changes the mode) and answers with the new
// attributes. The cached ACLs are dropped.

// The extended attribute names of the two ACLs.
const (
	xattrACLAccess  = "system.posix_acl_access"
	xattrACLDefault = "system.posix_acl_default"
)

// The xattr form of an ACL (struct posix_acl_xattr_header and its
// entries, little-endian): a version, then per entry its type (u16), its
// permissions (u16) and its id (u32; aclUndefinedID but for named users
// and groups).
const (
	aclXattrVersion    = 2
	aclXattrHeaderSize = 4
	aclXattrEntrySize  = 8
	aclUndefinedID     = 0xffffffff
)

// aclAnswer is a node's last GETACL answer, as the two xattrs give it
// (nil: no such ACL; a non-directory's default is always nil), or the
// answer that the object's file system has no ACLs (noACLs:
// NFS3ERR_NOTSUPP). It is the mount's one record of the object's ACLs:
// getxattr, listxattr and setxattr read it, and for a directory so does
// the umask rule of the creations in it (hasDefaultACL, acl.go).
//
// Invariant: an answer (ok) is the server's as of ctime, and it answers
// while the node's attributes are trusted and show that ctime. A change
// this mount made in a directory (CREATE, REMOVE, RENAME...: not its
// ACLs) whose wcc_data shows it moved the ctime from exactly ctime
// carries the answer over to the new ctime (carryACLsLocked, from
// dirState.changed); any other change of ctime (another client's, a
// SETATTR's) leaves the answer stale, and a SETACL or a chmod through
// the mount drops it. The node's mutex guards it.
type aclAnswer struct {
	ok      bool // an answer is held
	noACLs  bool // the answer was NFS3ERR_NOTSUPP: EOPNOTSUPP
	ctime   nfs3.Time
	access  []nfs3.ACLEntry
	dfltACL []nfs3.ACLEntry
}

// errNoACLs is getACLs' failure when the mount or the object's file
// system has no ACLs: the xattrs give EOPNOTSUPP and the umask applies.
var errNoACLs = fmt.Errorf("no POSIX ACLs (noacl, no NFSACL, or NFS3ERR_NOTSUPP): %w", syscall.EOPNOTSUPP)

var (
	_ fs.NodeGetxattrer    = (*node)(nil)
	_ fs.NodeSetxattrer    = (*node)(nil)
	_ fs.NodeListxattrer   = (*node)(nil)
	_ fs.NodeRemovexattrer = (*node)(nil)
)

// aclsOff reports whether the mount has no ACLs: noacl, or a server that
// said it has no NFSACL.
func (f *FS) aclsOff() bool { return f.opts.NoACL || f.noACLProgram.Load() }

// Getxattr returns the ACL attr names, in its xattr form.
func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	dflt, ok := aclName(attr)
	if !ok || n.fsys.aclsOff() {
		return 0, syscall.EOPNOTSUPP
	}
	n.mu.Lock()
	isDir := n.attrs.attr.Type == nfs3.TypeDir
	n.mu.Unlock()
	if dflt && !isDir {
		return 0, syscall.ENODATA // only a directory has one: nothing to ask
	}
	cctx, done := n.fsys.callCtx(ctx)
	defer done()
	a, err := n.getACLs(cctx)
	if err != nil {
		return 0, aclErrno(err)
	}
	entries := a.access
	if dflt {
		entries = a.dfltACL
	}
	if entries == nil {
		return 0, syscall.ENODATA
	}
	size := aclXattrHeaderSize + aclXattrEntrySize*len(entries)
	if len(dest) < size {
		return uint32(size), syscall.ERANGE
	}
	appendACLXattr(dest[:0], entries)
	return uint32(size), 0
}

// Listxattr lists the names of the ACLs the object has.
func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	if n.fsys.aclsOff() {
		return 0, 0
	}
	cctx, done := n.fsys.callCtx(ctx)
	defer done()
	a, err := n.getACLs(cctx)
	if err != nil {
		if errors.Is(err, errNoACLs) {
			return 0, 0 // as the Linux client: the names it cannot read are not listed
		}
		return 0, aclErrno(err)
	}
	var list []byte
	if a.access != nil {
		list = append(append(list, xattrACLAccess...), 0)
	}
	if a.dfltACL != nil {
		list = append(append(list, xattrACLDefault...), 0)
	}
	if len(dest) < len(list) {
		return uint32(len(list)), syscall.ERANGE
	}
	copy(dest, list)
	return uint32(len(list)), 0
}

// Setxattr sets the ACL attr names from its xattr form (empty: removes it).
// The flags (XATTR_CREATE, XATTR_REPLACE) do not apply to ACLs.
func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	dflt, ok := aclName(attr)
	if !ok || n.fsys.aclsOff() {
		return syscall.EOPNOTSUPP
	}
	var entries []nfs3.ACLEntry
	if len(data) > 0 {
		var errno syscall.Errno
		if entries, errno = parseACLXattr(data); errno != 0 {
			return errno
		}
	}
	return n.setACL(ctx, dflt, entries)
}

// Removexattr removes the ACL attr names.
func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	dflt, ok := aclName(attr)
	if !ok || n.fsys.aclsOff() {
		return syscall.EOPNOTSUPP
	}
	return n.setACL(ctx, dflt, nil)
}

// aclName reports whether attr names an ACL, and which.
func aclName(attr string) (dflt, ok bool) {
	switch attr {
	case xattrACLAccess:
		return false, true
	case xattrACLDefault:
		return true, true
	}
	return false, false
}

// aclErrno maps a failure to read or set an ACL to the errno the Linux
// client gives.
func aclErrno(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return toErrno(err)
}

// getACLs returns n's ACLs: the cached answer, or GETACL's (of both ACLs
// for a directory: one call answers getfacl and the umask rule alike). A
// server without NFSACL (from then on the mount has no ACLs) or a file
// system without ACLs (NFS3ERR_NOTSUPP, kept as an answer) gives
// errNoACLs, as EOPNOTSUPP on the Linux client. A reply without all that
// was asked, or with entries no ACL has, gives EIO, as on the Linux
// client.
func (n *node) getACLs(ctx context.Context) (aclAnswer, error) {
	f := n.fsys
	n.mu.Lock()
	if _, fresh := n.attrs.fresh(f.now()); fresh && n.acls.ok && n.acls.ctime == n.attrs.attr.Ctime {
		a := n.acls
		n.mu.Unlock()
		if a.noACLs {
			return aclAnswer{}, errNoACLs
		}
		return a, nil
	}
	isDir := n.attrs.attr.Type == nfs3.TypeDir
	n.mu.Unlock()
	mask := nfs3.ACLAccess | nfs3.ACLAccessCount
	if isDir {
		mask |= nfs3.ACLDefault | nfs3.ACLDefaultCount
	}
	var r nfs3.GetACLResult
	err := n.do(ctx, func(fh nfs3.FileHandle) (err error) {
		r, err = f.c.GetACL(ctx, fh, mask)
		return err
	})
	a := aclAnswer{ok: true}
	switch {
	case nfs3.NoACLProgram(err):
		f.sawNoACLProgram(err)
		return aclAnswer{}, errNoACLs
	case errors.Is(err, nfs3.ErrNotSupp):
		a.noACLs = true
	case err != nil:
		return aclAnswer{}, err
	case r.Mask&mask != mask:
		// Not all that was asked came back (the Linux client: EIO).
		n.setAttr(r.Attr)
		return aclAnswer{}, syscall.EIO
	default:
		var ok bool
		if a.access, ok = aclFromWire(r.Access, true); !ok {
			return aclAnswer{}, syscall.EIO
		}
		if isDir {
			if a.dfltACL, ok = aclFromWire(r.Default, false); !ok {
				return aclAnswer{}, syscall.EIO
			}
		}
	}
	n.setAttr(r.Attr)
	n.mu.Lock()
	a.ctime = n.attrs.attr.Ctime
	if r.Attr != nil || n.attrs.valid {
		// Kept with the attributes: without any in the reply, with the
		// ones the mount trusts (they showed the ctime before the call).
		n.acls = a
	}
	n.mu.Unlock()
	if a.noACLs {
		return aclAnswer{}, errNoACLs
	}
	return a, nil
}

// sawNoACLProgram notes that the server has no NFSACL (err said so): from
// then on the mount has no ACLs, as with noacl.
func (f *FS) sawNoACLProgram(err error) {
	if !f.noACLProgram.Swap(true) {
		f.log.Info("the server has no NFSACL: the creator's umask applies to every new file and extended attributes give EOPNOTSUPP, as with noacl", "err", err)
	}
}

// carryACLsLocked carries directory n's ACL answer over a change this
// mount made in it (dirState.changed, before w.After is recorded), which
// does not change its ACLs, as the Linux client keeps an inode's cached
// ACLs across its own changes: when the change moved the ctime from
// exactly the answer's (w.Before's, or without one the trusted cached
// attributes'), the answer holds at w.After's ctime. Otherwise the
// directory changed in a way the answer may not know of, and it goes.
// n.mu is held.
func (n *node) carryACLsLocked(w *nfs3.WccData) {
	if !n.acls.ok || w.After == nil {
		return
	}
	var before nfs3.Time
	switch {
	case w.Before != nil:
		before = w.Before.Ctime
	default:
		if _, fresh := n.attrs.fresh(n.fsys.now()); !fresh {
			n.acls = aclAnswer{}
			return
		}
		before = n.attrs.attr.Ctime
	}
	if n.acls.ctime != before {
		n.acls = aclAnswer{}
		return
	}
	n.acls.ctime = w.After.Ctime
}

// forgetACLs drops n's cached ACLs: this mount changed its mode, which
// changes its access ACL (as the Linux client forgets an inode's ACLs at
// its SETATTR of the mode), whatever ctime the server gives it.
func (n *node) forgetACLs() {
	n.mu.Lock()
	n.acls = aclAnswer{}
	n.mu.Unlock()
}

// setACL sets n's access ACL (dflt false) or default ACL to entries (nil:
// removes it) with the caller's credential; see the comment at the top.
func (n *node) setACL(ctx context.Context, dflt bool, entries []nfs3.ACLEntry) syscall.Errno {
	f := n.fsys
	cctx, done := f.callCtx(ctx)
	defer done()
	n.mu.Lock()
	attr, valid := n.attrs.attr, n.attrs.valid
	n.mu.Unlock()
	if !valid {
		a, _, err := n.getattr(cctx, true)
		if err != nil {
			return toErrno(err)
		}
		attr = a
	}
	isDir := attr.Type == nfs3.TypeDir
	if dflt && !isDir {
		// Only a directory has a default ACL (the kernel's check).
		if entries == nil {
			return 0
		}
		return syscall.EACCES
	}
	access, dfltACL := entries, []nfs3.ACLEntry(nil)
	mask := nfs3.ACLAccess
	if isDir {
		// Both go: the one not being set as the server has it.
		mask |= nfs3.ACLDefault
		cur, err := n.getACLs(cctx)
		if err != nil {
			return aclErrno(err)
		}
		if dflt {
			access, dfltACL = cur.access, entries
		} else {
			dfltACL = cur.dfltACL
		}
		n.mu.Lock()
		attr = n.attrs.attr
		n.mu.Unlock()
	}
	if access == nil {
		access = aclFromMode(attr.Mode)
	}
	wa := nfs3.ACL{Entries: aclToWire(access, attr.UID, attr.GID)}
	var wd *nfs3.ACL
	if dfltACL != nil {
		wd = &nfs3.ACL{Entries: aclToWire(dfltACL, attr.UID, attr.GID)}
	}
	var r nfs3.SetACLResult
	err := n.do(cctx, func(fh nfs3.FileHandle) (err error) {
		r, err = f.c.SetACL(cctx, fh, mask, &wa, wd)
		return err
	})
	n.forgetACLs()
	if r.Attr != nil {
		n.setAttr(r.Attr)
	} else {
		n.invalidateAttr()
	}
	switch {
	case nfs3.NoACLProgram(err):
		f.sawNoACLProgram(err)
		return syscall.EOPNOTSUPP
	case errors.Is(err, nfs3.ErrNotSupp):
		return syscall.EOPNOTSUPP
	case err != nil:
		return toErrno(err)
	}
	return 0
}

// aclFromMode returns the three-entry ACL the mode's permission bits give.
func aclFromMode(mode uint32) []nfs3.ACLEntry {
	return []nfs3.ACLEntry{
		{Tag: nfs3.TagUserObj, Perm: mode >> 6 & 7},
		{Tag: nfs3.TagGroupObj, Perm: mode >> 3 & 7},
		{Tag: nfs3.TagOther, Perm: mode & 7},
	}
}

// aclTagOrder is the place of each entry type in an ACL.
func aclTagOrder(t nfs3.ACLTag) int {
	switch t {
	case nfs3.TagUserObj:
		return 0
	case nfs3.TagUser:
		return 1
	case nfs3.TagGroupObj:
		return 2
	case nfs3.TagGroup:
		return 3
	case nfs3.TagMask:
		return 4
	case nfs3.TagOther:
		return 5
	}
	return -1
}

// aclFromWire returns the ACL a GETACL answer's acl gives, as the xattr
// gives it: nil for none (no entries; for an access ACL, also one the mode
// says all of), else its entries sorted by type and then id, without the
// wire's mask of a minimal ACL. ok is false for an entry of an unknown
// type or permissions.
func aclFromWire(acl nfs3.ACL, access bool) (entries []nfs3.ACLEntry, ok bool) {
	if len(acl.Entries) == 0 {
		return nil, true
	}
	e := slices.Clone(acl.Entries)
	for _, x := range e {
		if aclTagOrder(x.Tag) < 0 || x.Perm&^7 != 0 {
			return nil, false
		}
	}
	slices.SortStableFunc(e, func(a, b nfs3.ACLEntry) int {
		if d := aclTagOrder(a.Tag) - aclTagOrder(b.Tag); d != 0 {
			return d
		}
		if a.Tag == nfs3.TagUser || a.Tag == nfs3.TagGroup {
			switch {
			case a.ID < b.ID:
				return -1
			case a.ID > b.ID:
				return 1
			}
		}
		return 0
	})
	if len(e) == 4 && e[1].Tag == nfs3.TagGroupObj && e[2].Tag == nfs3.TagMask && e[1].Perm == e[2].Perm {
		e = slices.Delete(e, 2, 3)
	}
	if access && aclIsMode(e) {
		return nil, true
	}
	return e, true
}

// aclIsMode reports whether an ACL says no more than a mode: only the
// owner's, the group's and the others' entries.
func aclIsMode(e []nfs3.ACLEntry) bool {
	for _, x := range e {
		switch x.Tag {
		case nfs3.TagUserObj, nfs3.TagGroupObj, nfs3.TagOther:
		default:
			return false
		}
	}
	return true
}

// aclToWire returns entries as SETACL sends them: the owner's and the
// owning group's entries with the object's uid and gid, the mask's and the
// others' with 0, and a minimal ACL with a mask equal to the group's.
func aclToWire(entries []nfs3.ACLEntry, uid, gid uint32) []nfs3.ACLEntry {
	out := make([]nfs3.ACLEntry, 0, max(len(entries), 4))
	var group uint32
	for _, x := range entries {
		switch x.Tag {
		case nfs3.TagUserObj:
			x.ID = uid
		case nfs3.TagGroupObj:
			x.ID, group = gid, x.Perm
		case nfs3.TagMask, nfs3.TagOther:
			x.ID = 0
		}
		if x.Tag == nfs3.TagOther && len(entries) == 3 {
			out = append(out, nfs3.ACLEntry{Tag: nfs3.TagMask, Perm: group})
		}
		out = append(out, x)
	}
	return out
}

// appendACLXattr appends entries in their xattr form.
func appendACLXattr(b []byte, entries []nfs3.ACLEntry) []byte {
	b = binary.LittleEndian.AppendUint32(b, aclXattrVersion)
	for _, x := range entries {
		id := uint32(aclUndefinedID)
		if x.Tag == nfs3.TagUser || x.Tag == nfs3.TagGroup {
			id = x.ID
		}
		b = binary.LittleEndian.AppendUint16(b, uint16(x.Tag))
		b = binary.LittleEndian.AppendUint16(b, uint16(x.Perm))
		b = binary.LittleEndian.AppendUint32(b, id)
	}
	return b
}

// parseACLXattr reads an ACL in its xattr form. It must be a valid ACL as
// the kernel checks one (posix_acl_valid): one owner's, group's and
// others' entry, named users and then named groups in ascending order of
// id, a mask when there are any, in the order of aclTagOrder, each with
// permissions of rwx only; EINVAL otherwise (EOPNOTSUPP for another
// version of the form).
func parseACLXattr(b []byte) ([]nfs3.ACLEntry, syscall.Errno) {
	if len(b) < aclXattrHeaderSize || (len(b)-aclXattrHeaderSize)%aclXattrEntrySize != 0 {
		return nil, syscall.EINVAL
	}
	if binary.LittleEndian.Uint32(b) != aclXattrVersion {
		return nil, syscall.EOPNOTSUPP
	}
	n := (len(b) - aclXattrHeaderSize) / aclXattrEntrySize
	if n > nfs3.MaxACLEntries {
		return nil, syscall.E2BIG
	}
	entries := make([]nfs3.ACLEntry, n)
	prev, named := -1, false
	var prevID uint32
	var seen [6]bool
	for i := range entries {
		p := b[aclXattrHeaderSize+i*aclXattrEntrySize:]
		x := nfs3.ACLEntry{
			Tag:  nfs3.ACLTag(binary.LittleEndian.Uint16(p)),
			Perm: uint32(binary.LittleEndian.Uint16(p[2:])),
		}
		ord := aclTagOrder(x.Tag)
		if ord < 0 || x.Perm&^7 != 0 || ord < prev {
			return nil, syscall.EINVAL
		}
		switch x.Tag {
		case nfs3.TagUser, nfs3.TagGroup:
			x.ID = binary.LittleEndian.Uint32(p[4:])
			if x.ID == aclUndefinedID || (ord == prev && x.ID <= prevID) {
				return nil, syscall.EINVAL
			}
			named = true
		default:
			if seen[ord] {
				return nil, syscall.EINVAL
			}
		}
		seen[ord], prev, prevID = true, ord, x.ID
		entries[i] = x
	}
	if !seen[0] || !seen[2] || !seen[5] || (named && !seen[4]) {
		return nil, syscall.EINVAL
	}
	return entries, 0
}
