package nfs4

import (
	"fmt"
	"io/fs"
	"math"
	"strconv"
	"time"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// Bitmap is bitmap4 (RFC 8881 §3.2): bit n of word n/32 names attribute
// (or operation, flag) n.
type Bitmap []uint32

// maxBitmapWords bounds a decoded bitmap: NFSv4.2 defines attributes up to
// 80, three words; a server may send a few more zero words.
const maxBitmapWords = 8

// NewBitmap returns a bitmap with the given bits set.
func NewBitmap(bits ...int) Bitmap {
	var b Bitmap
	for _, n := range bits {
		b = b.With(n)
	}
	return b
}

// With returns b with bit n set (b may be modified).
func (b Bitmap) With(n int) Bitmap {
	for len(b) <= n/32 {
		b = append(b, 0)
	}
	b[n/32] |= 1 << (n % 32)
	return b
}

// Has reports whether bit n is set.
func (b Bitmap) Has(n int) bool { return n >= 0 && n/32 < len(b) && b[n/32]&(1<<(n%32)) != 0 }

func appendBitmap(b []byte, m Bitmap) []byte {
	b = sunrpc.AppendUint32(b, uint32(len(m)))
	for _, w := range m {
		b = sunrpc.AppendUint32(b, w)
	}
	return b
}

func decodeBitmap(d *sunrpc.Decoder) Bitmap {
	n := d.ArrayLen(maxBitmapWords, 4)
	if n == 0 {
		return nil
	}
	m := make(Bitmap, n)
	for i := range m {
		m[i] = d.Uint32()
	}
	return m
}

// Attribute numbers (RFC 8881 §5.6–5.8, RFC 7862 §12.2) of the attributes
// this package encodes or decodes.
const (
	AttrSupportedAttrs    = 0
	AttrType              = 1
	AttrFHExpireType      = 2
	AttrChange            = 3
	AttrSize              = 4
	AttrLinkSupport       = 5
	AttrSymlinkSupport    = 6
	AttrNamedAttr         = 7
	AttrFSID              = 8
	AttrUniqueHandles     = 9
	AttrLeaseTime         = 10
	AttrRdattrError       = 11
	AttrFileHandle        = 19
	AttrFileID            = 20
	AttrFilesAvail        = 21
	AttrFilesFree         = 22
	AttrFilesTotal        = 23
	AttrMaxFileSize       = 27
	AttrMaxLink           = 28
	AttrMaxName           = 29
	AttrMaxRead           = 30
	AttrMaxWrite          = 31
	AttrMode              = 33
	AttrNumLinks          = 35
	AttrOwner             = 36
	AttrOwnerGroup        = 37
	AttrRawDev            = 41
	AttrSpaceAvail        = 42
	AttrSpaceFree         = 43
	AttrSpaceTotal        = 44
	AttrSpaceUsed         = 45
	AttrTimeAccess        = 47
	AttrTimeAccessSet     = 48
	AttrTimeCreate        = 50
	AttrTimeDelta         = 51
	AttrTimeMetadata      = 52
	AttrTimeModify        = 53
	AttrTimeModifySet     = 54
	AttrMountedOnFileID   = 55
	AttrSuppattrExclCreat = 75
)

// FileType is nfs_ftype4 (RFC 8881 §5.8.1.2: the type attribute).
type FileType uint32

// File types.
const (
	TypeReg       FileType = 1
	TypeDir       FileType = 2
	TypeBlk       FileType = 3
	TypeChr       FileType = 4
	TypeLnk       FileType = 5
	TypeSock      FileType = 6
	TypeFIFO      FileType = 7
	TypeAttrDir   FileType = 8
	TypeNamedAttr FileType = 9
)

// Time is nfstime4 (RFC 8881 §3.3.1): seconds since the epoch and
// nanoseconds.
type Time struct {
	Seconds  int64
	Nseconds uint32
}

// TimeOf returns t as nfstime4.
func TimeOf(t time.Time) Time { return Time{Seconds: t.Unix(), Nseconds: uint32(t.Nanosecond())} }

// Time returns t as a time.Time.
func (t Time) Time() time.Time { return time.Unix(t.Seconds, int64(t.Nseconds)) }

func appendTime(b []byte, t Time) []byte {
	return sunrpc.AppendUint32(sunrpc.AppendInt64(b, t.Seconds), t.Nseconds)
}

func decodeTime(d *sunrpc.Decoder) Time {
	t := Time{Seconds: d.Int64(), Nseconds: d.Uint32()}
	if d.Err() == nil && t.Nseconds >= 1e9 {
		d.Fail(fmt.Errorf("nfstime4 with %d nanoseconds", t.Nseconds))
	}
	return t
}

// FSID is fsid4 (RFC 8881 §3.3.5).
type FSID struct{ Major, Minor uint64 }

// SpecData is specdata4 (RFC 8881 §3.3.4), the rawdev attribute.
type SpecData struct{ Major, Minor uint32 }

// Limits of names and owners this package accepts from a server.
const (
	maxOwner = 1024 // NFS4_OPAQUE_LIMIT
	MaxFH    = 128  // NFS4_FHSIZE (RFC 8881 §4: a filehandle is at most 128 bytes)
	maxName  = 1024
)

// Attr is a decoded fattr4 (RFC 8881 §3.3.7, the attributes of §5): those in Mask
// are valid, the others zero. Owner and OwnerGroup are strings
// ("user@domain", or a decimal id where the server sends ids, as knfsd does
// for AUTH_SYS callers); UID and GID parse the numeric form.
type Attr struct {
	Mask            Bitmap
	SupportedAttrs  Bitmap
	Type            FileType
	FHExpireType    uint32
	Change          uint64
	Size            uint64
	LinkSupport     bool
	SymlinkSupport  bool
	FSID            FSID
	LeaseTime       uint32
	RdattrError     Status
	FileHandle      FileHandle
	FileID          uint64
	FilesAvail      uint64
	FilesFree       uint64
	FilesTotal      uint64
	MaxFileSize     uint64
	MaxLink         uint32
	MaxName         uint32
	MaxRead         uint64
	MaxWrite        uint64
	Mode            uint32 // the permission bits and S_ISUID/S_ISGID/S_ISVTX (mode4, 12 bits)
	NumLinks        uint32
	Owner           string
	OwnerGroup      string
	RawDev          SpecData
	SpaceAvail      uint64
	SpaceFree       uint64
	SpaceTotal      uint64
	SpaceUsed       uint64
	ATime           Time
	BirthTime       Time
	TimeDelta       Time
	CTime           Time // time_metadata
	MTime           Time
	MountedOnFileID uint64
}

// Has reports whether attribute n was returned.
func (a *Attr) Has(n int) bool { return a.Mask.Has(n) }

// UID returns the owner as a numeric id, when the server sent one.
func (a *Attr) UID() (uint32, bool) { return numericOwner(a.Owner) }

// GID returns the owner group as a numeric id, when the server sent one.
func (a *Attr) GID() (uint32, bool) { return numericOwner(a.OwnerGroup) }

func numericOwner(s string) (uint32, bool) {
	n, err := strconv.ParseUint(s, 10, 32)
	return uint32(n), err == nil
}

// FileMode returns the type and permission bits as an fs.FileMode.
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
	case TypeDir, TypeAttrDir:
		m |= fs.ModeDir
	case TypeLnk:
		m |= fs.ModeSymlink
	case TypeBlk:
		m |= fs.ModeDevice
	case TypeChr:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case TypeSock:
		m |= fs.ModeSocket
	case TypeFIFO:
		m |= fs.ModeNamedPipe
	}
	return m
}

