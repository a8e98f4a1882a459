package fusefs

import (
	"context"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// Permissions are the server's to decide, as with the kernel NFS client
// (RFC 1813 §3.3.4 ACCESS; Linux nfs_permission, nfs_do_access).
//
// The mount is not made with FUSE's default_permissions: the kernel would
// refuse by the mode bits alone, before asking, what the server allows
// (an all_squash export, where the maker of a file is its anonymous
// owner; a POSIX ACL that grants), and allow what it refuses (an ACL deny
// entry, a uid mapping, a group past the 16 AUTH_SYS carries) from its
// caches, one for all users. Instead:
//
//   - open (FUSE OPEN), opendir and access(2)/chdir (FUSE ACCESS) are
//     decided by an ACCESS call with the caller's credential, whose answer
//     is kept per object and per credential (uid, gid and the groups sent)
//     while the object's attributes are trusted and show the ctime, mode
//     and owner the reply carried, as the Linux client's access cache is
//     (a change of them, or the attribute timeout, asks again). The
//     mapping of open flags and access(2) bits to ACCESS rights is the
//     Linux client's (nfs_open_permission_mask, nfs_access_calc_mask): an
//     exec asks execute only; writing a file needs MODIFY and EXTEND, a
//     directory MODIFY, EXTEND and DELETE; search is LOOKUP.
//   - An ACCESS made for an open whose attributes the server had to be
//     asked for anyway (close-to-open) is that revalidation: one call.
//   - The rights are kept across this mount's own changes of the object
//     (a write, a create in a directory: their wcc_data show the change
//     was the mount's own), as the Linux client keeps them
//     (nfs_post_op_update_inode_force_wcc); a change by anyone else, or
//     of the mode or owner, drops them.
//   - A CREATE of a name the kernel believed missing is not checked as
//     an open even if another client made the name meanwhile (UNCHECKED
//     CREATE then opens that file): the kernel client does the same (the
//     file counts as created, FMODE_CREATED, and may_open is skipped).
//   - Truncation by path (truncate(2), or through a descriptor opened for
//     reading: O_RDONLY|O_TRUNC) is checked for writing first.
//   - Path walks: FUSE asks the file system nothing when a walk goes
//     through a name the kernel has cached. So on a mount other users may
//     enter, the names of a directory that not every class may search
//     (mode&0o111 != 0o111) are given to the kernel with no entry timeout
//     (private.go): every walk through it comes to Lookup with its caller,
//     whose search permission there is decided as above (kept per
//     credential; learnt from its own LOOKUP there too). A directory every
//     class may search is walked from the kernel's cache as before: there
//     an ACL entry that denies one user search, which the mode bits do not
//     show, is not applied to names another user's walk left cached
//     (within the directory's attribute timeout). On a mount only its
//     user may enter, FUSE lets in one uid and gid: its processes differ
//     at most by their groups, and no directory is treated so.
//   - link(2) with fs.protected_hardlinks: a caller that does not own the
//     file links to it only if the server lets it read and write it
//     (mayLink; the kernel makes the rest of that check).
//   - Creating, removing and renaming names, and every SETATTR, are
//     decided by the server when made, as on the kernel client (FUSE sends
//     them without a check of its own when default_permissions is off).
//
// Unlike the kernel client, an entry is not dropped for a caller whose
// login session began after it (the kernel's nfs_access_login_time): it
// lapses once the object's attributes time out before its next use.
//
// The scenarios that would catch these breaking: TestAccessServerDenies
// (an entry kept and used per credential), TestRPCAccessCat (one ACCESS
// per file and user, none more while the attributes hold, asked again
// when the server's chmod shows), TestRootOpenOneCall and TestCloseToOpen
// (the ACCESS as the revalidation, and not past a change),
// TestPrivateDirMadeByRoot (rights kept across the mount's own creations),
// TestAccessPrivateWalk and TestPrivateDirRoot (walks), and the guest's
// TestAccessServerDecides against the kernel's mount.

// accessEntry is what the server said of one credential's rights on an
// object.
type accessEntry struct {
	known   uint32    // the nfs3.Access* rights it said anything of
	granted uint32    // of those, the granted ones
	attr    nfs3.Attr // the object's attributes then (see sameAccess)
	// at: when an ACCESS reply brought attr, for the open right after
	// (its attributes are that open's close-to-open revalidation); zero
	// once an open took them.
	at time.Time
}

// maxAccessEntries bounds the credentials whose rights an object keeps.
const maxAccessEntries = 64

// accessFresh is how long the attributes an ACCESS brought serve as the
// close-to-open revalidation of an open that follows (a stat then an
// open: the kernel's exec re-reads the attributes first).
const accessFresh = time.Second

// accessAsked returns the rights asked of an object of type t: all that
// its kind has, as the Linux client asks them (nfs_do_access).
func accessAsked(t nfs3.FileType) uint32 {
	var m uint32 = nfs3.AccessRead | nfs3.AccessModify | nfs3.AccessExtend
	if t == nfs3.TypeDir {
		return m | nfs3.AccessDelete | nfs3.AccessLookup
	}
	return m | nfs3.AccessExecute
}

// Permission bits of open(2) and access(2), as the kernel's MAY_*.
const (
	mayExec  = 1
	mayWrite = 2
	mayRead  = 4
)

// fmodeExec is the kernel's __FMODE_EXEC, which it leaves in the flags of
// the open made for execve(2) (FUSE passes them on).
const fmodeExec = 0x20

// accessNeed returns the ACCESS rights that mask (may* bits) needs of an
// object of type t (nfs_access_calc_mask), and false if no right grants
// it (execute of what is neither a file nor a directory).
func accessNeed(t nfs3.FileType, mask uint32) (uint32, bool) {
	var need uint32
	if mask&mayRead != 0 {
		need |= nfs3.AccessRead
	}
	switch t {
	case nfs3.TypeDir:
		if mask&mayWrite != 0 {
			need |= nfs3.AccessModify | nfs3.AccessExtend | nfs3.AccessDelete
		}
		if mask&mayExec != 0 {
			need |= nfs3.AccessLookup
		}
	case nfs3.TypeReg:
		if mask&mayWrite != 0 {
			need |= nfs3.AccessModify | nfs3.AccessExtend
		}
		if mask&mayExec != 0 {
			need |= nfs3.AccessExecute
		}
	default:
		if mask&mayWrite != 0 {
			need |= nfs3.AccessModify
		}
		if mask&mayExec != 0 {
			return 0, false
		}
	}
	return need, true
}

// openMask returns the may* bits an open with flags needs
// (nfs_open_permission_mask): execute only for execve(2)'s.
func openMask(flags uint32) uint32 {
	if flags&fmodeExec != 0 {
		return mayExec
	}
	var m uint32
	if flags&syscall.O_ACCMODE != syscall.O_WRONLY {
		m |= mayRead
	}
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		m |= mayWrite
	}
	if flags&syscall.O_TRUNC != 0 {
		m |= mayWrite
	}
	return m
}

