package sunrpc

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func TestXDREncode(t *testing.T) {
	tests := []struct {
		name string
		got  []byte
		want []byte
	}{
		{"uint32", AppendUint32(nil, 0x01020304), []byte{1, 2, 3, 4}},
		{"int32", AppendInt32(nil, -2), []byte{0xff, 0xff, 0xff, 0xfe}},
		{"uint64", AppendUint64(nil, 0x0102030405060708), []byte{1, 2, 3, 4, 5, 6, 7, 8}},
		{"bool", AppendBool(AppendBool(nil, true), false), []byte{0, 0, 0, 1, 0, 0, 0, 0}},
		{"opaque0", AppendOpaque(nil, nil), []byte{0, 0, 0, 0}},
		{"opaque1", AppendOpaque(nil, []byte{9}), []byte{0, 0, 0, 1, 9, 0, 0, 0}},
		{"opaque4", AppendOpaque(nil, []byte{1, 2, 3, 4}), []byte{0, 0, 0, 4, 1, 2, 3, 4}},
		{"string3", AppendString(nil, "abc"), []byte{0, 0, 0, 3, 'a', 'b', 'c', 0}},
		{"fixed2", AppendFixedOpaque(nil, []byte{1, 2}), []byte{1, 2, 0, 0}},
	}
	for _, tc := range tests {
		if !bytes.Equal(tc.got, tc.want) {
			t.Errorf("%s: got % x, want % x", tc.name, tc.got, tc.want)
		}
	}
}

func TestXDRDecodeErrors(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		read func(d *Decoder)
		want any // error value or pointer-to-type for errors.As
	}{
		{"short uint32", []byte{1, 2, 3}, func(d *Decoder) { d.Uint32() }, ErrTruncated},
		{"short uint64", []byte{1, 2, 3, 4}, func(d *Decoder) { d.Uint64() }, ErrTruncated},
		{"bad bool", []byte{0, 0, 0, 2}, func(d *Decoder) { d.Bool() }, new(*BoolError)},
		{"opaque over max", []byte{0, 0, 0, 5, 1, 2, 3, 4, 5, 0, 0, 0}, func(d *Decoder) { d.Opaque(4) }, new(*LengthError)},
		{"opaque past end", []byte{0, 0, 0, 8, 1, 2, 3, 4}, func(d *Decoder) { d.Opaque(-1) }, ErrTruncated},
		{"missing pad", []byte{0, 0, 0, 1, 7}, func(d *Decoder) { d.Opaque(-1) }, ErrTruncated},
		{"huge length", []byte{0xff, 0xff, 0xff, 0xff}, func(d *Decoder) { d.String(-1) }, ErrTruncated},
		{"array count vs bytes", []byte{0, 0, 0, 3, 0, 0, 0, 1}, func(d *Decoder) { d.ArrayLen(100, 4) }, ErrTruncated},
		{"sticky", []byte{1}, func(d *Decoder) { d.Uint32(); d.Uint32() }, ErrTruncated},
	}
	for _, tc := range tests {
		d := NewDecoder(tc.in)
		tc.read(d)
		err := d.Err()
		switch w := tc.want.(type) {
		case error:
			if !errors.Is(err, w) {
				t.Errorf("%s: err = %v, want %v", tc.name, err, w)
			}
		default:
			if err == nil || !errors.As(err, w) {
				t.Errorf("%s: err = %v, want %T", tc.name, err, w)
			}
		}
	}
}

func TestDecoderBulk(t *testing.T) {
	// Inline: the length word and the data.
	msg := AppendOpaque(AppendUint32(nil, 7), []byte("hello"))
	msg = AppendUint32(msg, 9)
	d := NewDecoder(msg)
	if d.Uint32() != 7 || string(d.Bulk(100)) != "hello" || d.Uint32() != 9 || d.Err() != nil {
		t.Fatalf("inline bulk: %v", d.Err())
	}

	// Apart: the data and its pad are missing from the inline part.
	inline := AppendUint32(AppendUint32(AppendUint32(nil, 7), 5), 9)
	bulk := []byte("hello-and-room")
	d = NewBulkDecoder(inline, bulk)
	if d.Uint32() != 7 || string(d.Bulk(100)) != "hello" || d.Uint32() != 9 || d.Err() != nil {
		t.Fatalf("apart bulk: %v", d.Err())
	}

	// The length word larger than what was received apart.
	d = NewBulkDecoder(AppendUint32(nil, 50), make([]byte, 10))
	d.Bulk(100)
	var be *BulkError
	if !errors.As(d.Err(), &be) || be.Len != 50 || be.Have != 10 {
		t.Fatalf("err = %v", d.Err())
	}

	// A second bulk item in one reply.
	d = NewBulkDecoder(AppendUint32(AppendUint32(nil, 1), 1), make([]byte, 10))
	d.Bulk(10)
	d.Bulk(10)
	if !errors.As(d.Err(), &be) || be.Have != -1 {
		t.Fatalf("err = %v", d.Err())
	}
}

