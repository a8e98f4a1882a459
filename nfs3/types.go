package nfs3

import (
	"fmt"
	"io/fs"
	"math"
	"time"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// Program numbers and sizes (RFC 1813 §2.4, §2.5, Appendix I).
const (
	Program      = 100003
	Version      = 3
	MountProgram = 100005
	MountVersion = 3

	FHSize         = 64   // NFS3_FHSIZE: largest file handle
	CookieVerfSize = 8    // NFS3_COOKIEVERFSIZE
	CreateVerfSize = 8    // NFS3_CREATEVERFSIZE
	WriteVerfSize  = 8    // NFS3_WRITEVERFSIZE
	MaxPathLen     = 1024 // MNTPATHLEN, the MOUNT protocol's dirpath bound
	MaxNameLen     = 255  // MNTNAMLEN
	MaxSymlinkLen  = 4096 // the longest READLINK result accepted (Linux PATH_MAX)
)

// NFS version 3 procedures (RFC 1813 §3.3).
const (
	ProcNull        = 0
	ProcGetattr     = 1
	ProcSetattr     = 2
	ProcLookup      = 3
	ProcAccess      = 4
	ProcReadlink    = 5
	ProcRead        = 6
	ProcWrite       = 7
	ProcCreate      = 8
	ProcMkdir       = 9
	ProcSymlink     = 10
	ProcMknod       = 11
	ProcRemove      = 12
	ProcRmdir       = 13
	ProcRename      = 14
	ProcLink        = 15
	ProcReaddir     = 16
	ProcReaddirplus = 17
	ProcFsstat      = 18
	ProcFsinfo      = 19
	ProcPathconf    = 20
	ProcCommit      = 21
)

var procNames = [...]string{
	"NULL", "GETATTR", "SETATTR", "LOOKUP", "ACCESS", "READLINK", "READ", "WRITE", "CREATE",
	"MKDIR", "SYMLINK", "MKNOD", "REMOVE", "RMDIR", "RENAME", "LINK", "READDIR", "READDIRPLUS",
	"FSSTAT", "FSINFO", "PATHCONF", "COMMIT",
}

// ProcName returns the RFC 1813 name of NFS procedure proc.
func ProcName(proc uint32) string {
	if int(proc) < len(procNames) {
		return procNames[proc]
	}
	return fmt.Sprintf("PROC%d", proc)
}

// ProgramProcName names procedure proc of program prog for an RPC meter
// (sunrpc.ProcNamer): the RFC 1813 name for NFS ("READ"), "MOUNT/proc" for
// MOUNT; ok is false for any other program.
func ProgramProcName(prog, proc uint32) (name string, ok bool) {
	switch prog {
	case Program:
		return ProcName(proc), true
	case MountProgram:
		return fmt.Sprintf("MOUNT/%d", proc), true
	case ACLProgram:
		switch proc {
		case ACLProcGetacl:
			return "NFSACL/GETACL", true
		case ACLProcSetacl:
			return "NFSACL/SETACL", true
		}
		return fmt.Sprintf("NFSACL/%d", proc), true
	}
	return "", false
}

// FileHandle is nfs_fh3 (RFC 1813 §2.5): an opaque handle of at most FHSize
// bytes.
type FileHandle []byte

// HandleTooLongError reports a file handle over FHSize bytes, passed by a caller
// or received from a server.
type HandleTooLongError struct{ Len int }

func (e *HandleTooLongError) Error() string {
	return fmt.Sprintf("nfs3: file handle of %d bytes exceeds %d", e.Len, FHSize)
}

func checkFH(fh FileHandle) error {
	if len(fh) > FHSize {
		return &HandleTooLongError{Len: len(fh)}
	}
	return nil
}

// appendFH appends fh as an nfs_fh3. A nil b, the start of a call's
// arguments (they all begin with a handle), becomes a buffer with room for
// the usual ones, so that building them by appending costs one allocation,
// not one per time the buffer grows.
func appendFH(b []byte, fh FileHandle) []byte {
	if b == nil {
		b = make([]byte, 0, argsCap)
	}
	return sunrpc.AppendOpaque(b, fh)
}

// argsCap is the room appendFH makes for a call's arguments: a file handle
// of the largest size (RFC 1813's NFS3_FHSIZE, 64 bytes, and its length
// word) and the fixed arguments of any procedure after it, or a name of a
// few dozen bytes.
const argsCap = 160

// decodeFH reads an nfs_fh3 and copies it out of the message.
func decodeFH(d *sunrpc.Decoder) FileHandle {
	n := d.Uint32()
	if d.Err() != nil {
		return nil
	}
	if n > FHSize {
		d.Fail(&HandleTooLongError{Len: int(n)})
		return nil
	}
	p := d.FixedOpaque(int(n))
	if p == nil {
		return nil
	}
	return append(FileHandle{}, p...)
}

// FileType is ftype3 (RFC 1813 §2.5).
type FileType uint32

// File types.
const (
	TypeReg  FileType = 1
	TypeDir  FileType = 2
	TypeBlk  FileType = 3
	TypeChr  FileType = 4
	TypeLnk  FileType = 5
	TypeSock FileType = 6
	TypeFIFO FileType = 7
)

func (t FileType) String() string {
	switch t {
	case TypeReg:
		return "NF3REG"
	case TypeDir:
		return "NF3DIR"
	case TypeBlk:
		return "NF3BLK"
	case TypeChr:
		return "NF3CHR"
	case TypeLnk:
		return "NF3LNK"
	case TypeSock:
		return "NF3SOCK"
	case TypeFIFO:
		return "NF3FIFO"
	}
	return fmt.Sprintf("ftype3(%d)", uint32(t))
}

// SpecData is specdata3 (RFC 1813 §2.5): a device's major and minor numbers.
type SpecData struct{ Major, Minor uint32 }

// Time is nfstime3 (RFC 1813 §2.5).
type Time struct{ Seconds, Nseconds uint32 }

// Time returns t as a time.Time.
func (t Time) Time() time.Time { return time.Unix(int64(t.Seconds), int64(t.Nseconds)) }

// Range of nfstime3: unsigned 32-bit seconds since the Unix epoch.
const (
	MinTimeSeconds = 0
	MaxTimeSeconds = math.MaxUint32 // 2106-02-07T06:28:15Z
)

// TimeOf returns tm as an nfstime3, clamped as the Linux client clamps a time
// it sends in SETATTR (an NFSv3 superblock's range is 0 to 2^32-1 seconds, and
// the VFS clamps timestamps to it): a time before 1970 becomes 1970-01-01
// 00:00:00, a time after 2106-02-07 06:28:15 becomes that instant, and a
// clamped time loses its nanoseconds. A time is never wrapped modulo 2^32.
func TimeOf(tm time.Time) Time { return TimeOfUnix(tm.Unix(), int64(tm.Nanosecond())) }

// TimeOfUnix is TimeOf for sec seconds and nsec nanoseconds since the epoch
// (nsec normalised into [0, 1e9) first).
func TimeOfUnix(sec, nsec int64) Time {
	if nsec < 0 || nsec >= 1e9 {
		q := nsec / 1e9
		nsec -= q * 1e9
		if nsec < 0 {
			q--
			nsec += 1e9
		}
		if (q > 0 && sec > math.MaxInt64-q) || (q < 0 && sec < math.MinInt64-q) {
			if q > 0 {
				sec = math.MaxInt64
			} else {
				sec = math.MinInt64
			}
		} else {
			sec += q
		}
	}
	switch {
	case sec <= MinTimeSeconds:
		return Time{Seconds: MinTimeSeconds}
	case sec >= MaxTimeSeconds:
		return Time{Seconds: MaxTimeSeconds}
	}
	return Time{Seconds: uint32(sec), Nseconds: uint32(nsec)}
}

func appendTime(b []byte, t Time) []byte {
	return sunrpc.AppendUint32(sunrpc.AppendUint32(b, t.Seconds), t.Nseconds)
}

func decodeTime(d *sunrpc.Decoder) Time { return Time{Seconds: d.Uint32(), Nseconds: d.Uint32()} }

// Attr is fattr3 (RFC 1813 §2.5): a file's attributes.
type Attr struct {
	Type   FileType
	Mode   uint32 // protection bits, setuid/setgid/sticky included (RFC 1813 §2.5 mode3)
	Nlink  uint32
	UID    uint32
	GID    uint32
	Size   uint64
	Used   uint64
	Rdev   SpecData
	FSID   uint64
	FileID uint64
	Atime  Time
	Mtime  Time
	Ctime  Time
}

// attrSize is the XDR size of fattr3.
const attrSize = 84

// FileMode returns the attributes as an fs.FileMode: type bits and permissions.
func (a *Attr) FileMode() fs.FileMode {
	m := fs.FileMode(a.Mode & 0o777)
	if a.Mode&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if a.Mode&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if a.Mode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	switch a.Type {
	case TypeDir:
		m |= fs.ModeDir
	case TypeBlk:
		m |= fs.ModeDevice
	case TypeChr:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case TypeLnk:
		m |= fs.ModeSymlink
	case TypeSock:
		m |= fs.ModeSocket
	case TypeFIFO:
		m |= fs.ModeNamedPipe
	}
	return m
}

func appendAttr(b []byte, a *Attr) []byte {
	for _, v := range []uint32{uint32(a.Type), a.Mode, a.Nlink, a.UID, a.GID} {
		b = sunrpc.AppendUint32(b, v)
	}
	b = sunrpc.AppendUint64(b, a.Size)
	b = sunrpc.AppendUint64(b, a.Used)
	b = sunrpc.AppendUint32(b, a.Rdev.Major)
	b = sunrpc.AppendUint32(b, a.Rdev.Minor)
	b = sunrpc.AppendUint64(b, a.FSID)
	b = sunrpc.AppendUint64(b, a.FileID)
	b = appendTime(b, a.Atime)
	b = appendTime(b, a.Mtime)
	return appendTime(b, a.Ctime)
}

func decodeAttr(d *sunrpc.Decoder) Attr {
	var a Attr
	a.Type = FileType(d.Uint32())
	a.Mode = d.Uint32()
	a.Nlink = d.Uint32()
	a.UID = d.Uint32()
	a.GID = d.Uint32()
	a.Size = d.Uint64()
	a.Used = d.Uint64()
	a.Rdev = SpecData{Major: d.Uint32(), Minor: d.Uint32()}
	a.FSID = d.Uint64()
	a.FileID = d.Uint64()
	a.Atime = decodeTime(d)
	a.Mtime = decodeTime(d)
	a.Ctime = decodeTime(d)
	return a
}

// appendPostOpAttr appends post_op_attr (RFC 1813 §2.6): nil is absent.
func appendPostOpAttr(b []byte, a *Attr) []byte {
	if a == nil {
		return sunrpc.AppendBool(b, false)
	}
	return appendAttr(sunrpc.AppendBool(b, true), a)
}

func decodePostOpAttr(d *sunrpc.Decoder) *Attr {
	if !d.Bool() {
		return nil
	}
	a := decodeAttr(d)
	if d.Err() != nil {
		return nil
	}
	return &a
}

// WccAttr is wcc_attr (RFC 1813 §2.6): the attributes weak cache consistency
// compares before an operation.
type WccAttr struct {
	Size  uint64
	Mtime Time
	Ctime Time
}

// WccData is wcc_data (RFC 1813 §2.6): an object's attributes before (pre_op_attr)
// and after (post_op_attr) an operation; either may be absent (nil).
type WccData struct {
	Before *WccAttr
	After  *Attr
}

func appendWcc(b []byte, w *WccData) []byte {
	if w.Before == nil {
		b = sunrpc.AppendBool(b, false)
	} else {
		b = sunrpc.AppendBool(b, true)
		b = sunrpc.AppendUint64(b, w.Before.Size)
		b = appendTime(b, w.Before.Mtime)
		b = appendTime(b, w.Before.Ctime)
	}
	return appendPostOpAttr(b, w.After)
}

func decodeWcc(d *sunrpc.Decoder) WccData {
	var w WccData
	if d.Bool() {
		w.Before = &WccAttr{Size: d.Uint64(), Mtime: decodeTime(d), Ctime: decodeTime(d)}
	}
	w.After = decodePostOpAttr(d)
	if d.Err() != nil {
		return WccData{}
	}
	return w
}

// appendPostOpFH appends post_op_fh3 (RFC 1813 §3.3.8): nil is absent.
func appendPostOpFH(b []byte, fh FileHandle) []byte {
	if fh == nil {
		return sunrpc.AppendBool(b, false)
	}
	return appendFH(sunrpc.AppendBool(b, true), fh)
}

func decodePostOpFH(d *sunrpc.Decoder) FileHandle {
	if !d.Bool() {
		return nil
	}
	return decodeFH(d)
}

// TimeHow is time_how (RFC 1813 §2.6): how SETATTR sets a time.
type TimeHow uint32

// Time setting modes.
const (
	DontChange      TimeHow = 0
	SetToServerTime TimeHow = 1
	SetToClientTime TimeHow = 2
)

// SetTime is set_atime / set_mtime (RFC 1813 §2.6). The zero value leaves the
// time unchanged.
type SetTime struct {
	How  TimeHow
	Time Time // with SetToClientTime
}

// SetAttr is sattr3 (RFC 1813 §2.6): the attributes to set. A nil pointer is the
// set_it = FALSE arm: the attribute is left alone.
type SetAttr struct {
	Mode  *uint32
	UID   *uint32
	GID   *uint32
	Size  *uint64
	Atime SetTime
	Mtime SetTime
}

func appendOptUint32(b []byte, v *uint32) []byte {
	if v == nil {
		return sunrpc.AppendBool(b, false)
	}
	return sunrpc.AppendUint32(sunrpc.AppendBool(b, true), *v)
}

func appendSetTime(b []byte, t SetTime) []byte {
	b = sunrpc.AppendUint32(b, uint32(t.How))
	if t.How == SetToClientTime {
		b = appendTime(b, t.Time)
	}
	return b
}

func appendSetAttr(b []byte, s *SetAttr) []byte {
	b = appendOptUint32(b, s.Mode)
	b = appendOptUint32(b, s.UID)
	b = appendOptUint32(b, s.GID)
	if s.Size == nil {
		b = sunrpc.AppendBool(b, false)
	} else {
		b = sunrpc.AppendUint64(sunrpc.AppendBool(b, true), *s.Size)
	}
	b = appendSetTime(b, s.Atime)
	return appendSetTime(b, s.Mtime)
}

func decodeOptUint32(d *sunrpc.Decoder) *uint32 {
	if !d.Bool() {
		return nil
	}
	v := d.Uint32()
	return &v
}

func decodeSetTime(d *sunrpc.Decoder) SetTime {
	t := SetTime{How: TimeHow(d.Uint32())}
	switch t.How {
	case DontChange, SetToServerTime:
	case SetToClientTime:
		t.Time = decodeTime(d)
	default:
		d.Fail(fmt.Errorf("nfs3: invalid time_how %d", t.How))
	}
	return t
}

// decodeSetAttr reads a sattr3 (for tests standing in for a server and for fuzzing).
func decodeSetAttr(d *sunrpc.Decoder) SetAttr {
	var s SetAttr
	s.Mode = decodeOptUint32(d)
	s.UID = decodeOptUint32(d)
	s.GID = decodeOptUint32(d)
	if d.Bool() {
		v := d.Uint64()
		s.Size = &v
	}
	s.Atime = decodeSetTime(d)
	s.Mtime = decodeSetTime(d)
	return s
}

// StableHow is stable_how (RFC 1813 §3.3.7): how durable a WRITE must be before
// the server replies.
type StableHow uint32

// Stability levels.
const (
	Unstable StableHow = 0
	DataSync StableHow = 1
	FileSync StableHow = 2
)

func (s StableHow) String() string {
	switch s {
	case Unstable:
		return "UNSTABLE"
	case DataSync:
		return "DATA_SYNC"
	case FileSync:
		return "FILE_SYNC"
	}
	return fmt.Sprintf("stable_how(%d)", uint32(s))
}

// WriteVerf is writeverf3 (RFC 1813 §3.3.7): changes when the server may have
// lost uncommitted data (e.g. on reboot).
type WriteVerf [WriteVerfSize]byte

// CookieVerf is cookieverf3 (RFC 1813 §3.3.16).
type CookieVerf [CookieVerfSize]byte

// CreateVerf is createverf3 (RFC 1813 §3.3.8): the EXCLUSIVE create token.
type CreateVerf [CreateVerfSize]byte

// CreateMode is createmode3 (RFC 1813 §3.3.8).
type CreateMode uint32

// Create modes.
const (
	Unchecked CreateMode = 0 // create, or open an existing file (Attr applied)
	Guarded   CreateMode = 1 // fail with NFS3ERR_EXIST if the name exists
	Exclusive CreateMode = 2 // exactly once, by Verf (retransmission safe)
)

// CreateHow is createhow3 (RFC 1813 §3.3.8): Attr for Unchecked and Guarded,
// Verf for Exclusive.
type CreateHow struct {
	Mode CreateMode
	Attr SetAttr
	Verf CreateVerf
}

// Access bits of ACCESS (RFC 1813 §3.3.4).
const (
	AccessRead    = 0x0001
	AccessLookup  = 0x0002
	AccessModify  = 0x0004
	AccessExtend  = 0x0008
	AccessDelete  = 0x0010
	AccessExecute = 0x0020
)

// FSINFO properties (RFC 1813 §3.3.19).
const (
	FSFLink        = 0x0001
	FSFSymlink     = 0x0002
	FSFHomogeneous = 0x0008
	FSFCanSetTime  = 0x0010
)

// Cookie is cookie3 (RFC 1813 §3.3.16): a directory position.
type Cookie = uint64