// accessKey returns the key of the credential ctx's calls carry ("": the
// client's own).
func accessKey(ctx context.Context) string {
	a, ok := sunrpc.CredentialFrom(ctx)
	if !ok {
		return ""
	}
	return string(rune(a.Flavor)) + string(a.Body)
}

// cachedAccess returns what n's access cache says of the rights need for
// credential key: known, and if so whether all are granted. An entry
// answers while n's attributes are trusted and show the ctime, mode and
// owner it was made with; n.mu is held.
func (n *node) cachedAccessLocked(key string, need uint32) (allowed, known bool) {
	e, ok := n.acc[key]
	if !ok {
		return false, false
	}
	if _, fresh := n.attrs.fresh(n.fsys.now()); !fresh || !sameAccess(&e.attr, &n.attrs.attr) {
		return false, false
	}
	if e.known&need&^e.granted != 0 {
		return false, true // one of them refused
	}
	if e.known&need != need {
		return false, false
	}
	return true, true
}

// putAccessLocked records what the server said of key's rights: known of
// them, granted; with the object's attributes a (nil: n's own); n.mu is
// held. Rights said of the same attributes before are kept.
func (n *node) putAccessLocked(key string, known, granted uint32, a *nfs3.Attr, at time.Time) {
	if a == nil {
		a = &n.attrs.attr
	}
	e, ok := n.acc[key]
	if ok && sameAccess(&e.attr, a) {
		e.granted = e.granted&^known | granted&known
		e.known |= known
		if !at.IsZero() {
			e.at = at
		}
	} else {
		e = accessEntry{known: known, granted: granted & known, attr: *a, at: at}
	}
	e.attr = *a
	if n.acc == nil {
		n.acc = make(map[string]accessEntry)
	}
	if _, ok := n.acc[key]; !ok && len(n.acc) >= maxAccessEntries {
		clear(n.acc)
	}
	n.acc[key] = e
}

