package nfs4

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io/fs"
	"strings"
	"syscall"
	"testing"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// words builds a byte layout from hex words written as in the RFCs' XDR
// (spaces ignored), so golden layouts read as the wire does.
func words(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var testSession = SessionID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}

const testSessionHex = "01020304 05060708 090a0b0c 0d0e0f10"

// TestCompoundReadGolden checks SEQUENCE, PUTFH, READ against the layout of
// COMPOUND4args (RFC 8881 §16.2.1) with SEQUENCE4args (§18.46.1), PUTFH4args
// (§18.19.1) and READ4args (§18.22.1), and that the READ data is offered as
// the DDP-eligible result (RFC 8267 §6.1).
func TestCompoundReadGolden(t *testing.T) {
	cb := newCompound()
	var sr SequenceResult
	cb.sequence(&SequenceArgs{SessionID: testSession, SequenceID: 7, SlotID: 2, HighestSlot: 3}, &sr)
	cb.putFH(FileHandle{0xaa, 0xbb, 0xcc})
	p := make([]byte, 5)
	var rr ReadResult
	sid := StateID{Seq: 1}
	for i := range sid.Other {
		sid.Other[i] = 0x11
	}
	cb.read(sid, 0x1000, p, &rr)
	a := cb.args()
	want := words(t, `
		00000000 00000001 00000003
		00000035 `+testSessionHex+` 00000007 00000002 00000003 00000000
		00000016 00000003 aabbcc00
		00000019 00000001 11111111 11111111 11111111 00000000 00001000 00000005`)
	if !bytes.Equal(a.Head, want) {
		t.Errorf("head\n got %x\nwant %x", a.Head, want)
	}
	if a.Bulk != nil || a.Tail != nil || &a.ReplyBulk[0] != &p[0] {
		t.Errorf("bulk %x tail %x replyBulk aliases p: %v", a.Bulk, a.Tail, &a.ReplyBulk[0] == &p[0])
	}

	reply := words(t, `
		00000000 00000000 00000003
		00000035 00000000 `+testSessionHex+` 00000007 00000002 0000000f 00000007 00000001
		00000016 00000000
		00000019 00000000 00000001 00000005 68656c6c 6f000000`)
	if err := decodeCompound(sunrpc.NewDecoder(reply), cb.ops, cb.results); err != nil {
		t.Fatal(err)
	}
	if string(p) != "hello" || rr != (ReadResult{EOF: true, Count: 5}) {
		t.Errorf("READ result %+v data %q", rr, p)
	}
	if sr.SequenceID != 7 || sr.SlotID != 2 || sr.HighestSlot != 15 || sr.TargetHighestSlot != 7 || sr.StatusFlags != SeqStatusCBPathDown || sr.SessionID != testSession {
		t.Errorf("SEQUENCE result %+v", sr)
	}

	// The same reply with the data received apart (an RDMA Write chunk): the
	// length word stays inline, the bytes and their pad do not.
	clear(p)
	inline := reply[:len(reply)-8]
	bulk := []byte("hello")
	cb2 := newCompound()
	cb2.sequence(&SequenceArgs{SessionID: testSession}, &sr)
	cb2.putFH(FileHandle{1})
	cb2.read(sid, 0, p, &rr)
	if err := decodeCompound(sunrpc.NewBulkDecoder(inline, bulk), cb2.ops, cb2.results); err != nil {
		t.Fatal(err)
	}
	if string(p) != "hello" || rr.Count != 5 {
		t.Errorf("READ over a Write chunk: %+v %q", rr, p)
	}
}