// StatAttrs is the attribute set a file system's stat needs: type, change,
// size, fsid, fileid, mode, numlinks, owner, owner_group, rawdev,
// space_used, the access, metadata and modify times.
var StatAttrs = NewBitmap(AttrType, AttrChange, AttrSize, AttrFSID, AttrFileID, AttrMode,
	AttrNumLinks, AttrOwner, AttrOwnerGroup, AttrRawDev, AttrSpaceUsed, AttrTimeAccess,
	AttrTimeMetadata, AttrTimeModify)

// DirAttrs is what READDIR asks for each entry by default: StatAttrs, the
// entry's filehandle (as NFSv3's READDIRPLUS gives it) and rdattr_error, so
// that an entry whose attributes fail is reported in it instead of failing
// the whole page (RFC 8881 §18.23.3).
var DirAttrs = NewBitmap(AttrType, AttrChange, AttrSize, AttrFSID, AttrRdattrError, AttrFileHandle, AttrFileID, AttrMode,
	AttrNumLinks, AttrOwner, AttrOwnerGroup, AttrRawDev, AttrSpaceUsed, AttrTimeAccess,
	AttrTimeMetadata, AttrTimeModify)

// maxAttrSize bounds the encoded fattr4 of StatAttrs-like requests, owners
// of up to 128 bytes each.
const maxAttrSize = 4 + 4*maxBitmapWords + 4 + 512