// askAccess sends ACCESS for the caller of ctx, records the answer (with
// stamp, for an open that follows: see takeAccessAttr) and returns the
// reply, whose attributes are not recorded as n's (see checkAccess).
func (n *node) askAccess(ctx context.Context, stamp bool) (nfs3.AccessResult, error) {
	n.mu.Lock()
	asked := accessAsked(n.attrs.attr.Type)
	n.mu.Unlock()
	var r nfs3.AccessResult
	err := n.do(ctx, func(fh nfs3.FileHandle) (err error) {
		r, err = n.fsys.c.Access(ctx, fh, asked)
		return err
	})
	if err != nil {
		n.forgetIfStale(err)
		return r, err
	}
	if r.Attr != nil {
		asked = accessAsked(r.Attr.Type)
	}
	n.fsys.learnRootRights(ctx, r.Attr, r.Access)
	var at time.Time
	if stamp {
		at = n.fsys.now()
	}
	n.mu.Lock()
	n.putAccessLocked(accessKey(ctx), asked, r.Access, r.Attr, at)
	n.mu.Unlock()
	return r, nil
}

// checkAccess decides whether the caller of ctx may do what mask (may*
// bits) asks of n: from the access cache, or by an ACCESS call. It
// returns the attributes an ACCESS call brought (nil: none made), which
// are recorded as n's unless keep (the caller records them: an open's
// close-to-open revalidation compares them with the old ones).
func (n *node) checkAccess(ctx context.Context, mask uint32, keep bool) (*nfs3.Attr, syscall.Errno) {
	if mask == 0 {
		return nil, 0
	}
	key := accessKey(ctx)
	n.mu.Lock()
	typ := n.attrs.attr.Type
	need, ok := accessNeed(typ, mask)
	allowed, known := n.cachedAccessLocked(key, need)
	n.mu.Unlock()
	if !ok {
		return nil, syscall.EACCES
	}
	if keep && known && !allowed {
		// An open revalidates the file before the kernel client's
		// permission check (close-to-open): a refusal is not taken
		// from the cache, the ACCESS asked again is that
		// revalidation (another client's chmod since is seen). A
		// grant is checked again after the revalidation instead
		// (recheckOpenAccess).
		known = false
	}
	if known {
		if !allowed {
			return nil, syscall.EACCES
		}
		return nil, 0
	}
	r, err := n.askAccess(ctx, false)
	if err != nil {
		return nil, toErrno(err)
	}
	if r.Attr != nil && !keep {
		n.setAttr(r.Attr)
	}
	if r.Attr != nil && r.Attr.Type != typ {
		need, ok = accessNeed(r.Attr.Type, mask)
		if !ok {
			return r.Attr, syscall.EACCES
		}
	}
	if r.Access&need != need {
		return r.Attr, syscall.EACCES
	}
	return r.Attr, 0
}