// TestCompoundWriteGolden checks that WRITE's data is the bulk part (RFC
// 8267 §6.1): head ends with its length word, what follows WRITE4args
// (§18.32.1) is the tail.
func TestCompoundWriteGolden(t *testing.T) {
	cb := newCompound()
	var sr SequenceResult
	cb.sequence(&SequenceArgs{SessionID: testSession, SequenceID: 1}, &sr)
	cb.putFH(FileHandle{0xaa, 0xbb, 0xcc, 0xdd})
	var wr WriteResult
	data := []byte("hello")
	cb.write(StateID{}, 8, FileSync, data, &wr)
	var at Attr
	cb.getAttr(NewBitmap(AttrSize), &at)
	a := cb.args()
	wantHead := words(t, `
		00000000 00000001 00000004
		00000035 `+testSessionHex+` 00000001 00000000 00000000 00000000
		00000016 00000004 aabbccdd
		00000026 00000000 00000000 00000000 00000000 00000000 00000008 00000002 00000005`)
	if !bytes.Equal(a.Head, wantHead) {
		t.Errorf("head\n got %x\nwant %x", a.Head, wantHead)
	}
	if &a.Bulk[0] != &data[0] || len(a.Bulk) != 5 {
		t.Errorf("bulk %q does not alias the caller's data", a.Bulk)
	}
	if want := words(t, "00000009 00000001 00000010"); !bytes.Equal(a.Tail, want) {
		t.Errorf("tail %x, want %x", a.Tail, want)
	}
	if a.ReplyBulk != nil {
		t.Error("a WRITE compound offers a reply bulk buffer")
	}
	req := sunrpc.Request{Head: a.Head, Bulk: a.Bulk, Tail: a.Tail}
	if req.Len() != len(a.Head)+8+len(a.Tail) {
		t.Errorf("inline length %d: the bulk is not padded to 8", req.Len())
	}

	reply := words(t, `
		00000000 00000000 00000004
		00000035 00000000 `+testSessionHex+` 00000001 00000000 00000000 00000000 00000000
		00000016 00000000
		00000026 00000000 00000005 00000002 01020304 05060708
		00000009 00000000 00000001 00000010 00000008 00000000 0000000d`)
	if err := decodeCompound(sunrpc.NewDecoder(reply), cb.ops, cb.results); err != nil {
		t.Fatal(err)
	}
	if wr.Count != 5 || wr.Committed != FileSync || wr.Verf != (Verifier{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Errorf("WRITE result %+v", wr)
	}
	if !at.Has(AttrSize) || at.Size != 13 {
		t.Errorf("GETATTR after WRITE: %+v", at)
	}
}

// TestSymlinkLinkDataIsBulk checks CREATE of NF4LNK (RFC 8881 §18.4.1):
// linkdata is the DDP-eligible argument, objname and createattrs the tail.
func TestSymlinkLinkDataIsBulk(t *testing.T) {
	cb := newCompound()
	var ci ChangeInfo
	cb.putFH(FileHandle{1, 2, 3, 4})
	cb.createSymlink("ln", "target", &SetAttr{}, &ci)
	a := cb.args()
	if string(a.Bulk) != "target" {
		t.Errorf("bulk %q", a.Bulk)
	}
	if !bytes.HasSuffix(a.Head, words(t, "00000006 00000005 00000006")) {
		t.Errorf("head does not end with CREATE, NF4LNK, the length word: %x", a.Head)
	}
	if want := words(t, "00000002 6c6e0000 00000000 00000000"); !bytes.Equal(a.Tail, want) {
		t.Errorf("tail %x, want %x", a.Tail, want)
	}
}

func TestOneDDPItemPerCompound(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("a READ after a WRITE in one compound was accepted")
		}
	}()
	cb := newCompound()
	var wr WriteResult
	var rr ReadResult
	cb.write(StateID{}, 0, Unstable, []byte("x"), &wr)
	cb.read(StateID{}, 0, make([]byte, 1), &rr)
}