// decodeFattr reads fattr4: the bitmap, then the attribute values in
// increasing attribute order from the attr_vals opaque. A bit this package
// does not decode is an error (its encoding, and so the position of the
// next value, is unknown), as are bytes left over.
func decodeFattr(d *sunrpc.Decoder) Attr {
	var a Attr
	a.Mask = decodeBitmap(d)
	vals := d.Opaque(-1)
	if d.Err() != nil {
		return Attr{}
	}
	v := sunrpc.NewDecoder(vals)
	for w, word := range a.Mask {
		for bit := 0; bit < 32 && word != 0; bit++ {
			if word&(1<<bit) == 0 {
				continue
			}
			word &^= 1 << bit
			if err := a.decodeOne(v, w*32+bit); err != nil {
				d.Fail(err)
				return Attr{}
			}
		}
	}
	switch {
	case v.Err() != nil:
		d.Fail(fmt.Errorf("fattr4: %w", v.Err()))
		return Attr{}
	case v.Len() != 0:
		d.Fail(fmt.Errorf("fattr4: %d bytes after the last attribute", v.Len()))
		return Attr{}
	}
	return a
}

func (a *Attr) decodeOne(v *sunrpc.Decoder, n int) error {
	switch n {
	case AttrSupportedAttrs:
		a.SupportedAttrs = decodeBitmap(v)
	case AttrType:
		a.Type = FileType(v.Uint32())
	case AttrFHExpireType:
		a.FHExpireType = v.Uint32()
	case AttrChange:
		a.Change = v.Uint64()
	case AttrSize:
		a.Size = v.Uint64()
	case AttrLinkSupport:
		a.LinkSupport = v.Bool()
	case AttrSymlinkSupport:
		a.SymlinkSupport = v.Bool()
	case AttrNamedAttr, AttrUniqueHandles:
		v.Bool()
	case AttrFSID:
		a.FSID = FSID{v.Uint64(), v.Uint64()}
	case AttrLeaseTime:
		a.LeaseTime = v.Uint32()
	case AttrRdattrError:
		a.RdattrError = Status(v.Uint32())
	case AttrFileHandle:
		a.FileHandle = append(FileHandle(nil), v.Opaque(MaxFH)...) // a copy: the reply's buffer goes back to the transport
	case AttrFileID:
		a.FileID = v.Uint64()
	case AttrFilesAvail:
		a.FilesAvail = v.Uint64()
	case AttrFilesFree:
		a.FilesFree = v.Uint64()
	case AttrFilesTotal:
		a.FilesTotal = v.Uint64()
	case AttrMaxFileSize:
		a.MaxFileSize = v.Uint64()
	case AttrMaxLink:
		a.MaxLink = v.Uint32()
	case AttrMaxName:
		a.MaxName = v.Uint32()
	case AttrMaxRead:
		a.MaxRead = v.Uint64()
	case AttrMaxWrite:
		a.MaxWrite = v.Uint64()
	case AttrMode:
		a.Mode = v.Uint32()
	case AttrNumLinks:
		a.NumLinks = v.Uint32()
	case AttrOwner:
		a.Owner = v.String(maxOwner)
	case AttrOwnerGroup:
		a.OwnerGroup = v.String(maxOwner)
	case AttrRawDev:
		a.RawDev = SpecData{v.Uint32(), v.Uint32()}
	case AttrSpaceAvail:
		a.SpaceAvail = v.Uint64()
	case AttrSpaceFree:
		a.SpaceFree = v.Uint64()
	case AttrSpaceTotal:
		a.SpaceTotal = v.Uint64()
	case AttrSpaceUsed:
		a.SpaceUsed = v.Uint64()
	case AttrTimeAccess:
		a.ATime = decodeTime(v)
	case AttrTimeCreate:
		a.BirthTime = decodeTime(v)
	case AttrTimeDelta:
		a.TimeDelta = decodeTime(v)
	case AttrTimeMetadata:
		a.CTime = decodeTime(v)
	case AttrTimeModify:
		a.MTime = decodeTime(v)
	case AttrMountedOnFileID:
		a.MountedOnFileID = v.Uint64()
	default:
		return fmt.Errorf("fattr4: attribute %d is not one this client decodes", n)
	}
	return nil
}

