package nfs3

import (
	"context"
	"errors"
	"fmt"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// NFSACL is the side protocol through which Linux and Solaris NFSv3
// servers read and set POSIX ACLs (program 100227, version 3, on the NFS
// service's port and transports). No RFC describes it; its wire format is
// the one those servers and the Linux client speak:
//
//	GETACL3args: nfs_fh3 fh; uint32 mask
//	GETACL3res:  nfsstat3 status; post_op_attr attr;
//	             if status is NFS3_OK: uint32 mask; aclent access; aclent default
//	aclent:      uint32 count; uint32 n; n × (uint32 type, uint32 id, uint32 perm)
//	SETACL3args: nfs_fh3 fh; uint32 mask; aclent access; aclent default
//	SETACL3res:  nfsstat3 status; post_op_attr attr
//
// count is how many entries the ACL has; the n entries follow only where
// the mask asked for them (n is 0 otherwise, and never above count). A
// default ACL's entries carry ACLDefaultFlag in their type. The owner's
// and owning group's entries carry their ids; the mask and other entries
// carry 0. A minimal ACL is sent with a mask entry equal to the group's
// (four entries, not three). SETACL's mask says which of its two ACLs the
// server is to set (ACLAccess, ACLDefault); both aclents are always sent,
// an empty one (count 0) for an ACL not set, and an empty default ACL
// removes the directory's default ACL. The server sets the object's mode
// from the access ACL, and drops an access ACL the mode says all of.
const (
	ACLProgram    = 100227
	ACLVersion    = 3
	ACLProcNull   = 0
	ACLProcGetacl = 1
	ACLProcSetacl = 2
)

// ACLMask selects the parts of GETACL's answer.
type ACLMask uint32

// Bits of ACLMask.
const (
	ACLAccess       ACLMask = 0x1 // the access ACL's entries
	ACLAccessCount  ACLMask = 0x2 // the access ACL's entry count
	ACLDefault      ACLMask = 0x4 // the default ACL's entries
	ACLDefaultCount ACLMask = 0x8 // the default ACL's entry count
)

// ACLTag is the type of an ACL entry (the kind of its qualifier).
type ACLTag uint32

// Entry types (POSIX 1003.1e draft 17, as the protocol numbers them).
const (
	TagUserObj  ACLTag = 0x01 // the owner
	TagUser     ACLTag = 0x02 // a named user (ID)
	TagGroupObj ACLTag = 0x04 // the owning group
	TagGroup    ACLTag = 0x08 // a named group (ID)
	TagMask     ACLTag = 0x10 // the most named users and the groups get
	TagOther    ACLTag = 0x20 // everyone else

	// ACLDefaultFlag marks the entries of a default ACL on the wire.
	ACLDefaultFlag ACLTag = 0x1000
)

// MaxACLEntries is the most entries an ACL has on the wire (the Linux
// client's and server's limit, NFS_ACL_MAX_ENTRIES).
const MaxACLEntries = 1024

// aclEntrySize is an entry's size on the wire.
const aclEntrySize = 12

// ACLEntry is one entry of an ACL: its type, the user or group it names
// (TagUser, TagGroup; the owner's or group's id for TagUserObj and
// TagGroupObj), and its permissions (r=4, w=2, x=1).
type ACLEntry struct {
	Tag  ACLTag
	ID   uint32
	Perm uint32
}

// ACL is one ACL of a GETACL answer. Count is how many entries the object
// has (0: none, the object has no such ACL); Entries are those entries when
// the mask asked for them (never more than Count). The entries' Tag is
// without ACLDefaultFlag.
type ACL struct {
	Count   uint32
	Entries []ACLEntry
}

// GetACLResult is GETACL's answer: the object's attributes (if returned) and,
// on success, the mask the server answered and the two ACLs.
type GetACLResult struct {
	Attr    *Attr
	Mask    ACLMask
	Access  ACL
	Default ACL
}

// ACLError reports a malformed ACL in a reply.
type ACLError struct {
	Reason string
}

func (e *ACLError) Error() string { return "nfs3: NFSACL: " + e.Reason }

// decodeACL reads an aclent. Limits are checked before anything is
// allocated: at most MaxACLEntries, never more entries than its count, and
// no more than the bytes left hold.
func decodeACL(d *sunrpc.Decoder) ACL {
	count := d.Uint32()
	n := d.Uint32()
	if d.Err() != nil {
		return ACL{}
	}
	switch {
	case count > MaxACLEntries:
		d.Fail(&ACLError{Reason: fmt.Sprintf("%d entries, the limit is %d", count, MaxACLEntries)})
		return ACL{}
	case n > count:
		d.Fail(&ACLError{Reason: fmt.Sprintf("%d entries sent of an ACL of %d", n, count)})
		return ACL{}
	case int(n) > d.Len()/aclEntrySize:
		d.Fail(sunrpc.ErrTruncated)
		return ACL{}
	}
	acl := ACL{Count: count}
	if n > 0 {
		acl.Entries = make([]ACLEntry, n)
	}
	for i := range acl.Entries {
		// The flag is taken off whichever ACL the entry is in, as the
		// Linux client does.
		tag := ACLTag(d.Uint32()) &^ ACLDefaultFlag
		acl.Entries[i] = ACLEntry{Tag: tag, ID: d.Uint32(), Perm: d.Uint32()}
	}
	return acl
}

// appendACL appends acl as an aclent (the default ACL's with dflt).
func appendACL(b []byte, acl *ACL, dflt bool) []byte {
	b = sunrpc.AppendUint32(b, acl.Count)
	b = sunrpc.AppendUint32(b, uint32(len(acl.Entries)))
	for _, e := range acl.Entries {
		tag := e.Tag
		if dflt {
			tag |= ACLDefaultFlag
		}
		b = sunrpc.AppendUint32(b, uint32(tag))
		b = sunrpc.AppendUint32(b, e.ID)
		b = sunrpc.AppendUint32(b, e.Perm)
	}
	return b
}

func (r *GetACLResult) decode(d *sunrpc.Decoder, st Status) {
	r.Attr = decodePostOpAttr(d)
	if st != StatusOK {
		return
	}
	r.Mask = ACLMask(d.Uint32())
	r.Access = decodeACL(d)
	r.Default = decodeACL(d)
}

// Append appends the result as a server sends it after the status st
// (GETACL3res without its nfsstat3).
func (r *GetACLResult) Append(b []byte, st Status) []byte {
	b = appendPostOpAttr(b, r.Attr)
	if st != StatusOK {
		return b
	}
	b = sunrpc.AppendUint32(b, uint32(r.Mask))
	b = appendACL(b, &r.Access, false)
	return appendACL(b, &r.Default, true)
}

// maxGetACLResults bounds a GETACL reply after the reply header: the
// status, attributes, mask and two ACLs of the most entries.
const maxGetACLResults = 4 + postOpAttrSize + 4 + 2*(8+aclEntrySize*MaxACLEntries)

// GetACL asks the server for fh's ACLs (NFSACL GETACL, see ACLProgram):
// the parts mask selects. A server without the program answers with a
// sunrpc error that errors.Is matches with NoACLProgram; a file system
// without ACLs may answer NFS3ERR_NOTSUPP.
func (c *Client) GetACL(ctx context.Context, fh FileHandle, mask ACLMask) (GetACLResult, error) {
	if err := checkFH(fh); err != nil {
		return GetACLResult{}, err
	}
	b := sunrpc.AppendUint32(appendFH(nil, fh), uint32(mask))
	r, err := c.acl.Call(ctx, ACLProcGetacl, &sunrpc.Args{Head: b, MaxResults: maxGetACLResults})
	if err != nil {
		return GetACLResult{}, err
	}
	defer r.Release()
	var res GetACLResult
	st := Status(r.Uint32())
	if r.Err() == nil {
		res.decode(r.Decoder, st)
	}
	if err := r.Err(); err != nil {
		return GetACLResult{}, &ACLReplyError{Err: err}
	}
	if st != StatusOK {
		return res, st
	}
	return res, nil
}

// SetACLResult is SETACL's answer: the object's attributes after the call
// (if returned).
type SetACLResult struct {
	Attr *Attr
}

// decode reads SETACL3res after its status st. The attributes follow the
// status on success; knfsd sends them on failure too, other servers may
// not, so after a failure they are read only when present.
func (r *SetACLResult) decode(d *sunrpc.Decoder, st Status) {
	if st != StatusOK && d.Len() == 0 {
		return
	}
	r.Attr = decodePostOpAttr(d)
}

// Append appends the result as a server sends it after the status
// (SETACL3res without its nfsstat3).
func (r *SetACLResult) Append(b []byte, _ Status) []byte {
	return appendPostOpAttr(b, r.Attr)
}

// AppendSetACLArgs appends SETACL3args: fh, mask, and the access and
// default ACLs (nil: an empty aclent). Each ACL is sent with all its
// entries (its Count is len(Entries)); the entries' Tag is without
// ACLDefaultFlag, which the default ACL's get here.
func AppendSetACLArgs(b []byte, fh FileHandle, mask ACLMask, access, dflt *ACL) []byte {
	b = appendFH(b, fh)
	b = sunrpc.AppendUint32(b, uint32(mask))
	for i, acl := range []*ACL{access, dflt} {
		var a ACL
		if acl != nil {
			a = ACL{Count: uint32(len(acl.Entries)), Entries: acl.Entries}
		}
		b = appendACL(b, &a, i == 1)
	}
	return b
}

// DecodeSetACLArgs reads SETACL3args, for a server or a test that answers
// SETACL: the handle, the mask and the two ACLs (their entries' Tag
// without ACLDefaultFlag), with GETACL's limits.
func DecodeSetACLArgs(d *sunrpc.Decoder) (fh FileHandle, mask ACLMask, access, dflt ACL, err error) {
	fh = FileHandle(d.Opaque(FHSize))
	mask = ACLMask(d.Uint32())
	access = decodeACL(d)
	dflt = decodeACL(d)
	return fh, mask, access, dflt, d.Err()
}

// maxSetACLResults bounds a SETACL reply after the reply header.
const maxSetACLResults = 4 + postOpAttrSize

// SetACL sets fh's ACLs (NFSACL SETACL): the access ACL when mask has
// ACLAccess, the default ACL when it has ACLDefault (an empty or nil one
// removes it). Entries go as given: a minimal access ACL is sent with its
// mask entry (see ACLProgram). The attributes returned are the object's
// after the call, also with an error status when the server sent them. A
// server without the program answers with an error NoACLProgram matches;
// one refusing a caller who does not own the object, NFS3ERR_PERM.
func (c *Client) SetACL(ctx context.Context, fh FileHandle, mask ACLMask, access, dflt *ACL) (SetACLResult, error) {
	if err := checkFH(fh); err != nil {
		return SetACLResult{}, err
	}
	for _, a := range []*ACL{access, dflt} {
		if a != nil && len(a.Entries) > MaxACLEntries {
			return SetACLResult{}, fmt.Errorf("nfs3: SETACL of %d entries: the limit is %d", len(a.Entries), MaxACLEntries)
		}
	}
	b := AppendSetACLArgs(nil, fh, mask, access, dflt)
	r, err := c.acl.Call(ctx, ACLProcSetacl, &sunrpc.Args{Head: b, MaxResults: maxSetACLResults})
	if err != nil {
		return SetACLResult{}, err
	}
	defer r.Release()
	var res SetACLResult
	st := Status(r.Uint32())
	if r.Err() == nil {
		res.decode(r.Decoder, st)
	}
	if err := r.Err(); err != nil {
		return SetACLResult{}, &ACLReplyError{Err: err}
	}
	if st != StatusOK {
		return res, st
	}
	return res, nil
}

// ACLReplyError reports a GETACL or SETACL reply the client could not
// decode.
type ACLReplyError struct {
	Err error
}

func (e *ACLReplyError) Error() string { return fmt.Sprintf("nfs3: malformed NFSACL reply: %v", e.Err) }

func (e *ACLReplyError) Unwrap() error { return e.Err }

// NoACLProgram reports whether err says the server does not serve NFSACL
// version 3: the program, its version or the procedure is not there
// (PROG_UNAVAIL, PROG_MISMATCH, PROC_UNAVAIL). The Linux client stops
// asking such a server for ACLs.
func NoACLProgram(err error) bool {
	return errors.Is(err, sunrpc.ErrProgUnavail) || errors.Is(err, sunrpc.ErrProgMismatch) ||
		errors.Is(err, sunrpc.ErrProcUnavail)
}