func TestReplyHeaderErrors(t *testing.T) {
	tests := []struct {
		h    ReplyHeader
		want error
	}{
		{ReplyHeader{Stat: MsgAccepted, Accept: Success}, nil},
		{ReplyHeader{Stat: MsgAccepted, Accept: ProgUnavail}, ErrProgUnavail},
		{ReplyHeader{Stat: MsgAccepted, Accept: ProgMismatch, Low: 2, High: 3}, &AcceptError{Stat: ProgMismatch, Low: 2, High: 3}},
		{ReplyHeader{Stat: MsgAccepted, Accept: ProcUnavail}, ErrProcUnavail},
		{ReplyHeader{Stat: MsgAccepted, Accept: GarbageArgs}, ErrGarbageArgs},
		{ReplyHeader{Stat: MsgAccepted, Accept: SystemErr}, ErrSystemErr},
		{ReplyHeader{Stat: MsgDenied, Reject: RPCMismatch, Low: 2, High: 2}, &RPCMismatchError{Low: 2, High: 2}},
		{ReplyHeader{Stat: MsgDenied, Reject: AuthErr, Auth: AuthTooWeak}, &AuthError{Stat: AuthTooWeak}},
	}
	for _, tc := range tests {
		tc.h.XID = 42
		b := AppendReply(nil, &tc.h)
		got, err := DecodeReply(NewDecoder(b))
		if err != nil {
			t.Fatalf("%+v: %v", tc.h, err)
		}
		if !headersEqual(got, tc.h) {
			t.Errorf("round trip: got %+v, want %+v", got, tc.h)
		}
		err = got.Err()
		if tc.want == nil {
			if err != nil {
				t.Errorf("%+v: err %v", tc.h, err)
			}
			continue
		}
		if !reflect.DeepEqual(err, tc.want) && !errors.Is(err, tc.want) {
			t.Errorf("%+v: err %#v, want %#v", tc.h, err, tc.want)
		}
	}
	// Errors are distinguishable with errors.Is / errors.As.
	if errors.Is(&AcceptError{Stat: GarbageArgs}, ErrProcUnavail) {
		t.Error("GARBAGE_ARGS matched PROC_UNAVAIL")
	}
}

func TestDecodeReplyMalformed(t *testing.T) {
	call := AppendCall(nil, &CallHeader{XID: 1, Prog: 3, Vers: 4, Proc: 5})
	bad := [][]byte{
		nil,
		{0, 0, 0, 1},
		call,
		AppendUint32(AppendUint32(AppendUint32(nil, 1), 1), 7),                  // reply_stat 7
		AppendUint32(AppendReply(nil, &ReplyHeader{Stat: MsgDenied}), 0)[:16],   // RPC_MISMATCH cut short
		append(AppendReply(nil, &ReplyHeader{}), 0)[:20],                        // truncated verifier
		AppendUint32(AppendUint32(AppendUint32(AppendUint32(nil, 1), 1), 1), 9), // reject_stat 9
	}
	for i, b := range bad {
		if _, err := DecodeReply(NewDecoder(b)); err == nil {
			t.Errorf("case %d: no error for % x", i, b)
		}
	}
}