// SetTime is settime4 (RFC 8881 §3.3.3; time_access_set, time_modify_set):
// the server's clock, or Time.
type SetTime struct {
	ServerTime bool
	Time       Time
}

// SetAttr are the attributes SETATTR, OPEN's create and CREATE set: each
// non-nil field is sent (RFC 8881 §5.6–5.7: size, mode, owner, owner_group,
// time_access_set, time_modify_set). Owners are strings: a name
// ("user@domain") or, for servers that accept them, a decimal id (OwnerID).
type SetAttr struct {
	Size       *uint64
	Mode       *uint32
	Owner      *string
	OwnerGroup *string
	ATime      *SetTime
	MTime      *SetTime
}

// OwnerID returns a numeric id as an owner string, as knfsd accepts from
// AUTH_SYS callers (nfs4_disable_idmapping, its default).
func OwnerID(id uint32) string { return strconv.FormatUint(uint64(id), 10) }

// Ptr returns a pointer to v, for SetAttr's fields.
func Ptr[T any](v T) *T { return &v }

// appendFattr appends s as fattr4 (RFC 8881 §3.3.7), values in
// increasing attribute order.
func appendFattr(b []byte, s *SetAttr) []byte {
	var mask Bitmap
	var vals []byte
	if s.Size != nil {
		mask = mask.With(AttrSize)
		vals = sunrpc.AppendUint64(vals, *s.Size)
	}
	if s.Mode != nil {
		mask = mask.With(AttrMode)
		vals = sunrpc.AppendUint32(vals, *s.Mode&0o7777)
	}
	if s.Owner != nil {
		mask = mask.With(AttrOwner)
		vals = sunrpc.AppendString(vals, *s.Owner)
	}
	if s.OwnerGroup != nil {
		mask = mask.With(AttrOwnerGroup)
		vals = sunrpc.AppendString(vals, *s.OwnerGroup)
	}
	appendSet := func(t *SetTime) {
		if t.ServerTime {
			vals = sunrpc.AppendUint32(vals, 0) // SET_TO_SERVER_TIME4
			return
		}
		vals = appendTime(sunrpc.AppendUint32(vals, 1), t.Time) // SET_TO_CLIENT_TIME4
	}
	if s.ATime != nil {
		mask = mask.With(AttrTimeAccessSet)
		appendSet(s.ATime)
	}
	if s.MTime != nil {
		mask = mask.With(AttrTimeModifySet)
		appendSet(s.MTime)
	}
	b = appendBitmap(b, mask)
	return sunrpc.AppendOpaque(b, vals)
}

// clampSize returns n as a count4 for a buffer of n bytes.
func clampSize(n int) uint32 {
	if n > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(n)
}
