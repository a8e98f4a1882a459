package nfs3

import (
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// Arguments and results of the NFS version 3 procedures (RFC 1813 §3.3). Each
// result type decodes both arms of its union: on an error status the fields the
// failure arm carries (usually post-operation attributes or wcc_data) are still
// filled in.

// XDR sizes used to bound replies (Request.MaxReply).
const (
	postOpAttrSize = 4 + attrSize
	wccSize        = 4 + 24 + postOpAttrSize
	fhSize         = 4 + FHSize
	smallResults   = 512 // bound for every fixed-size result
)

func appendDirOp(b []byte, dir FileHandle, name string) []byte {
	return sunrpc.AppendString(appendFH(b, dir), name)
}

// LookupResult is LOOKUP3res (RFC 1813 §3.3.3).
type LookupResult struct {
	FH      FileHandle
	Attr    *Attr // the object's attributes, if returned
	DirAttr *Attr
}

func (r *LookupResult) decode(d *sunrpc.Decoder, st Status) {
	if st == StatusOK {
		r.FH = decodeFH(d)
		r.Attr = decodePostOpAttr(d)
	}
	r.DirAttr = decodePostOpAttr(d)
}

// AccessResult is ACCESS3res (RFC 1813 §3.3.4).
type AccessResult struct {
	Attr   *Attr
	Access uint32 // the granted subset of the requested Access* bits
}

func (r *AccessResult) decode(d *sunrpc.Decoder, st Status) {
	r.Attr = decodePostOpAttr(d)
	if st == StatusOK {
		r.Access = d.Uint32()
	}
}

// ReadlinkResult is READLINK3res (RFC 1813 §3.3.5).
type ReadlinkResult struct {
	Attr   *Attr
	Target string
}

func (r *ReadlinkResult) decode(d *sunrpc.Decoder, st Status) {
	r.Attr = decodePostOpAttr(d)
	if st == StatusOK {
		r.Target = string(d.Bulk(MaxSymlinkLen))
	}
}

// ReadResult is READ3res (RFC 1813 §3.3.6) without the data, which lands in the
// caller's buffer.
type ReadResult struct {
	Attr  *Attr
	Count int  // bytes read
	EOF   bool // the read reached the end of the file
}

// WriteResult is WRITE3res (RFC 1813 §3.3.7).
type WriteResult struct {
	Wcc       WccData
	Count     uint32    // bytes written
	Committed StableHow // how durable they are
	Verf      WriteVerf
}

func (r *WriteResult) decode(d *sunrpc.Decoder, st Status) {
	r.Wcc = decodeWcc(d)
	if st == StatusOK {
		r.Count = d.Uint32()
		r.Committed = StableHow(d.Uint32())
		copy(r.Verf[:], d.FixedOpaque(WriteVerfSize))
	}
}

// CreateResult is the result of CREATE, MKDIR, SYMLINK and MKNOD
// (RFC 1813 §3.3.8–3.3.11). FH and Attr are optional in the reply.
type CreateResult struct {
	FH     FileHandle
	Attr   *Attr
	DirWcc WccData
}

func (r *CreateResult) decode(d *sunrpc.Decoder, st Status) {
	if st == StatusOK {
		r.FH = decodePostOpFH(d)
		r.Attr = decodePostOpAttr(d)
	}
	r.DirWcc = decodeWcc(d)
}

// MknodData is mknoddata3 (RFC 1813 §3.3.11): the special file to create.
// Spec is used for TypeChr and TypeBlk; Attr for those and TypeSock and TypeFIFO.
type MknodData struct {
	Type FileType
	Attr SetAttr
	Spec SpecData
}

// RenameResult is RENAME3res (RFC 1813 §3.3.14).
type RenameResult struct {
	FromDirWcc WccData
	ToDirWcc   WccData
}

func (r *RenameResult) decode(d *sunrpc.Decoder, _ Status) {
	r.FromDirWcc = decodeWcc(d)
	r.ToDirWcc = decodeWcc(d)
}

// LinkResult is LINK3res (RFC 1813 §3.3.15).
type LinkResult struct {
	Attr   *Attr
	DirWcc WccData
}

func (r *LinkResult) decode(d *sunrpc.Decoder, _ Status) {
	r.Attr = decodePostOpAttr(d)
	r.DirWcc = decodeWcc(d)
}

// DirEntry is entry3 (RFC 1813 §3.3.16).
type DirEntry struct {
	FileID uint64
	Name   string
	Cookie Cookie
}

// ReaddirResult is READDIR3res (RFC 1813 §3.3.16): one page of a directory.
type ReaddirResult struct {
	DirAttr *Attr
	Verf    CookieVerf
	Entries []DirEntry
	EOF     bool
}

// minEntrySize is the XDR size of the smallest entry3 (empty name) plus the
// list's value-follows word, to bound the entry count by the bytes present.
const minEntrySize = 8 + 4 + 8 + 4

func (r *ReaddirResult) decode(d *sunrpc.Decoder, st Status) {
	r.DirAttr = decodePostOpAttr(d)
	if st != StatusOK {
		return
	}
	copy(r.Verf[:], d.FixedOpaque(CookieVerfSize))
	for d.Bool() {
		if d.Len() < minEntrySize-4 {
			d.Fail(sunrpc.ErrTruncated)
			return
		}
		e := DirEntry{FileID: d.Uint64(), Name: d.String(-1), Cookie: d.Uint64()}
		if d.Err() != nil {
			return
		}
		r.Entries = append(r.Entries, e)
	}
	r.EOF = d.Bool()
}

// DirEntryPlus is entryplus3 (RFC 1813 §3.3.17): an entry with its optional
// attributes and handle.
type DirEntryPlus struct {
	FileID uint64
	Name   string
	Cookie Cookie
	Attr   *Attr
	FH     FileHandle
}

// ReaddirplusResult is READDIRPLUS3res (RFC 1813 §3.3.17).
type ReaddirplusResult struct {
	DirAttr *Attr
	Verf    CookieVerf
	Entries []DirEntryPlus
	EOF     bool
}

func (r *ReaddirplusResult) decode(d *sunrpc.Decoder, st Status) {
	r.DirAttr = decodePostOpAttr(d)
	if st != StatusOK {
		return
	}
	copy(r.Verf[:], d.FixedOpaque(CookieVerfSize))
	for d.Bool() {
		if d.Len() < minEntrySize+4 {
			d.Fail(sunrpc.ErrTruncated)
			return
		}
		e := DirEntryPlus{FileID: d.Uint64(), Name: d.String(-1), Cookie: d.Uint64()}
		e.Attr = decodePostOpAttr(d)
		e.FH = decodePostOpFH(d)
		if d.Err() != nil {
			return
		}
		r.Entries = append(r.Entries, e)
	}
	r.EOF = d.Bool()
}

// FSStat is FSSTAT3resok (RFC 1813 §3.3.18): dynamic file system information.
type FSStat struct {
	Attr       *Attr
	TotalBytes uint64
	FreeBytes  uint64
	AvailBytes uint64
	TotalFiles uint64
	FreeFiles  uint64
	AvailFiles uint64
	Invarsec   uint32
}

func (r *FSStat) decode(d *sunrpc.Decoder, st Status) {
	r.Attr = decodePostOpAttr(d)
	if st == StatusOK {
		r.TotalBytes, r.FreeBytes, r.AvailBytes = d.Uint64(), d.Uint64(), d.Uint64()
		r.TotalFiles, r.FreeFiles, r.AvailFiles = d.Uint64(), d.Uint64(), d.Uint64()
		r.Invarsec = d.Uint32()
	}
}

// FSInfo is FSINFO3resok (RFC 1813 §3.3.19): static file system information.
type FSInfo struct {
	Attr        *Attr
	RtMax       uint32 // largest READ
	RtPref      uint32 // preferred READ size
	RtMult      uint32
	WtMax       uint32 // largest WRITE
	WtPref      uint32 // preferred WRITE size
	WtMult      uint32
	DtPref      uint32 // preferred READDIR size
	MaxFileSize uint64
	TimeDelta   Time
	Properties  uint32 // FSF* bits
}

func (r *FSInfo) decode(d *sunrpc.Decoder, st Status) {
	r.Attr = decodePostOpAttr(d)
	if st == StatusOK {
		r.RtMax, r.RtPref, r.RtMult = d.Uint32(), d.Uint32(), d.Uint32()
		r.WtMax, r.WtPref, r.WtMult = d.Uint32(), d.Uint32(), d.Uint32()
		r.DtPref = d.Uint32()
		r.MaxFileSize = d.Uint64()
		r.TimeDelta = decodeTime(d)
		r.Properties = d.Uint32()
	}
}

// PathConf is PATHCONF3resok (RFC 1813 §3.3.20).
type PathConf struct {
	Attr            *Attr
	LinkMax         uint32
	NameMax         uint32
	NoTrunc         bool
	ChownRestricted bool
	CaseInsensitive bool
	CasePreserving  bool
}

func (r *PathConf) decode(d *sunrpc.Decoder, st Status) {
	r.Attr = decodePostOpAttr(d)
	if st == StatusOK {
		r.LinkMax, r.NameMax = d.Uint32(), d.Uint32()
		r.NoTrunc, r.ChownRestricted = d.Bool(), d.Bool()
		r.CaseInsensitive, r.CasePreserving = d.Bool(), d.Bool()
	}
}

// CommitResult is COMMIT3res (RFC 1813 §3.3.21).
type CommitResult struct {
	Wcc  WccData
	Verf WriteVerf
}

func (r *CommitResult) decode(d *sunrpc.Decoder, st Status) {
	r.Wcc = decodeWcc(d)
	if st == StatusOK {
		copy(r.Verf[:], d.FixedOpaque(WriteVerfSize))
	}
}