// takeAccessAttr returns the attributes the caller's ACCESS of n brought
// within accessFresh, once, if they are still n's: an open takes them as
// its close-to-open revalidation.
func (n *node) takeAccessAttr(key string) (nfs3.Attr, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	e, ok := n.acc[key]
	if !ok || e.at.IsZero() {
		return nfs3.Attr{}, false
	}
	at := e.at
	e.at = time.Time{}
	n.acc[key] = e
	if n.fsys.now().Sub(at) >= accessFresh || !sameAccess(&e.attr, &n.attrs.attr) {
		return nfs3.Attr{}, false
	}
	return n.attrs.attr, true
}

// accessHolds reports whether the caller's cached rights on n still
// answer (n's attributes unchanged since: an open's revalidation may show
// them changed, and the decision is then asked again).
func (n *node) accessHolds(key string, mask uint32) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	need, _ := accessNeed(n.attrs.attr.Type, mask)
	_, known := n.cachedAccessLocked(key, need)
	return known
}

// learnSearch records what the caller's LOOKUP in directory n, made with
// ctx and ended with err, says of its search permission there: a name
// found or missing means allowed, EACCES refused (knfsd checks search
// before it looks).
func (n *node) learnSearch(ctx context.Context, err error) {
	allowed := err == nil
	if err != nil {
		switch toErrno(err) {
		case syscall.ENOENT:
			allowed = true
		case syscall.EACCES:
		default:
			return // says nothing of it
		}
	}
	var granted uint32
	if allowed {
		granted = nfs3.AccessLookup
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.putAccessLocked(accessKey(ctx), nfs3.AccessLookup, granted, nil, time.Time{})
}

// searchVerdict returns what the access cache says of the caller's
// search of directory n.
func (n *node) searchVerdict(key string) (allowed, known bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cachedAccessLocked(key, nfs3.AccessLookup)
}

// madeBy records the rights of the caller of ctx on directory n, which it
// has just made: the server made it with the caller's credential, so the
// caller (squashed or not, mapped or not) is its owner there, and may read
// and search it if the owner's bits say so. Only those grants are
// recorded (a caller the server does not squash may have more). Without
// this, tar -x would ask the server once in every private directory it
// makes (GNU tar makes them 0700 and sets their modes at the end).
func (n *node) madeBy(ctx context.Context) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var granted uint32
	if n.attrs.attr.Mode&0o400 != 0 {
		granted |= nfs3.AccessRead
	}
	if n.attrs.attr.Mode&0o100 != 0 {
		granted |= nfs3.AccessLookup
	}
	n.putAccessLocked(accessKey(ctx), granted, granted, nil, time.Time{})
}

var _ fs.NodeAccesser = (*node)(nil)

// Access implements fs.NodeAccesser: access(2), faccessat(2) and chdir
// (FUSE ACCESS), decided by the server (see above). A file whose mode has
// no execute bit is not executable, whatever the server says
// (nfs_execute_ok).
func (n *node) Access(ctx context.Context, mask uint32) syscall.Errno {
	mask &= mayRead | mayWrite | mayExec
	if mask == 0 {
		return 0
	}
	ctx, done := n.fsys.callCtx(ctx)
	defer done()
	if _, errno := n.checkAccess(ctx, mask, false); errno != 0 {
		return errno
	}
	if mask&mayExec != 0 {
		n.mu.Lock()
		a := n.attrs.attr
		n.mu.Unlock()
		if a.Type != nfs3.TypeDir && a.Mode&0o111 == 0 {
			return syscall.EACCES
		}
	}
	return 0
}

// accessKeyOf returns the key of the credential the calls of the FUSE
// request of fctx carry (see FS.callCtx), without making their context.
func (f *FS) accessKeyOf(fctx context.Context) string {
	if !f.opts.CallerIdentity {
		return ""
	}
	caller, ok := fuse.FromContext(fctx)
	if !ok || caller.Pid == 0 {
		return ""
	}
	cctx, ok := f.creds.credential(caller)
	if !ok {
		return ""
	}
	return accessKey(cctx)
}