func TestCallRoundTrip(t *testing.T) {
	cred, err := (&AuthSys{Stamp: 1, MachineName: "host", UID: 1000, GID: 100, GIDs: []uint32{4, 5}}).Credential()
	if err != nil {
		t.Fatal(err)
	}
	h := CallHeader{XID: 9, Prog: 100003, Vers: 3, Proc: 1, Cred: cred, Verf: AuthNone}
	b := AppendCall(nil, &h)
	got, err := DecodeCall(NewDecoder(b))
	if err != nil {
		t.Fatal(err)
	}
	if got.XID != 9 || got.Prog != 100003 || got.Vers != 3 || got.Proc != 1 || !bytes.Equal(got.Cred.Body, cred.Body) {
		t.Fatalf("got %+v", got)
	}
	as, err := ParseAuthSys(got.Cred)
	if err != nil || as.MachineName != "host" || as.UID != 1000 || !reflect.DeepEqual(as.GIDs, []uint32{4, 5}) {
		t.Fatalf("authsys %+v %v", as, err)
	}
}

func TestAuthSysLimits(t *testing.T) {
	long := string(bytes.Repeat([]byte{'x'}, 256))
	if _, err := (&AuthSys{MachineName: long}).Credential(); err == nil {
		t.Error("256-byte machine name accepted")
	}
	if _, err := (&AuthSys{MachineName: long[:255], GIDs: make([]uint32, 16)}).Credential(); err != nil {
		t.Errorf("limits rejected: %v", err)
	}
	if _, err := (&AuthSys{GIDs: make([]uint32, 17)}).Credential(); err == nil {
		t.Error("17 gids accepted")
	}
	// On the wire: 17 gids rejected.
	b := AppendAuthSys(nil, &AuthSys{GIDs: make([]uint32, 17)})
	if _, err := ParseAuthSys(OpaqueAuth{Flavor: AuthFlavorSys, Body: b}); err == nil {
		t.Error("decoded 17 gids")
	}
}

// Fuzz targets: each decoder must not panic, and whatever it accepts must
// survive encode → decode unchanged.

func FuzzDecoder(f *testing.F) {
	f.Add(AppendOpaque(AppendUint64(AppendUint32(nil, 1), 2), []byte("abc")))
	f.Add([]byte{0, 0, 0, 5, 1, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		d := NewDecoder(b)
		u := d.Uint32()
		h := d.Uint64()
		o := d.Opaque(1024)
		s := d.String(64)
		if d.Err() != nil {
			return
		}
		enc := AppendString(AppendOpaque(AppendUint64(AppendUint32(nil, u), h), o), s)
		if len(enc) != d.Offset() {
			t.Fatalf("re-encoded %d bytes, decoded %d", len(enc), d.Offset())
		}
		d2 := NewDecoder(enc)
		if d2.Uint32() != u || d2.Uint64() != h || !bytes.Equal(d2.Opaque(1024), o) || d2.String(64) != s || d2.Err() != nil {
			t.Fatal("round trip mismatch")
		}
	})
}

// TestProgMismatchWithoutVersions: a PROG_MISMATCH whose reply ends
// before the versions (go-nfs's answer for a program it does not serve) is
// the ProgMismatch it says, as the Linux client takes it, not a malformed
// reply.
func TestProgMismatchWithoutVersions(t *testing.T) {
	b := AppendReply(nil, &ReplyHeader{XID: 7, Stat: MsgAccepted, Accept: ProgMismatch})
	b = b[:len(b)-8]
	h, err := DecodeReply(NewDecoder(b))
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(h.Err(), ErrProgMismatch) {
		t.Fatalf("got %v, want PROG_MISMATCH", h.Err())
	}
}

func FuzzDecodeReply(f *testing.F) {
	f.Add(AppendReply(nil, &ReplyHeader{XID: 1, Stat: MsgAccepted, Verf: OpaqueAuth{Flavor: 1, Body: []byte{1}}}))
	f.Add(AppendReply(nil, &ReplyHeader{XID: 1, Stat: MsgDenied, Reject: AuthErr, Auth: AuthBadCred}))
	f.Add(AppendReply(nil, &ReplyHeader{XID: 1, Stat: MsgAccepted, Accept: ProgMismatch, Low: 2, High: 3}))
	f.Fuzz(func(t *testing.T, b []byte) {
		d := NewDecoder(b)
		h, err := DecodeReply(d)
		if err != nil {
			return
		}
		_ = h.Err()
		enc := AppendReply(nil, &h)
		if h.Stat == MsgAccepted && h.Accept == ProgMismatch && len(enc) == d.Offset()+8 {
			enc = enc[:d.Offset()] // no versions sent: none re-encoded
		}
		if len(enc) != d.Offset() {
			t.Fatalf("re-encoded %d bytes, decoded %d", len(enc), d.Offset())
		}
		h2, err := DecodeReply(NewDecoder(enc))
		if err != nil || !headersEqual(h, h2) {
			t.Fatalf("round trip: %+v -> %+v (%v)", h, h2, err)
		}
	})
}

