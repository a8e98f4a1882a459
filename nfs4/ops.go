package nfs4

import (
	"fmt"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// FileHandle is nfs_fh4 (RFC 8881 §3.2, §4): at most MaxFH bytes. It is
// opaque to the client.
type FileHandle []byte

// StateID is stateid4 (RFC 8881 §8.2): a sequence number and 12 opaque
// bytes.
type StateID struct {
	Seq   uint32
	Other [12]byte
}

// Special stateids (RFC 8881 §8.2.3): all zeros is the anonymous stateid,
// all ones the READ-bypass one; seqid 1 and other all zeros is the current
// stateid.
var (
	AnonymousStateID = StateID{}
	CurrentStateID   = StateID{Seq: 1}
)

// Verifier is verifier4 (RFC 8881 §3.2: NFS4_VERIFIER_SIZE, 8 bytes).
type Verifier [8]byte

// SessionID is sessionid4 (RFC 8881 §3.2: NFS4_SESSIONID_SIZE, 16 bytes).
type SessionID [16]byte

// ChangeInfo is change_info4 (RFC 8881 §3.3.8): a directory's
// change attribute before and after an operation; Atomic says both were taken
// atomically with it.
type ChangeInfo struct {
	Atomic        bool
	Before, After uint64
}

func appendFH(b []byte, fh FileHandle) []byte { return sunrpc.AppendOpaque(b, fh) }

func appendStateID(b []byte, s StateID) []byte {
	return append(sunrpc.AppendUint32(b, s.Seq), s.Other[:]...)
}

func decodeStateID(d *sunrpc.Decoder) StateID {
	var s StateID
	s.Seq = d.Uint32()
	copy(s.Other[:], d.FixedOpaque(12))
	return s
}

func decodeChangeInfo(d *sunrpc.Decoder) ChangeInfo {
	return ChangeInfo{Atomic: d.Bool(), Before: d.Uint64(), After: d.Uint64()}
}

// checkFH refuses a handle no server could have given.
func checkFH(fh FileHandle) error {
	if len(fh) == 0 || len(fh) > MaxFH {
		return fmt.Errorf("nfs4: file handle of %d bytes (want 1 to %d)", len(fh), MaxFH)
	}
	return nil
}

// checkName refuses a component4 (RFC 8881 §3.2, a utf8str_cs) that cannot be
// one: empty, too long, or holding a '/' or NUL.
func checkName(name string) error {
	if name == "" || len(name) > maxName {
		return fmt.Errorf("nfs4: invalid name %q", name)
	}
	for i := 0; i < len(name); i++ {
		if name[i] == '/' || name[i] == 0 {
			return fmt.Errorf("nfs4: invalid name %q", name)
		}
	}
	return nil
}

const (
	stateIDSize    = 16
	changeInfoSize = 4 + 8 + 8
)

// okOnly returns a result decoder that runs fn for the NFS4_OK arm only.
func okOnly(fn func(d *sunrpc.Decoder)) opResult {
	return func(d *sunrpc.Decoder, st Status) {
		if st == OK && fn != nil {
			fn(d)
		}
	}
}

// putFH adds PUTFH (RFC 8881 §18.19).
func (c *compound) putFH(fh FileHandle) { c.add(OpPutFH, appendFH(nil, fh), 0, nil) }

// putRootFH adds PUTROOTFH (RFC 8881 §18.21).
func (c *compound) putRootFH() { c.add(OpPutRootFH, nil, 0, nil) }

// saveFH adds SAVEFH (RFC 8881 §18.28).
func (c *compound) saveFH() { c.add(OpSaveFH, nil, 0, nil) }

// restoreFH adds RESTOREFH (RFC 8881 §18.27).
func (c *compound) restoreFH() { c.add(OpRestoreFH, nil, 0, nil) }

// getFH adds GETFH (RFC 8881 §18.8), storing the current handle in *fh.
func (c *compound) getFH(fh *FileHandle) {
	c.add(OpGetFH, nil, 4+MaxFH, okOnly(func(d *sunrpc.Decoder) {
		*fh = FileHandle(d.Opaque(MaxFH))
		if d.Err() == nil && len(*fh) == 0 {
			d.Fail(fmt.Errorf("empty file handle"))
		}
		*fh = append(FileHandle(nil), *fh...)
	}))
}

// lookup adds LOOKUP (RFC 8881 §18.13).
func (c *compound) lookup(name string) { c.add(OpLookup, sunrpc.AppendString(nil, name), 0, nil) }

// lookupP adds LOOKUPP (RFC 8881 §18.14).
func (c *compound) lookupP() { c.add(OpLookupP, nil, 0, nil) }

// getAttr adds GETATTR (RFC 8881 §18.7) of mask, decoding into *a.
func (c *compound) getAttr(mask Bitmap, a *Attr) {
	c.add(OpGetattr, appendBitmap(nil, mask), maxAttrSize, okOnly(func(d *sunrpc.Decoder) {
		*a = decodeFattr(d)
	}))
}

// setAttr adds SETATTR (RFC 8881 §18.30); its result's attrsset bitmap is
// present in every arm.
func (c *compound) setAttr(sid StateID, s *SetAttr, set *Bitmap) {
	c.add(OpSetattr, appendFattr(appendStateID(nil, sid), s), 4+4*maxBitmapWords, func(d *sunrpc.Decoder, _ Status) {
		m := decodeBitmap(d)
		if set != nil {
			*set = m
		}
	})
}

// Access bits (RFC 8881 §18.1).
const (
	AccessRead    = 0x01
	AccessLookup  = 0x02
	AccessModify  = 0x04
	AccessExtend  = 0x08
	AccessDelete  = 0x10
	AccessExecute = 0x20
)

// AccessResult is ACCESS4resok (RFC 8881 §18.1): the bits the server could
// check, and those of them granted.
type AccessResult struct{ Supported, Access uint32 }

// access adds ACCESS (RFC 8881 §18.1).
func (c *compound) access(bits uint32, r *AccessResult) {
	c.add(OpAccess, sunrpc.AppendUint32(nil, bits), 8, okOnly(func(d *sunrpc.Decoder) {
		r.Supported, r.Access = d.Uint32(), d.Uint32()
	}))
}

// OPEN share access and deny (RFC 8881 §18.16.1).
const (
	ShareAccessRead  = 1
	ShareAccessWrite = 2
	ShareAccessBoth  = 3
	shareWantNoDeleg = 0x0400 // OPEN4_SHARE_ACCESS_WANT_NO_DELEG: this client has no back channel for recalls
	ShareDenyNone    = 0
	ShareDenyRead    = 1
	ShareDenyWrite   = 2
	ShareDenyBoth    = 3
)

// CreateMode is createmode4 (RFC 8881 §18.16.1).
type CreateMode uint32

// Create modes.
const (
	Unchecked   CreateMode = 0
	Guarded     CreateMode = 1
	Exclusive4  CreateMode = 2 // NFSv4.0's; an NFSv4.1 client uses Exclusive41
	Exclusive41 CreateMode = 3
)

// OpenHow says whether OPEN creates the file (RFC 8881 §18.16.1: openflag4
// and createhow4): Create false opens an existing file; otherwise Mode picks
// UNCHECKED4 or GUARDED4 with Attr, or EXCLUSIVE4_1 with Verf and Attr.
type OpenHow struct {
	Create bool
	Mode   CreateMode
	Attr   SetAttr
	Verf   Verifier
}

// OpenResult is OPEN4resok (RFC 8881 §18.16.2) less the delegation, which
// this client declines (it has no back channel to return one on recall).
type OpenResult struct {
	StateID      StateID
	ChangeInfo   ChangeInfo
	Flags        uint32 // rflags: OPEN4_RESULT_*
	AttrSet      Bitmap // with a create, the attributes the server set
	Delegated    bool   // the server granted a delegation anyway (it is returned at close)
	DelegStateID StateID
}

// Open flags in OpenResult.Flags (RFC 8881 §18.16.2).
const (
	OpenResultConfirm        = 0x2
	OpenResultLockTypePosix  = 0x4
	OpenResultPreserveUnlink = 0x8
	OpenResultMayNotifyLock  = 0x20
)

// stateOwner is open_owner4 and lock_owner4 (RFC 8881 §3.3.10, state_owner4).
type stateOwner struct {
	ClientID uint64
	Owner    []byte
}

const maxStateOwner = 1024

func appendOwner(b []byte, o stateOwner) []byte {
	return sunrpc.AppendOpaque(sunrpc.AppendUint64(b, o.ClientID), o.Owner)
}

func decodeOwner(d *sunrpc.Decoder) stateOwner {
	return stateOwner{ClientID: d.Uint64(), Owner: append([]byte(nil), d.Opaque(maxStateOwner)...)}
}

// open adds OPEN with CLAIM_NULL (RFC 8881 §18.16): name in the current
// directory, which becomes the current handle on success.
func (c *compound) open(owner stateOwner, access, deny uint32, how *OpenHow, name string, r *OpenResult) {
	b := sunrpc.AppendUint32(nil, 0) // seqid: ignored in NFSv4.1 (RFC 8881 §18.16.3)
	b = sunrpc.AppendUint32(b, access|shareWantNoDeleg)
	b = sunrpc.AppendUint32(b, deny)
	b = appendOwner(b, owner)
	if !how.Create {
		b = sunrpc.AppendUint32(b, 0) // OPEN4_NOCREATE
	} else {
		b = sunrpc.AppendUint32(b, 1) // OPEN4_CREATE
		b = sunrpc.AppendUint32(b, uint32(how.Mode))
		switch how.Mode {
		case Unchecked, Guarded:
			b = appendFattr(b, &how.Attr)
		case Exclusive4:
			b = append(b, how.Verf[:]...)
		case Exclusive41:
			b = append(b, how.Verf[:]...)
			b = appendFattr(b, &how.Attr)
		}
	}
	b = sunrpc.AppendUint32(b, 0) // CLAIM_NULL
	b = sunrpc.AppendString(b, name)
	c.add(OpOpen, b, stateIDSize+changeInfoSize+4+4+4*maxBitmapWords+256, okOnly(func(d *sunrpc.Decoder) {
		r.StateID = decodeStateID(d)
		r.ChangeInfo = decodeChangeInfo(d)
		r.Flags = d.Uint32()
		r.AttrSet = decodeBitmap(d)
		r.Delegated, r.DelegStateID = decodeDelegation(d)
	}))
}

// decodeDelegation reads open_delegation4 (RFC 8881 §18.16.2).
func decodeDelegation(d *sunrpc.Decoder) (bool, StateID) {
	switch t := d.Uint32(); t {
	case 0: // OPEN_DELEGATE_NONE
		return false, StateID{}
	case 1, 2: // READ, WRITE
		sid := decodeStateID(d)
		d.Bool() // recall
		if t == 2 {
			switch lim := d.Uint32(); lim { // nfs_space_limit4
			case 1:
				d.Uint64()
			case 2:
				d.Uint32()
				d.Uint32()
			default:
				d.Fail(fmt.Errorf("limit_by4 %d", lim))
			}
		}
		// nfsace4 permissions
		d.Uint32()
		d.Uint32()
		d.Uint32()
		d.String(maxOwner)
		return d.Err() == nil, sid
	case 3: // OPEN_DELEGATE_NONE_EXT
		switch why := d.Uint32(); why {
		case 7, 8: // WND4_CONTENTION, WND4_RESOURCE
			d.Bool()
		}
		return false, StateID{}
	default:
		d.Fail(fmt.Errorf("open_delegation_type4 %d", t))
		return false, StateID{}
	}
}

// closeOp adds CLOSE (RFC 8881 §18.2).
func (c *compound) closeOp(sid StateID, out *StateID) {
	c.add(OpClose, appendStateID(sunrpc.AppendUint32(nil, 0), sid), stateIDSize, okOnly(func(d *sunrpc.Decoder) {
		s := decodeStateID(d)
		if out != nil {
			*out = s
		}
	}))
}

// ReadResult is READ4resok (RFC 8881 §18.22) less the data, which is in the
// caller's buffer: Count bytes of it.
type ReadResult struct {
	EOF   bool
	Count int
}

// ReadOverflowError reports a READ reply carrying more bytes than were asked.
type ReadOverflowError struct {
	Asked int
	Got   int
}

func (e *ReadOverflowError) Error() string {
	return fmt.Sprintf("nfs4: READ returned %d bytes for %d asked", e.Got, e.Asked)
}

// read adds READ (RFC 8881 §18.22) of len(p) bytes at off. The data is the
// compound's DDP-eligible result (RFC 8267 §6.1): p is offered to the
// transport as the landing buffer, and copied into when the data came
// inline.
func (c *compound) read(sid StateID, off uint64, p []byte, r *ReadResult) {
	b := appendStateID(nil, sid)
	b = sunrpc.AppendUint64(b, off)
	b = sunrpc.AppendUint32(b, clampSize(len(p)))
	c.expectBulkResult(p)
	c.add(OpRead, b, 4+4+sunrpc.RoundUp(len(p)), okOnly(func(d *sunrpc.Decoder) {
		r.EOF = d.Bool()
		data := d.Bulk(-1)
		if d.Err() != nil {
			return
		}
		if len(data) > len(p) {
			d.Fail(&ReadOverflowError{Asked: len(p), Got: len(data)})
			return
		}
		if len(data) > 0 && &data[0] != &p[0] {
			copy(p, data)
		}
		r.Count = len(data)
	}))
}

// StableHow is stable_how4 (RFC 8881 §18.32).
type StableHow uint32

// Stability levels of WRITE.
const (
	Unstable StableHow = 0
	DataSync StableHow = 1
	FileSync StableHow = 2
)

// WriteResult is WRITE4resok (RFC 8881 §18.32).
type WriteResult struct {
	Count     uint32
	Committed StableHow
	Verf      Verifier
}

// write adds WRITE (RFC 8881 §18.32). The data is the compound's
// DDP-eligible argument (RFC 8267 §6.1): it travels as the request's bulk
// part, never copied into the inline buffer.
func (c *compound) write(sid StateID, off uint64, stable StableHow, data []byte, r *WriteResult) {
	b := appendStateID(nil, sid)
	b = sunrpc.AppendUint64(b, off)
	b = sunrpc.AppendUint32(b, uint32(stable))
	c.addBulkArg(OpWrite, b, data, nil, 4+4+8, okOnly(func(d *sunrpc.Decoder) {
		r.Count = d.Uint32()
		r.Committed = StableHow(d.Uint32())
		copy(r.Verf[:], d.FixedOpaque(8))
	}))
}

// commit adds COMMIT (RFC 8881 §18.3).
func (c *compound) commit(off uint64, count uint32, verf *Verifier) {
	c.add(OpCommit, sunrpc.AppendUint32(sunrpc.AppendUint64(nil, off), count), 8, okOnly(func(d *sunrpc.Decoder) {
		copy(verf[:], d.FixedOpaque(8))
	}))
}

// createResult decodes CREATE4resok (RFC 8881 §18.4).
func createResult(ci *ChangeInfo) opResult {
	return okOnly(func(d *sunrpc.Decoder) {
		*ci = decodeChangeInfo(d)
		decodeBitmap(d)
	})
}

// createDir adds CREATE of a directory (RFC 8881 §18.4); the new directory
// becomes the current handle.
func (c *compound) createDir(name string, attr *SetAttr, ci *ChangeInfo) {
	b := sunrpc.AppendUint32(nil, uint32(TypeDir))
	b = sunrpc.AppendString(b, name)
	b = appendFattr(b, attr)
	c.add(OpCreate, b, changeInfoSize+4+4*maxBitmapWords, createResult(ci))
}

// createSymlink adds CREATE of a symbolic link (RFC 8881 §18.4). The link
// text is DDP-eligible (RFC 8267 §6.1) and travels as the bulk part.
func (c *compound) createSymlink(name, target string, attr *SetAttr, ci *ChangeInfo) {
	pre := sunrpc.AppendUint32(nil, uint32(TypeLnk))
	post := sunrpc.AppendString(nil, name)
	post = appendFattr(post, attr)
	c.addBulkArg(OpCreate, pre, []byte(target), post, changeInfoSize+4+4*maxBitmapWords, createResult(ci))
}

// remove adds REMOVE (RFC 8881 §18.25).
func (c *compound) remove(name string, ci *ChangeInfo) {
	c.add(OpRemove, sunrpc.AppendString(nil, name), changeInfoSize, okOnly(func(d *sunrpc.Decoder) {
		*ci = decodeChangeInfo(d)
	}))
}

// rename adds RENAME (RFC 8881 §18.26): the saved handle is the source
// directory, the current one the target directory.
func (c *compound) rename(from, to string, src, dst *ChangeInfo) {
	c.add(OpRename, sunrpc.AppendString(sunrpc.AppendString(nil, from), to), 2*changeInfoSize, okOnly(func(d *sunrpc.Decoder) {
		*src = decodeChangeInfo(d)
		*dst = decodeChangeInfo(d)
	}))
}

// link adds LINK (RFC 8881 §18.9): the saved handle is the
// file, the current one the directory.
func (c *compound) link(name string, ci *ChangeInfo) {
	c.add(OpLink, sunrpc.AppendString(nil, name), changeInfoSize, okOnly(func(d *sunrpc.Decoder) {
		*ci = decodeChangeInfo(d)
	}))
}

// MaxLinkText bounds a READLINK result this client accepts.
const MaxLinkText = 4096

// readlink adds READLINK (RFC 8881 §18.24). The link text is DDP-eligible
// (RFC 8267 §6.1) but is not offered a Write chunk, as the Linux client
// offers one only for READ: knfsd (Linux 6.1) marks the NFSv4 READLINK
// payload at its length word instead of its data, so over RDMA it writes the
// text into the chunk and removes the length word and the text's first
// bytes from the inline reply (measured on the test bed). Over RDMA a reply
// that may not fit inline comes in a Reply chunk instead.
func (c *compound) readlink(out *string) {
	c.add(OpReadlink, nil, 4+MaxLinkText, okOnly(func(d *sunrpc.Decoder) {
		*out = d.String(MaxLinkText)
	}))
}

// DirEntry is entry4 (RFC 8881 §18.23): a name, its cookie, and the
// attributes asked for.
type DirEntry struct {
	Cookie uint64
	Name   string
	Attr   Attr
}

// ReaddirResult is READDIR4resok (RFC 8881 §18.23).
type ReaddirResult struct {
	Verf    Verifier
	Entries []DirEntry
	EOF     bool
}

// maxDirEntries bounds the entries of one READDIR reply: each takes at
// least 4+8+4+4+4 bytes, so a count bound is also implied by the message.
const minEntrySize = 4 + 8 + 4 + 4 + 4

// readdir adds READDIR (RFC 8881 §18.23).
func (c *compound) readdir(cookie uint64, verf Verifier, dircount, maxcount uint32, mask Bitmap, r *ReaddirResult) {
	b := sunrpc.AppendUint64(nil, cookie)
	b = append(b, verf[:]...)
	b = sunrpc.AppendUint32(b, dircount)
	b = sunrpc.AppendUint32(b, maxcount)
	b = appendBitmap(b, mask)
	c.add(OpReaddir, b, int(maxcount), okOnly(func(d *sunrpc.Decoder) {
		copy(r.Verf[:], d.FixedOpaque(8))
		for d.Err() == nil {
			more := d.Bool()
			if !more {
				break
			}
			if d.Len() < minEntrySize-4 {
				d.Fail(sunrpc.ErrTruncated)
				break
			}
			var e DirEntry
			e.Cookie = d.Uint64()
			e.Name = d.String(maxName)
			e.Attr = decodeFattr(d)
			r.Entries = append(r.Entries, e)
		}
		r.EOF = d.Bool()
	}))
}

// LockType is nfs_lock_type4 (RFC 8881 §18.10).
type LockType uint32

// Lock types; the W forms ask the server to queue the blocked request.
const (
	ReadLT   LockType = 1
	WriteLT  LockType = 2
	ReadWLT  LockType = 3
	WriteWLT LockType = 4
)

// LockDenied is LOCK4denied (RFC 8881 §18.10): the conflicting lock.
type LockDenied struct {
	Offset, Length uint64
	Type           LockType
	ClientID       uint64
	Owner          []byte
}

// LockDeniedError is a LOCK or LOCKT refused with NFS4ERR_DENIED, with the
// lock in the way. It unwraps to ErrDenied (EAGAIN).
type LockDeniedError struct{ Conflict LockDenied }

func (e *LockDeniedError) Error() string {
	return fmt.Sprintf("nfs4: lock conflicts with a lock on [%d, +%d)", e.Conflict.Offset, e.Conflict.Length)
}

func (e *LockDeniedError) Unwrap() error { return ErrDenied }

func decodeDenied(d *sunrpc.Decoder, r *LockDenied) {
	r.Offset = d.Uint64()
	r.Length = d.Uint64()
	r.Type = LockType(d.Uint32())
	o := decodeOwner(d)
	r.ClientID, r.Owner = o.ClientID, o.Owner
}

// Locker is locker4 (RFC 8881 §18.10): a new lock owner, introduced with
// the open stateid, or an existing one by its lock stateid.
type Locker struct {
	New       bool
	OpenState StateID // New: the open's stateid
	Owner     []byte  // New: the lock owner
	LockState StateID // !New: the lock stateid
}

// lock adds LOCK (RFC 8881 §18.10).
func (c *compound) lock(typ LockType, reclaim bool, off, length uint64, clientID uint64, l *Locker, sid *StateID, denied *LockDenied) {
	b := sunrpc.AppendUint32(nil, uint32(typ))
	b = sunrpc.AppendBool(b, reclaim)
	b = sunrpc.AppendUint64(b, off)
	b = sunrpc.AppendUint64(b, length)
	b = sunrpc.AppendBool(b, l.New)
	if l.New {
		b = sunrpc.AppendUint32(b, 0) // open_seqid: ignored in NFSv4.1
		b = appendStateID(b, l.OpenState)
		b = sunrpc.AppendUint32(b, 0) // lock_seqid
		b = appendOwner(b, stateOwner{ClientID: clientID, Owner: l.Owner})
	} else {
		b = appendStateID(b, l.LockState)
		b = sunrpc.AppendUint32(b, 0)
	}
	c.add(OpLock, b, 8+8+4+8+4+maxStateOwner, func(d *sunrpc.Decoder, st Status) {
		switch st {
		case OK:
			*sid = decodeStateID(d)
		case ErrDenied:
			decodeDenied(d, denied)
		}
	})
}

// lockT adds LOCKT (RFC 8881 §18.11).
func (c *compound) lockT(typ LockType, off, length uint64, owner stateOwner, denied *LockDenied) {
	b := sunrpc.AppendUint32(nil, uint32(typ))
	b = sunrpc.AppendUint64(b, off)
	b = sunrpc.AppendUint64(b, length)
	b = appendOwner(b, owner)
	c.add(OpLockT, b, 8+8+4+8+4+maxStateOwner, func(d *sunrpc.Decoder, st Status) {
		if st == ErrDenied {
			decodeDenied(d, denied)
		}
	})
}

// lockU adds LOCKU (RFC 8881 §18.12).
func (c *compound) lockU(typ LockType, sid StateID, off, length uint64, out *StateID) {
	b := sunrpc.AppendUint32(nil, uint32(typ))
	b = sunrpc.AppendUint32(b, 0) // seqid
	b = appendStateID(b, sid)
	b = sunrpc.AppendUint64(b, off)
	b = sunrpc.AppendUint64(b, length)
	c.add(OpLockU, b, stateIDSize, okOnly(func(d *sunrpc.Decoder) { *out = decodeStateID(d) }))
}

// Content is data_content4 (RFC 7862 §15.11, SEEK).
type Content uint32

// SEEK's targets.
const (
	SeekData Content = 0
	SeekHole Content = 1
)

// SeekResult is SEEK4resok (RFC 7862 §15.11).
type SeekResult struct {
	EOF    bool
	Offset uint64
}

// seek adds SEEK (RFC 7862 §15.11).
func (c *compound) seek(sid StateID, off uint64, what Content, r *SeekResult) {
	b := sunrpc.AppendUint32(sunrpc.AppendUint64(appendStateID(nil, sid), off), uint32(what))
	c.add(OpSeek, b, 12, okOnly(func(d *sunrpc.Decoder) {
		r.EOF = d.Bool()
		r.Offset = d.Uint64()
	}))
}

// allocate adds ALLOCATE (RFC 7862 §15.1) or, with dealloc, DEALLOCATE
// (RFC 7862 §15.4).
func (c *compound) allocate(dealloc bool, sid StateID, off, length uint64) {
	op := OpAllocate
	if dealloc {
		op = OpDeallocate
	}
	c.add(op, sunrpc.AppendUint64(sunrpc.AppendUint64(appendStateID(nil, sid), off), length), 0, nil)
}

// CopyResult is COPY4resok (RFC 7862 §15.2) of a synchronous copy.
type CopyResult struct {
	Count     uint64
	Committed StableHow
	Verf      Verifier
	Async     bool // the server answered with a callback id: the copy runs on (this client cannot wait for CB_OFFLOAD)
}

// copyOp adds COPY (RFC 7862 §15.2) of count bytes (0: to the end) from the
// saved handle at srcOff to the current handle at dstOff, synchronous and
// intra-server.
func (c *compound) copyOp(src, dst StateID, srcOff, dstOff, count uint64, r *CopyResult) {
	b := appendStateID(nil, src)
	b = appendStateID(b, dst)
	b = sunrpc.AppendUint64(b, srcOff)
	b = sunrpc.AppendUint64(b, dstOff)
	b = sunrpc.AppendUint64(b, count)
	b = sunrpc.AppendBool(b, false) // ca_consecutive
	b = sunrpc.AppendBool(b, true)  // ca_synchronous
	b = sunrpc.AppendUint32(b, 0)   // ca_source_server: none (intra-server)
	c.add(OpCopy, b, 4+stateIDSize+8+4+8+8, func(d *sunrpc.Decoder, st Status) {
		switch st {
		case OK:
			if n := d.ArrayLen(1, stateIDSize); n == 1 { // wr_callback_id<1>
				decodeStateID(d)
				r.Async = true
			}
			r.Count = d.Uint64()
			r.Committed = StableHow(d.Uint32())
			copy(r.Verf[:], d.FixedOpaque(8))
			d.Bool() // cr_consecutive
			d.Bool() // cr_synchronous
		case ErrOffloadNoReqs:
			d.Bool()
			d.Bool()
		}
	})
}
