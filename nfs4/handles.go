package nfs4

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"math"
	"sync/atomic"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// The handle-based API: each method sends one COMPOUND (SEQUENCE, PUTFH or
// PUTROOTFH, the operation, and GETFH/GETATTR where the caller needs the
// result's handle or attributes). Failures are an *OpError (naming the
// operation, unwrapping to its Status), a *ReplyError, a sunrpc error or
// the context's error.

// RootFH returns the server's root handle (PUTROOTFH, GETFH; RFC 8881
// §18.21): with knfsd, the pseudo-root under which the exports appear.
func (c *Client) RootFH(ctx context.Context) (FileHandle, error) {
	var fh FileHandle
	err := c.call(ctx, func(cb *compound) {
		cb.putRootFH()
		cb.getFH(&fh)
	})
	return fh, err
}

// putDir starts a compound at dir, or at the root for a nil dir.
func (cb *compound) putDir(dir FileHandle) {
	if dir == nil {
		cb.putRootFH()
		return
	}
	cb.putFH(dir)
}

// LookupPath looks up the components one after the other from dir (nil: the
// root) in one compound (LOOKUP, RFC 8881 §18.13) and returns the last
// one's handle and attributes (StatAttrs). ".." is LOOKUPP.
func (c *Client) LookupPath(ctx context.Context, dir FileHandle, names ...string) (FileHandle, Attr, error) {
	if dir != nil {
		if err := checkFH(dir); err != nil {
			return nil, Attr{}, err
		}
	}
	for _, n := range names {
		if n != ".." {
			if err := checkName(n); err != nil {
				return nil, Attr{}, err
			}
		}
	}
	// A compound holds SEQUENCE, PUTFH, the lookups, GETFH and GETATTR
	// within the session's ca_maxoperations: a longer path takes several.
	_, fore := c.Session()
	per := max(int(fore.MaxOperations)-4, 1)
	for {
		step := names[:min(per, len(names))]
		names = names[len(step):]
		var fh FileHandle
		var a Attr
		err := c.call(ctx, func(cb *compound) {
			cb.putDir(dir)
			for _, n := range step {
				if n == ".." {
					cb.lookupP()
				} else {
					cb.lookup(n)
				}
			}
			cb.getFH(&fh)
			cb.getAttr(StatAttrs, &a)
		})
		if err != nil || len(names) == 0 {
			return fh, a, err
		}
		dir = fh
	}
}

// Lookup looks name up in dir (LOOKUP, RFC 8881 §18.13).
func (c *Client) Lookup(ctx context.Context, dir FileHandle, name string) (FileHandle, Attr, error) {
	if err := checkFH(dir); err != nil {
		return nil, Attr{}, err
	}
	return c.LookupPath(ctx, dir, name)
}

// LookupParent returns dir's parent (LOOKUPP, RFC 8881 §18.14).
func (c *Client) LookupParent(ctx context.Context, dir FileHandle) (FileHandle, Attr, error) {
	if err := checkFH(dir); err != nil {
		return nil, Attr{}, err
	}
	return c.LookupPath(ctx, dir, "..")
}

// Getattr returns fh's attributes in mask (nil: StatAttrs) (GETATTR, RFC
// 8881 §18.7).
func (c *Client) Getattr(ctx context.Context, fh FileHandle, mask Bitmap) (Attr, error) {
	if err := checkFH(fh); err != nil {
		return Attr{}, err
	}
	if mask == nil {
		mask = StatAttrs
	}
	var a Attr
	err := c.call(ctx, func(cb *compound) {
		cb.putFH(fh)
		cb.getAttr(mask, &a)
	})
	return a, err
}

// Setattr sets attributes of fh (SETATTR, RFC 8881 §18.30) and returns its
// attributes after. A size change needs the stateid of an open for writing
// (or AnonymousStateID, which the server may refuse for an open file).
func (c *Client) Setattr(ctx context.Context, fh FileHandle, sid StateID, s SetAttr) (Attr, error) {
	if err := checkFH(fh); err != nil {
		return Attr{}, err
	}
	var a Attr
	err := c.call(ctx, func(cb *compound) {
		cb.putFH(fh)
		cb.setAttr(sid, &s, nil)
		cb.getAttr(StatAttrs, &a)
	})
	return a, err
}

// Access asks which of the access bits (Access*) the caller has on fh
// (ACCESS, RFC 8881 §18.1).
func (c *Client) Access(ctx context.Context, fh FileHandle, bits uint32) (AccessResult, error) {
	if err := checkFH(fh); err != nil {
		return AccessResult{}, err
	}
	var r AccessResult
	err := c.call(ctx, func(cb *compound) {
		cb.putFH(fh)
		cb.access(bits, &r)
	})
	return r, err
}