func TestCompoundErrors(t *testing.T) {
	build := func() *compound {
		cb := newCompound()
		var sr SequenceResult
		cb.sequence(&SequenceArgs{}, &sr)
		cb.putFH(FileHandle{1})
		cb.lookup("x")
		var fh FileHandle
		cb.getFH(&fh)
		return cb
	}
	seqOK := "00000035 00000000 " + testSessionHex + " 00000001 00000000 00000000 00000000 00000000"
	for _, tc := range []struct {
		name  string
		reply string
		op    *OpError
		err   string
	}{
		{"lookup fails", "00000002 00000000 00000003 " + seqOK + " 00000016 00000000 0000000f 00000002",
			&OpError{Op: OpLookup, Index: 2, Status: ErrNoEnt}, ""},
		{"sequence fails", "00002744 00000000 00000001 00000035 00002744",
			&OpError{Op: OpSequence, Index: 0, Status: ErrBadSession}, ""},
		{"refused before any op", "00002725 00000000 00000000",
			&OpError{Op: OpSequence, Index: -1, Status: ErrMinorVersMismatch}, ""},
		{"illegal op", "0000273c 00000000 00000002 " + seqOK + " 0000273c 0000273c",
			&OpError{Op: OpPutFH, Index: 1, Status: ErrOpIllegal}, ""},
		{"wrong opnum", "00000000 00000000 00000002 " + seqOK + " 00000017 00000000", nil, "is for op(23)"},
		{"results after failure", "00000002 00000000 00000004 " + seqOK + " 00000016 00000000 0000000f 00000002 0000000a 00000000", nil, "but 1 more"},
		{"status mismatch", "00000000 00000000 00000003 " + seqOK + " 00000016 00000000 0000000f 00000002", nil, "COMPOUND status"},
		{"too few results", "00000000 00000000 00000002 " + seqOK + " 00000016 00000000", nil, "2 results for 4"},
		{"too many results", "00000000 00000000 00000005", nil, "exceeds limit"},
		{"truncated", "00000000 00000000 00000003 00000035", nil, "truncated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cb := build()
			err := decodeCompound(sunrpc.NewDecoder(words(t, tc.reply)), cb.ops, cb.results)
			var oe *OpError
			switch {
			case tc.op != nil:
				if !errors.As(err, &oe) || *oe != *tc.op {
					t.Fatalf("error %v, want %+v", err, tc.op)
				}
			case err == nil || errors.As(err, &oe) || !strings.Contains(err.Error(), tc.err):
				t.Fatalf("error %v, want a decoding error with %q", err, tc.err)
			}
		})
	}
	e := &OpError{Op: OpLookup, Status: ErrNoEnt}
	if !errors.Is(e, fs.ErrNotExist) || !errors.Is(e, ErrNoEnt) {
		t.Error("an OpError does not unwrap to its status and fs.ErrNotExist")
	}
}

// TestFattrGolden decodes fattr4 (RFC 8881 §3.3.7: bitmap4 and
// attr_vals) and encodes SETATTR's, attributes in increasing order.
func TestFattrGolden(t *testing.T) {
	b := words(t, `00000002 00000012 00000012 00000018
		00000001 00000000 00000400 000001a4 00000004 31303030`)
	d := sunrpc.NewDecoder(b)
	a := decodeFattr(d)
	if d.Err() != nil || d.Len() != 0 {
		t.Fatal(d.Err(), d.Len())
	}
	if a.Type != TypeReg || a.Size != 1024 || a.Mode != 0o644 || a.Owner != "1000" || !a.Has(AttrOwner) || a.Has(AttrOwnerGroup) {
		t.Errorf("%+v", a)
	}
	if uid, ok := a.UID(); !ok || uid != 1000 {
		t.Errorf("UID %d %v", uid, ok)
	}
	if a.FileMode() != 0o644 {
		t.Errorf("FileMode %v", a.FileMode())
	}

	got := appendFattr(nil, &SetAttr{Size: Ptr(uint64(0)), Mode: Ptr(uint32(0o755)), MTime: &SetTime{ServerTime: true},
		ATime: &SetTime{Time: Time{Seconds: 1, Nseconds: 2}}})
	want := words(t, `00000002 00000010 00410002 00000020
		00000000 00000000 000001ed 00000001 00000000 00000001 00000002 00000000`)
	if !bytes.Equal(got, want) {
		t.Errorf("SETATTR fattr4\n got %x\nwant %x", got, want)
	}

	bad := []struct{ name, hex string }{
		{"unknown attribute", "00000001 00001000 00000004 00000000"},
		{"trailing bytes", "00000001 00000002 00000008 00000001 00000000"},
		{"short values", "00000001 00000010 00000004 00000000"},
		{"bad nanoseconds", "00000002 00000000 00200000 0000000c 00000000 00000000 3b9aca00"},
	}
	for _, tc := range bad {
		d := sunrpc.NewDecoder(words(t, tc.hex))
		decodeFattr(d)
		if d.Err() == nil {
			t.Errorf("%s: decoded without error", tc.name)
		}
	}
}