func headersEqual(a, b ReplyHeader) bool {
	return a.XID == b.XID && a.Stat == b.Stat && a.Verf.Flavor == b.Verf.Flavor && bytes.Equal(a.Verf.Body, b.Verf.Body) &&
		a.Accept == b.Accept && a.Reject == b.Reject && a.Auth == b.Auth && a.Low == b.Low && a.High == b.High
}

func FuzzDecodeCall(f *testing.F) {
	f.Add(AppendCall(nil, &CallHeader{XID: 1, Prog: 100003, Vers: 3, Proc: 6}))
	f.Fuzz(func(t *testing.T, b []byte) {
		d := NewDecoder(b)
		h, err := DecodeCall(d)
		if err != nil {
			return
		}
		enc := AppendCall(nil, &h)
		if len(enc) != d.Offset() {
			t.Fatalf("re-encoded %d bytes, decoded %d", len(enc), d.Offset())
		}
		h2, err := DecodeCall(NewDecoder(enc))
		if err != nil || h2.XID != h.XID || h2.Proc != h.Proc || !bytes.Equal(h2.Cred.Body, h.Cred.Body) || !bytes.Equal(h2.Verf.Body, h.Verf.Body) {
			t.Fatalf("round trip: %+v -> %+v (%v)", h, h2, err)
		}
	})
}

func FuzzDecodeAuthSys(f *testing.F) {
	f.Add(AppendAuthSys(nil, &AuthSys{Stamp: 1, MachineName: "m", UID: 2, GID: 3, GIDs: []uint32{1, 2, 3}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := ParseAuthSys(OpaqueAuth{Flavor: AuthFlavorSys, Body: b})
		if err != nil {
			return
		}
		cred, err := a.Credential()
		if err != nil {
			t.Fatalf("decoded credential does not validate: %v", err)
		}
		if len(cred.Body) != len(b) {
			t.Fatalf("re-encoded %d bytes, decoded %d", len(cred.Body), len(b))
		}
		a2, err := ParseAuthSys(cred)
		if err != nil || !reflect.DeepEqual(a, a2) {
			t.Fatalf("round trip: %+v -> %+v (%v)", a, a2, err)
		}
	})
}

func FuzzDecodeMapping(f *testing.F) {
	f.Add(AppendMapping(nil, &Mapping{Prog: 100005, Vers: 3, Prot: IPProtoTCP, Port: 20048}))
	f.Fuzz(func(t *testing.T, b []byte) {
		d := NewDecoder(b)
		m := DecodeMapping(d)
		if d.Err() != nil {
			return
		}
		enc := AppendMapping(nil, &m)
		if !bytes.Equal(enc, b[:16]) {
			t.Fatalf("round trip: % x -> % x", b[:16], enc)
		}
	})
}

func FuzzReadRecord(f *testing.F) {
	f.Add([]byte{0x80, 0, 0, 4, 1, 2, 3, 4})
	f.Add([]byte{0, 0, 0, 2, 1, 2, 0x80, 0, 0, 1, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := ReadRecord(bytes.NewReader(b), 1<<16)
		if err != nil {
			return
		}
		// Re-framing the record as fragments of any size reads back the same.
		for _, frag := range []int{1, 3, 1 << 20} {
			var buf bytes.Buffer
			bufs := frameRecord([][]byte{rec}, frag)
			if _, err := bufs.WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			got, err := ReadRecord(&buf, 1<<16)
			if err != nil || !bytes.Equal(got, rec) {
				t.Fatalf("frag %d: %v", frag, err)
			}
		}
		var buf bytes.Buffer
		if err := WriteRecord(&buf, rec); err != nil {
			t.Fatal(err)
		}
		if got, err := ReadRecord(&buf, 1<<16); err != nil || !bytes.Equal(got, rec) || buf.Len() != 0 {
			t.Fatalf("WriteRecord: %v", err)
		}
	})
}
