package nfs3

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// aclDefaultDir is the default ACL of setfacl -d -m
// u::rwx,g::rwx,o::rx,u:1002:rw- as knfsd sends it (with its mask entry).
var aclDefaultDir = ACL{Count: 5, Entries: []ACLEntry{
	{TagUserObj, 1001, 7}, {TagUser, 1002, 6}, {TagGroupObj, 1001, 7}, {TagMask, 0, 7}, {TagOther, 0, 5},
}}

func decodeGetACL(b []byte) (GetACLResult, Status, int, error) {
	d := sunrpc.NewDecoder(b)
	st := Status(d.Uint32())
	var r GetACLResult
	if d.Err() == nil {
		r.decode(d, st)
	}
	return r, st, d.Offset(), d.Err()
}

func TestGetACLResultCodec(t *testing.T) {
	a := &Attr{Type: TypeDir, Mode: 0o777, FileID: 7}
	r := GetACLResult{Attr: a, Mask: ACLDefault | ACLDefaultCount, Access: ACL{Count: 4}, Default: aclDefaultDir}
	b := r.Append(sunrpc.AppendUint32(nil, uint32(StatusOK)), StatusOK)
	// The default entries carry the flag on the wire.
	off := 4 + postOpAttrSize + 4 + 8 + 8
	if got := beUint32(b[off:]); got != uint32(TagUserObj|ACLDefaultFlag) {
		t.Fatalf("first default entry's type on the wire %#x, want %#x", got, TagUserObj|ACLDefaultFlag)
	}
	got, st, n, err := decodeGetACL(b)
	if err != nil || st != StatusOK || n != len(b) || !reflect.DeepEqual(got, r) {
		t.Fatalf("decoded %+v %v (%d of %d bytes, %v), want %+v", got, st, n, len(b), err, r)
	}
	for _, tc := range []struct {
		name string
		acl  []uint32 // count, n, entries...
	}{
		{"over the limit", []uint32{MaxACLEntries + 1, 0}},
		{"more entries than its count", []uint32{1, 2, 1, 0, 7, 0x20, 0, 5}},
		{"entries past the end", []uint32{3, 3, 1, 0, 7}},
	} {
		b := sunrpc.AppendUint32(nil, uint32(StatusOK))
		b = appendPostOpAttr(b, nil)
		b = sunrpc.AppendUint32(b, uint32(ACLDefault))
		b = appendACL(b, &ACL{}, false)
		for _, w := range tc.acl {
			b = sunrpc.AppendUint32(b, w)
		}
		if _, _, _, err := decodeGetACL(b); err == nil {
			t.Errorf("%s: decoded", tc.name)
		}
	}
}

// FuzzGetACLResult: whatever the decoder accepts re-encodes to as many
// bytes as it read and decodes again to the same result; it never
// allocates more entries than the reply holds.
func FuzzGetACLResult(f *testing.F) {
	a := &Attr{Type: TypeDir, Mode: 0o755}
	for _, r := range []GetACLResult{
		{Attr: a, Mask: ACLDefault | ACLDefaultCount, Default: aclDefaultDir},
		{Mask: ACLAccess | ACLAccessCount, Access: ACL{Count: 4, Entries: aclDefaultDir.Entries[:4]}},
		{Attr: a},
	} {
		f.Add(r.Append(sunrpc.AppendUint32(nil, uint32(StatusOK)), StatusOK))
	}
	f.Add(appendPostOpAttr(sunrpc.AppendUint32(nil, uint32(ErrNotSupp)), a))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, st, n, err := decodeGetACL(b)
		if err != nil {
			return
		}
		if len(r.Access.Entries)+len(r.Default.Entries) > len(b)/aclEntrySize {
			t.Fatalf("%d entries from %d bytes", len(r.Access.Entries)+len(r.Default.Entries), len(b))
		}
		enc := r.Append(sunrpc.AppendUint32(nil, uint32(st)), st)
		if len(enc) != n {
			t.Fatalf("decoded %d bytes, re-encoded %d", n, len(enc))
		}
		r2, st2, _, err := decodeGetACL(enc)
		if err != nil || st2 != st || !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip: %+v -> %+v (%v)", r, r2, err)
		}
	})
}