func TestFattrRoundTrip(t *testing.T) {
	s := SetAttr{Size: Ptr(uint64(1 << 40)), Mode: Ptr(uint32(0o4751)), Owner: Ptr("alice@example.org"), OwnerGroup: Ptr(OwnerID(100))}
	d := sunrpc.NewDecoder(appendFattr(nil, &s))
	a := decodeFattr(d)
	if d.Err() != nil || a.Size != *s.Size || a.Mode != *s.Mode || a.Owner != *s.Owner || a.OwnerGroup != "100" {
		t.Errorf("%v %+v", d.Err(), a)
	}
	if gid, ok := a.GID(); !ok || gid != 100 {
		t.Errorf("GID %d %v", gid, ok)
	}
}

// TestSessionOpsGolden checks EXCHANGE_ID4args (RFC 8881 §18.35.1) and
// CREATE_SESSION4args (§18.36.1) byte for byte, and decodes their results.
func TestSessionOpsGolden(t *testing.T) {
	cb := newCompound()
	var er ExchangeIDResult
	cb.exchangeID(&ClientOwner{Verifier: Verifier{1, 2, 3, 4, 5, 6, 7, 8}, OwnerID: []byte("abc")}, 0, &er)
	a := cb.args()
	want := words(t, `00000000 00000001 00000001 0000002a
		01020304 05060708 00000003 61626300 00000000 00000000 00000001`)
	if !bytes.HasPrefix(a.Head, want) {
		t.Errorf("EXCHANGE_ID head\n got %x\nwant prefix %x", a.Head, want)
	}
	reply := words(t, `00000000 00000000 00000001 0000002a 00000000
		00000000 0000abcd 00000005 80010000 00000000
		00000000 00000007 00000002 6b6e0000 00000000 00000000`)
	if err := decodeCompound(sunrpc.NewDecoder(reply), cb.ops, cb.results); err != nil {
		t.Fatal(err)
	}
	if er.ClientID != 0xabcd || er.SequenceID != 5 || er.Flags != 0x80010000 || er.ServerMinor != 7 || string(er.ServerMajor) != "kn" {
		t.Errorf("%+v", er)
	}

	cb = newCompound()
	var cr CreateSessionResult
	fore := ChannelAttrs{MaxRequestSize: 0x1000, MaxResponseSize: 0x2000, MaxResponseSizeCached: 0x800, MaxOperations: 16, MaxRequests: 64, RDMAIRD: []uint32{4}}
	cb.createSession(0xabcd, 5, &fore, &backChannel, &cr)
	a = cb.args()
	want = words(t, `00000000 00000001 00000001 0000002b
		00000000 0000abcd 00000005 00000000
		00000000 00001000 00002000 00000800 00000010 00000040 00000001 00000004
		00000000 00001000 00001000 00000000 00000002 00000001 00000000
		40000000 00000001 00000000`)
	if !bytes.Equal(a.Head, want) {
		t.Errorf("CREATE_SESSION head\n got %x\nwant %x", a.Head, want)
	}
	reply = words(t, `00000000 00000000 00000001 0000002b 00000000 `+testSessionHex+` 00000005 00000000
		00000000 00001000 00002000 00000800 00000010 00000020 00000000
		00000000 00001000 00001000 00000000 00000002 00000001 00000000`)
	if err := decodeCompound(sunrpc.NewDecoder(reply), cb.ops, cb.results); err != nil {
		t.Fatal(err)
	}
	if cr.SessionID != testSession || cr.Fore.MaxRequests != 32 || cr.Back.MaxOperations != 2 {
		t.Errorf("%+v", cr)
	}
}