// openAccess decides an open with flags by the caller of ctx (FUSE OPEN).
// It returns the attributes of the caller's ACCESS made for it, or by
// its stat just before (takeAccessAttr), not yet recorded: the open's
// close-to-open revalidation.
func (n *node) openAccess(ctx context.Context, flags uint32) (*nfs3.Attr, syscall.Errno) {
	a, errno := n.checkAccess(ctx, openMask(flags), true)
	if errno != 0 || a != nil {
		return a, errno
	}
	if attr, ok := n.takeAccessAttr(accessKey(ctx)); ok {
		return &attr, 0
	}
	return nil, 0
}

// recheckOpenAccess asks again, after an open's close-to-open
// revalidation (unless it was the ACCESS itself: byAccess), when the
// attributes it brought show the file changed since the cached rights
// that let the open through (its mode, owner or ctime), as the kernel
// client's permission check after its revalidation does.
func (n *node) recheckOpenAccess(ctx context.Context, flags uint32, byAccess bool) syscall.Errno {
	mask := openMask(flags)
	if byAccess || n.accessHolds(accessKey(ctx), mask) {
		return 0
	}
	_, errno := n.checkAccess(ctx, mask, false)
	return errno
}

// opendirAccess decides the caller's opendir of n: reading, as the
// server says.
func (n *node) opendirAccess(fctx context.Context) syscall.Errno {
	ctx, done := n.fsys.callCtx(fctx)
	defer done()
	_, errno := n.checkAccess(ctx, mayRead, false)
	return errno
}

// carryAccessLocked keeps the cached rights of n across a change this
// mount made (w: its wcc_data), as the Linux client does: the entries made
// for n's attributes before it hold for the attributes after it, unless
// the mode, owner or type changed, or the pre-operation attributes show
// that someone else changed n too (without them, the change is taken as
// the mount's own, as the Linux client forces them). n.mu is held.
func (n *node) carryAccessLocked(w *nfs3.WccData) {
	a := w.After
	if a == nil || len(n.acc) == 0 {
		return
	}
	if w.Before != nil && !sameWcc(&n.attrs.attr, w.Before) {
		return
	}
	cur := &n.attrs.attr
	if a.Mode != cur.Mode || a.UID != cur.UID || a.GID != cur.GID || a.Type != cur.Type {
		return
	}
	for k, e := range n.acc {
		if sameAccess(&e.attr, cur) {
			e.attr = *a
			n.acc[k] = e
		}
	}
}

// protectedHardlinks is where the kernel says whether link(2) is
// restricted (fs.protected_hardlinks); tests may point it elsewhere.
var protectedHardlinks = "/proc/sys/fs/protected_hardlinks"

// mayLink is the part of the kernel's check of a hard link to n
// (may_linkat, with fs.protected_hardlinks set) that it leaves to the
// file system without default_permissions: a caller that neither owns
// the file nor is root may link to it only if it may read and write it,
// as the server says (the kernel client asks ACCESS there). The rest of
// that check (the owner, the file's type and set-ID bits) the kernel has
// made. Refused: EPERM, as the kernel's.
func (n *node) mayLink(ctx context.Context, caller *fuse.Caller) syscall.Errno {
	if caller == nil || caller.Uid == 0 {
		return 0
	}
	n.mu.Lock()
	a := n.attrs.attr
	n.mu.Unlock()
	if a.UID == caller.Uid || a.Type != nfs3.TypeReg {
		return 0
	}
	b, err := os.ReadFile(protectedHardlinks)
	if err != nil || strings.TrimSpace(string(b)) == "0" {
		return 0
	}
	if _, errno := n.checkAccess(ctx, mayRead|mayWrite, false); errno != 0 {
		if errno == syscall.EACCES {
			return syscall.EPERM
		}
		return errno
	}
	return 0
}