// OpenFile is an open file: its handle, the open stateid (for READ, WRITE,
// SETATTR of the size, LOCK and CLOSE) and its attributes after the open.
type OpenFile struct {
	FH     FileHandle
	Attr   Attr
	Result OpenResult
}

// StateID returns the open's stateid.
func (o *OpenFile) StateID() StateID { return o.Result.StateID }

var ownerSeq atomic.Uint64

// newOwner returns a state owner (open_owner4, lock_owner4) of this client
// used for one open or one lock owner only: an open owner per open keeps
// each open's state apart, as a CLOSE ends only its own open (RFC 8881
// §8.2: an owner's opens of one file share one stateid).
func (c *Client) newOwner(kind byte) []byte {
	b := []byte{kind}
	return binary.BigEndian.AppendUint64(b, ownerSeq.Add(1))
}

// Open opens (and with how.Create creates) name in dir (OPEN with
// CLAIM_NULL, RFC 8881 §18.16) with the share access and deny bits given,
// under an open owner of its own, and returns the open file. Delegations
// are declined. Close it with Close.
func (c *Client) Open(ctx context.Context, dir FileHandle, name string, access, deny uint32, how *OpenHow) (*OpenFile, error) {
	if err := checkFH(dir); err != nil {
		return nil, err
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	if how == nil {
		how = &OpenHow{}
	}
	if how.Create && how.Mode == Exclusive4 {
		return nil, errors.New("nfs4: EXCLUSIVE4 is NFSv4.0's: use Exclusive41")
	}
	return c.openAt(ctx, dir, nil, name, access, deny, how)
}

// openAt opens name in the directory reached from dir through the
// components walk, in one compound (PUTFH, LOOKUP..., OPEN, GETFH,
// GETATTR).
func (c *Client) openAt(ctx context.Context, dir FileHandle, walk []string, name string, access, deny uint32, how *OpenHow) (*OpenFile, error) {
	owner := stateOwner{ClientID: c.ClientID(), Owner: c.newOwner('o')}
	o := &OpenFile{}
	err := c.call(ctx, func(cb *compound) {
		cb.putDir(dir)
		for _, n := range walk {
			cb.lookup(n)
		}
		cb.open(owner, access, deny, how, name, &o.Result)
		cb.getFH(&o.FH)
		cb.getAttr(StatAttrs, &o.Attr)
	})
	if err != nil {
		return nil, err
	}
	if o.Result.Flags&OpenResultConfirm != 0 {
		return nil, errors.New("nfs4: the server asks for OPEN_CONFIRM, which NFSv4.1 has not")
	}
	return o, nil
}

// CloseFile ends an open (CLOSE, RFC 8881 §18.2).
func (c *Client) CloseFile(ctx context.Context, fh FileHandle, sid StateID) error {
	if err := checkFH(fh); err != nil {
		return err
	}
	return c.call(ctx, func(cb *compound) {
		cb.putFH(fh)
		cb.closeOp(sid, nil)
	})
}

// Read reads up to len(p) bytes of fh at off into p (READ, RFC 8881
// §18.22) under stateid sid. The data is the DDP-eligible result (RFC 8267
// §6.1): p is offered to the transport as Request.ReplyBulk, so an RDMA
// transport lands the data in p directly.
func (c *Client) Read(ctx context.Context, fh FileHandle, sid StateID, off uint64, p []byte) (ReadResult, error) {
	if err := checkFH(fh); err != nil {
		return ReadResult{}, err
	}
	if len(p) > math.MaxUint32 {
		p = p[:math.MaxUint32]
	}
	var r ReadResult
	err := c.call(ctx, func(cb *compound) {
		r = ReadResult{}
		cb.putFH(fh)
		cb.read(sid, off, p, &r)
	})
	return r, err
}

// Write writes data to fh at off (WRITE, RFC 8881 §18.32) under stateid
// sid. The data is the DDP-eligible argument (RFC 8267 §6.1): it travels as
// Request.Bulk. The server may write fewer bytes (WriteResult.Count).
func (c *Client) Write(ctx context.Context, fh FileHandle, sid StateID, off uint64, data []byte, stable StableHow) (WriteResult, error) {
	if err := checkFH(fh); err != nil {
		return WriteResult{}, err
	}
	if len(data) > math.MaxUint32 {
		return WriteResult{}, fmt.Errorf("nfs4: WRITE of %d bytes", len(data))
	}
	var r WriteResult
	err := c.call(ctx, func(cb *compound) {
		cb.putFH(fh)
		cb.write(sid, off, stable, data, &r)
	})
	if err == nil && r.Count > uint32(len(data)) {
		return r, &ReplyError{Ops: []Op{OpWrite}, Err: fmt.Errorf("wrote %d of %d bytes", r.Count, len(data))}
	}
	return r, err
}

// Commit makes unstable writes to fh in [off, off+count) durable (COMMIT,
// RFC 8881 §18.3; count 0: to the end) and returns the write verifier.
func (c *Client) Commit(ctx context.Context, fh FileHandle, off uint64, count uint32) (Verifier, error) {
	if err := checkFH(fh); err != nil {
		return Verifier{}, err
	}
	var v Verifier
	err := c.call(ctx, func(cb *compound) {
		cb.putFH(fh)
		cb.commit(off, count, &v)
	})
	return v, err
}

// Mkdir creates directory name in dir (CREATE, RFC 8881 §18.4) and returns
// its handle and attributes.
func (c *Client) Mkdir(ctx context.Context, dir FileHandle, name string, attr SetAttr) (FileHandle, Attr, error) {
	if err := checkFH(dir); err != nil {
		return nil, Attr{}, err
	}
	if err := checkName(name); err != nil {
		return nil, Attr{}, err
	}
	var fh FileHandle
	var a Attr
	var ci ChangeInfo
	err := c.call(ctx, func(cb *compound) {
		cb.putFH(dir)
		cb.createDir(name, &attr, &ci)
		cb.getFH(&fh)
		cb.getAttr(StatAttrs, &a)
	})
	return fh, a, err
}

// Symlink creates symbolic link name in dir pointing to target (CREATE of
// NF4LNK, RFC 8881 §18.4). The link text is the DDP-eligible argument (RFC
// 8267 §6.1).
func (c *Client) Symlink(ctx context.Context, dir FileHandle, name, target string, attr SetAttr) (FileHandle, Attr, error) {
	if err := checkFH(dir); err != nil {
		return nil, Attr{}, err
	}
	if err := checkName(name); err != nil {
		return nil, Attr{}, err
	}
	if target == "" || len(target) > MaxLinkText {
		return nil, Attr{}, fmt.Errorf("nfs4: symbolic link text of %d bytes (1 to %d)", len(target), MaxLinkText)
	}
	var fh FileHandle
	var a Attr
	var ci ChangeInfo
	err := c.call(ctx, func(cb *compound) {
		cb.putFH(dir)
		cb.createSymlink(name, target, &attr, &ci)
		cb.getFH(&fh)
		cb.getAttr(StatAttrs, &a)
	})
	return fh, a, err
}

// Readlink reads the text of symbolic link fh (READLINK, RFC 8881 §18.24),
// the DDP-eligible result (RFC 8267 §6.1).
func (c *Client) Readlink(ctx context.Context, fh FileHandle) (string, error) {
	if err := checkFH(fh); err != nil {
		return "", err
	}
	var s string
	err := c.call(ctx, func(cb *compound) {
		cb.putFH(fh)
		cb.readlink(&s)
	})
	return s, err
}

// Remove removes name, a file or an empty directory, from dir (REMOVE, RFC
// 8881 §18.25).
func (c *Client) Remove(ctx context.Context, dir FileHandle, name string) (ChangeInfo, error) {
	if err := checkFH(dir); err != nil {
		return ChangeInfo{}, err
	}
	if err := checkName(name); err != nil {
		return ChangeInfo{}, err
	}
	var ci ChangeInfo
	err := c.call(ctx, func(cb *compound) {
		cb.putFH(dir)
		cb.remove(name, &ci)
	})
	return ci, err
}

// Rename renames from in fromDir to to in toDir (SAVEFH, RENAME; RFC 8881
// §18.26).
func (c *Client) Rename(ctx context.Context, fromDir FileHandle, from string, toDir FileHandle, to string) error {
	if err := errors.Join(checkFH(fromDir), checkFH(toDir), checkName(from), checkName(to)); err != nil {
		return err
	}
	var src, dst ChangeInfo
	return c.call(ctx, func(cb *compound) {
		cb.putFH(fromDir)
		cb.saveFH()
		cb.putFH(toDir)
		cb.rename(from, to, &src, &dst)
	})
}

// Link creates hard link name in dir to fh (SAVEFH, LINK; RFC 8881 §18.9).
func (c *Client) Link(ctx context.Context, fh, dir FileHandle, name string) error {
	if err := errors.Join(checkFH(fh), checkFH(dir), checkName(name)); err != nil {
		return err
	}
	var ci ChangeInfo
	return c.call(ctx, func(cb *compound) {
		cb.putFH(fh)
		cb.saveFH()
		cb.putFH(dir)
		cb.link(name, &ci)
	})
}

// DefaultDirSize is READDIR's maxcount when none is given.
const DefaultDirSize = 32 << 10

// Readdir reads one page of dir from cookie with the attributes in mask
// (READDIR, RFC 8881 §18.23). Start with cookie 0 and a zero verifier;
// continue with the last entry's cookie and the returned verifier.
func (c *Client) Readdir(ctx context.Context, dir FileHandle, cookie uint64, verf Verifier, mask Bitmap) (ReaddirResult, error) {
	if err := checkFH(dir); err != nil {
		return ReaddirResult{}, err
	}
	var r ReaddirResult
	err := c.call(ctx, func(cb *compound) {
		r = ReaddirResult{}
		cb.putFH(dir)
		cb.readdir(cookie, verf, DefaultDirSize/4, DefaultDirSize, mask, &r)
	})
	return r, err
}

// CookieLoopError reports a directory listing that does not advance.
type CookieLoopError struct{ Cookie uint64 }

func (e *CookieLoopError) Error() string {
	return fmt.Sprintf("nfs4: directory listing loops or stalls at cookie %d", e.Cookie)
}

// DirEntries lists dir with READDIR (attributes: mask, nil for DirAttrs),
// page after page as they are consumed. NFSv4 servers return no "." or
// "..". An entry whose attributes the server could not get has
// Attr.RdattrError set (with DirAttrs).
func (c *Client) DirEntries(ctx context.Context, dir FileHandle, mask Bitmap) iter.Seq2[DirEntry, error] {
	if mask == nil {
		mask = DirAttrs
	}
	return func(yield func(DirEntry, error) bool) {
		var cookie uint64
		var verf Verifier
		seen := map[uint64]bool{0: true}
		for {
			r, err := c.Readdir(ctx, dir, cookie, verf, mask)
			if err != nil {
				yield(DirEntry{}, err)
				return
			}
			for _, e := range r.Entries {
				if !yield(e, nil) {
					return
				}
			}
			if r.EOF {
				return
			}
			if len(r.Entries) == 0 {
				yield(DirEntry{}, &CookieLoopError{Cookie: cookie})
				return
			}
			cookie = r.Entries[len(r.Entries)-1].Cookie
			if seen[cookie] {
				yield(DirEntry{}, &CookieLoopError{Cookie: cookie})
				return
			}
			seen[cookie] = true
			verf = r.Verf
		}
	}
}

// ReadDirAll returns all of dir's entries with DirAttrs.
func (c *Client) ReadDirAll(ctx context.Context, dir FileHandle) ([]DirEntry, error) {
	var all []DirEntry
	for e, err := range c.DirEntries(ctx, dir, nil) {
		if err != nil {
			return all, err
		}
		all = append(all, e)
	}
	return all, nil
}

// LockOwner is a lock owner of this client (lock_owner4, RFC 8881 §18.10):
// the first LOCK introduces it with the open's stateid, later ones use the
// lock stateid it got. It is not safe for concurrent use.
type LockOwner struct {
	Owner []byte
	open  StateID
	lock  StateID
	has   bool
}

// NewLockOwner returns a lock owner for locks on the file opened as o.
func (c *Client) NewLockOwner(o *OpenFile) *LockOwner {
	return &LockOwner{Owner: c.newOwner('l'), open: o.StateID()}
}

// StateID returns the owner's lock stateid, valid after its first lock.
func (l *LockOwner) StateID() StateID { return l.lock }

// Lock locks [off, off+length) of fh (length math.MaxUint64: to the end)
// for owner l (LOCK, RFC 8881 §18.10). A conflicting lock is a
// *LockDeniedError (errors.Is ErrDenied, EAGAIN).
func (c *Client) Lock(ctx context.Context, fh FileHandle, l *LockOwner, typ LockType, off, length uint64) error {
	if err := checkFH(fh); err != nil {
		return err
	}
	locker := Locker{New: !l.has, OpenState: l.open, Owner: l.Owner, LockState: l.lock}
	var sid StateID
	var denied LockDenied
	id := c.ClientID()
	err := c.call(ctx, func(cb *compound) {
		cb.putFH(fh)
		cb.lock(typ, false, off, length, id, &locker, &sid, &denied)
	})
	var oe *OpError
	if errors.As(err, &oe) && oe.Status == ErrDenied {
		return &LockDeniedError{Conflict: denied}
	}
	if err == nil {
		l.lock, l.has = sid, true
	}
	return err
}

// TestLock reports the lock that would conflict with typ on [off,
// off+length) for owner l (LOCKT, RFC 8881 §18.11), nil when none would.
func (c *Client) TestLock(ctx context.Context, fh FileHandle, l *LockOwner, typ LockType, off, length uint64) (*LockDenied, error) {
	if err := checkFH(fh); err != nil {
		return nil, err
	}
	var denied LockDenied
	owner := stateOwner{ClientID: c.ClientID(), Owner: l.Owner}
	err := c.call(ctx, func(cb *compound) {
		cb.putFH(fh)
		cb.lockT(typ, off, length, owner, &denied)
	})
	var oe *OpError
	if errors.As(err, &oe) && oe.Status == ErrDenied {
		return &denied, nil
	}
	return nil, err
}

// Unlock releases [off, off+length) held by l (LOCKU, RFC 8881 §18.12).
func (c *Client) Unlock(ctx context.Context, fh FileHandle, l *LockOwner, typ LockType, off, length uint64) error {
	if err := checkFH(fh); err != nil {
		return err
	}
	if !l.has {
		return errors.New("nfs4: unlock by a lock owner that holds no lock")
	}
	var sid StateID
	err := c.call(ctx, func(cb *compound) {
		cb.putFH(fh)
		cb.lockU(typ, l.lock, off, length, &sid)
	})
	if err == nil {
		l.lock = sid
	}
	return err
}

// Seek finds the next data or hole at or after off (SEEK, RFC 7862
// §15.11). Past the last data it is ErrNXIO (ENXIO), as lseek's.
func (c *Client) Seek(ctx context.Context, fh FileHandle, sid StateID, off uint64, what Content) (SeekResult, error) {
	if err := checkFH(fh); err != nil {
		return SeekResult{}, err
	}
	var r SeekResult
	err := c.call(ctx, func(cb *compound) {
		cb.putFH(fh)
		cb.seek(sid, off, what, &r)
	})
	return r, err
}

// Allocate reserves space for [off, off+length) of fh (ALLOCATE, RFC 7862
// §15.1).
func (c *Client) Allocate(ctx context.Context, fh FileHandle, sid StateID, off, length uint64) error {
	return c.allocOp(ctx, false, fh, sid, off, length)
}

// Deallocate punches a hole over [off, off+length) of fh (DEALLOCATE, RFC
// 7862 §15.4): reads there return zeros.
func (c *Client) Deallocate(ctx context.Context, fh FileHandle, sid StateID, off, length uint64) error {
	return c.allocOp(ctx, true, fh, sid, off, length)
}

func (c *Client) allocOp(ctx context.Context, dealloc bool, fh FileHandle, sid StateID, off, length uint64) error {
	if err := checkFH(fh); err != nil {
		return err
	}
	return c.call(ctx, func(cb *compound) {
		cb.putFH(fh)
		cb.allocate(dealloc, sid, off, length)
	})
}

// Copy copies count bytes (0: to the source's end) from src at srcOff to
// dst at dstOff on the server (COPY, RFC 7862 §15.2; synchronous and
// intra-server), under the two files' stateids, and returns how much it
// copied. A server that answers asynchronously is an error: this client
// has no back channel for CB_OFFLOAD.
func (c *Client) Copy(ctx context.Context, src FileHandle, srcSID StateID, srcOff uint64, dst FileHandle, dstSID StateID, dstOff, count uint64) (CopyResult, error) {
	if err := errors.Join(checkFH(src), checkFH(dst)); err != nil {
		return CopyResult{}, err
	}
	var r CopyResult
	err := c.call(ctx, func(cb *compound) {
		r = CopyResult{}
		cb.putFH(src)
		cb.saveFH()
		cb.putFH(dst)
		cb.copyOp(srcSID, dstSID, srcOff, dstOff, count, &r)
	})
	if err == nil && r.Async {
		return r, errors.New("nfs4: the server made COPY asynchronous; this client cannot receive CB_OFFLOAD")
	}
	return r, err
}

// Null calls NFSPROC4_NULL.
func (c *Client) Null(ctx context.Context) error {
	r, err := c.rpc.Call(ctx, procNull, &sunrpc.Args{})
	if err != nil {
		return err
	}
	r.Release()
	return nil
}