// TestGetACLCall: GETACL goes to program 100227 version 3, procedure 1,
// with the handle and the mask, on the NFS client's transport; a server
// without the program is told by NoACLProgram; a status is the error.
func TestGetACLCall(t *testing.T) {
	ctx := context.Background()
	var gotMask uint32
	var gotFH []byte
	m := &memTransport{handle: func(h sunrpc.CallHeader, args *sunrpc.Decoder, _ *sunrpc.Request) fakeReply {
		if h.Prog == Program && h.Proc == ProcNull {
			return ok()
		}
		if h.Prog != ACLProgram || h.Vers != ACLVersion || h.Proc != ACLProcGetacl {
			t.Errorf("call to prog %d vers %d proc %d", h.Prog, h.Vers, h.Proc)
		}
		gotFH = append([]byte(nil), args.Opaque(FHSize)...)
		gotMask = args.Uint32()
		r := GetACLResult{Mask: ACLMask(gotMask), Default: aclDefaultDir}
		return ok(r.Append(appendStatus(nil, StatusOK), StatusOK))
	}}
	c, err := NewClient(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.GetACL(ctx, testFH, ACLDefault|ACLDefaultCount)
	if err != nil {
		t.Fatal(err)
	}
	if gotMask != uint32(ACLDefault|ACLDefaultCount) || string(gotFH) != string(testFH) {
		t.Errorf("sent mask %#x handle %x", gotMask, gotFH)
	}
	if !reflect.DeepEqual(r.Default, aclDefaultDir) {
		t.Errorf("default ACL %+v", r.Default)
	}
	// The NFS and NFSACL calls share the transport: their XIDs differ.
	c.Null(ctx)
	if len(m.calls) != 2 || m.calls[0].XID == m.calls[1].XID {
		t.Errorf("calls %+v: want two with different XIDs", m.calls)
	}

	m.handle = func(h sunrpc.CallHeader, _ *sunrpc.Decoder, _ *sunrpc.Request) fakeReply {
		return fakeReply{raw: sunrpc.AppendReply(nil, &sunrpc.ReplyHeader{XID: h.XID, Stat: sunrpc.MsgAccepted, Accept: sunrpc.ProgUnavail})}
	}
	if _, err := c.GetACL(ctx, testFH, ACLDefault); !NoACLProgram(err) {
		t.Errorf("PROG_UNAVAIL: %v, NoACLProgram false", err)
	}
	m.handle = func(sunrpc.CallHeader, *sunrpc.Decoder, *sunrpc.Request) fakeReply {
		return ok(appendPostOpAttr(appendStatus(nil, ErrNotSupp), nil))
	}
	if _, err := c.GetACL(ctx, testFH, ACLDefault); !errors.Is(err, ErrNotSupp) || NoACLProgram(err) {
		t.Errorf("NFS3ERR_NOTSUPP: %v", err)
	}
}

func decodeSetACL(b []byte) (SetACLResult, Status, int, error) {
	d := sunrpc.NewDecoder(b)
	st := Status(d.Uint32())
	var r SetACLResult
	if d.Err() == nil {
		r.decode(d, st)
	}
	return r, st, d.Offset(), d.Err()
}

// FuzzSetACLResult: whatever the decoder accepts re-encodes to as many
// bytes as it read and decodes again to the same result.
func FuzzSetACLResult(f *testing.F) {
	a := &Attr{Type: TypeReg, Mode: 0o640, Ctime: Time{Seconds: 5}}
	f.Add((&SetACLResult{Attr: a}).Append(appendStatus(nil, StatusOK), StatusOK))
	f.Add((&SetACLResult{}).Append(appendStatus(nil, StatusOK), StatusOK))
	f.Add((&SetACLResult{Attr: a}).Append(appendStatus(nil, ErrPerm), ErrPerm))
	f.Add(appendStatus(nil, ErrPerm))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, st, n, err := decodeSetACL(b)
		if err != nil {
			return
		}
		enc := r.Append(appendStatus(nil, st), st)
		if st == StatusOK || r.Attr != nil || n > 4 {
			if len(enc) != n {
				t.Fatalf("decoded %d bytes, re-encoded %d", n, len(enc))
			}
		}
		r2, st2, _, err := decodeSetACL(enc)
		if err != nil || st2 != st || !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip: %+v -> %+v (%v)", r, r2, err)
		}
	})
}