func TestOpenGolden(t *testing.T) {
	cb := newCompound()
	var or OpenResult
	cb.open(stateOwner{ClientID: 0xabcd, Owner: []byte("o1")}, ShareAccessBoth, ShareDenyNone,
		&OpenHow{Create: true, Mode: Exclusive41, Verf: Verifier{9, 9, 9, 9, 9, 9, 9, 9}, Attr: SetAttr{Mode: Ptr(uint32(0o600))}}, "f", &or)
	a := cb.args()
	want := words(t, `00000000 00000001 00000001 00000012
		00000000 00000403 00000000 00000000 0000abcd 00000002 6f310000
		00000001 00000003 09090909 09090909 00000002 00000000 00000002 00000004 00000180
		00000000 00000001 66000000`)
	if !bytes.Equal(a.Head, want) {
		t.Errorf("OPEN head\n got %x\nwant %x", a.Head, want)
	}
	reply := words(t, `00000000 00000000 00000001 00000012 00000000
		00000001 11111111 11111111 11111111
		00000001 00000000 00000001 00000000 00000002
		00000004 00000002 00000000 00000002
		00000003 00000007 00000000`)
	if err := decodeCompound(sunrpc.NewDecoder(reply), cb.ops, cb.results); err != nil {
		t.Fatal(err)
	}
	if or.StateID.Seq != 1 || or.StateID.Other[0] != 0x11 || !or.ChangeInfo.Atomic || or.ChangeInfo.After != 2 ||
		or.Flags != OpenResultLockTypePosix || !or.AttrSet.Has(33) || or.Delegated {
		t.Errorf("%+v", or)
	}
}

func TestReaddirAndLockGolden(t *testing.T) {
	cb := newCompound()
	var rr ReaddirResult
	cb.readdir(0, Verifier{}, 100, 1000, NewBitmap(AttrType), &rr)
	reply := words(t, `00000000 00000000 00000001 0000001a 00000000 01010101 01010101
		00000001 00000000 00000003 00000001 61000000 00000001 00000002 00000004 00000002
		00000001 00000000 00000004 00000001 62000000 00000001 00000002 00000004 00000001
		00000000 00000001`)
	if err := decodeCompound(sunrpc.NewDecoder(reply), cb.ops, cb.results); err != nil {
		t.Fatal(err)
	}
	if len(rr.Entries) != 2 || rr.Entries[0].Name != "a" || rr.Entries[0].Cookie != 3 || rr.Entries[0].Attr.Type != TypeDir ||
		rr.Entries[1].Name != "b" || rr.Entries[1].Attr.Type != TypeReg || !rr.EOF || rr.Verf[0] != 1 {
		t.Errorf("%+v", rr)
	}

	cb = newCompound()
	var sid StateID
	var denied LockDenied
	cb.lock(WriteLT, false, 0, 100, 0xabcd, &Locker{New: true, Owner: []byte("l")}, &sid, &denied)
	reply = words(t, `0000271a 00000000 00000001 0000000c 0000271a
		00000000 00000000 00000000 00000064 00000002 00000000 0000abcd 00000002 6c320000`)
	err := decodeCompound(sunrpc.NewDecoder(reply), cb.ops, cb.results)
	var oe *OpError
	if !errors.As(err, &oe) || oe.Status != ErrDenied {
		t.Fatal(err)
	}
	if denied.Length != 100 || denied.Type != WriteLT || denied.ClientID != 0xabcd || string(denied.Owner) != "l2" {
		t.Errorf("%+v", denied)
	}
}

func TestStatusErrors(t *testing.T) {
	for _, tc := range []struct {
		s      Status
		target error
	}{
		{ErrNoEnt, fs.ErrNotExist}, {ErrExist, fs.ErrExist}, {ErrAccess, fs.ErrPermission},
		{ErrNotEmpty, fs.ErrExist}, {ErrDelay, syscall.EAGAIN}, {ErrDenied, syscall.EAGAIN}, {ErrStale, syscall.ESTALE},
	} {
		if !errors.Is(tc.s, tc.target) {
			t.Errorf("%v is not %v", tc.s, tc.target)
		}
	}
	if got := ErrAccess.Error(); got != "NFS4ERR_ACCESS (permission denied)" {
		t.Errorf("%q", got)
	}
	if got := Status(99999).Error(); got != "nfsstat4(99999)" {
		t.Errorf("%q", got)
	}
}