// TestSetACLCall: SETACL goes to procedure 2 with the handle, the mask and
// both ACLs, every entry sent and the default ACL's flagged; the reply's
// attributes come back, with an error status too; NFS3ERR_PERM is the
// error.
func TestSetACLCall(t *testing.T) {
	ctx := context.Background()
	access := ACL{Entries: []ACLEntry{{TagUserObj, 1001, 6}, {TagUser, 1002, 4}, {TagGroupObj, 1001, 4}, {TagMask, 0, 4}, {TagOther, 0, 0}}}
	after := &Attr{Type: TypeDir, Mode: 0o750, Ctime: Time{Seconds: 9}}
	var got struct {
		fh           []byte
		mask         ACLMask
		access, dflt ACL
		raw          []byte
	}
	st := StatusOK
	m := &memTransport{handle: func(h sunrpc.CallHeader, args *sunrpc.Decoder, _ *sunrpc.Request) fakeReply {
		if h.Prog == Program && h.Proc == ProcNull {
			return ok()
		}
		if h.Prog != ACLProgram || h.Vers != ACLVersion || h.Proc != ACLProcSetacl {
			t.Errorf("call to prog %d vers %d proc %d", h.Prog, h.Vers, h.Proc)
		}
		peek := *args
		got.raw = append([]byte(nil), peek.Rest()...)
		fh, mask, a, d, err := DecodeSetACLArgs(args)
		if err != nil {
			t.Errorf("SETACL args: %v", err)
		}
		got.fh, got.mask, got.access, got.dflt = append([]byte(nil), fh...), mask, a, d
		return ok((&SetACLResult{Attr: after}).Append(appendStatus(nil, st), st))
	}}
	c, err := NewClient(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.SetACL(ctx, testFH, ACLAccess|ACLDefault, &access, &aclDefaultDir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.Attr, after) {
		t.Errorf("attributes %+v, want %+v", r.Attr, after)
	}
	wantAccess := ACL{Count: 5, Entries: access.Entries}
	if string(got.fh) != string(testFH) || got.mask != ACLAccess|ACLDefault ||
		!reflect.DeepEqual(got.access, wantAccess) || !reflect.DeepEqual(got.dflt, aclDefaultDir) {
		t.Errorf("sent %x mask %#x access %+v default %+v", got.fh, got.mask, got.access, got.dflt)
	}
	// The default ACL's first entry carries the flag on the wire: after
	// the handle, the mask, the access aclent and the default's two counts.
	off := 4 + len(testFH) + (4-len(testFH)%4)%4 + 4 + 8 + 5*aclEntrySize + 8
	if tag := beUint32(got.raw[off:]); tag != uint32(TagUserObj|ACLDefaultFlag) {
		t.Errorf("default entry's type on the wire %#x", tag)
	}
	// Removing the default ACL: an empty aclent.
	if _, err := c.SetACL(ctx, testFH, ACLDefault, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got.mask != ACLDefault || got.access.Count != 0 || got.dflt.Count != 0 || got.dflt.Entries != nil {
		t.Errorf("removal sent mask %#x access %+v default %+v", got.mask, got.access, got.dflt)
	}
	st = ErrPerm
	r, err = c.SetACL(ctx, testFH, ACLAccess, &access, nil)
	if !errors.Is(err, ErrPerm) || r.Attr == nil {
		t.Errorf("NFS3ERR_PERM: %v, attributes %+v", err, r.Attr)
	}
	// A failure without attributes (the status alone).
	m.handle = func(sunrpc.CallHeader, *sunrpc.Decoder, *sunrpc.Request) fakeReply {
		return ok(appendStatus(nil, ErrAcces))
	}
	if _, err := c.SetACL(ctx, testFH, ACLAccess, &access, nil); !errors.Is(err, ErrAcces) {
		t.Errorf("NFS3ERR_ACCES without attributes: %v", err)
	}
}
