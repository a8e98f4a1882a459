package rpcrdma

import (
	"bytes"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"testing"
)

// headersEqual compares two headers by content: a nil slice and an empty
// one are the same.
func headersEqual(a, b *Header) bool {
	if a.XID != b.XID || a.Credits != b.Credits || a.Proc != b.Proc ||
		a.HasReply != b.HasReply || a.ErrCode != b.ErrCode ||
		a.VersLow != b.VersLow || a.VersHigh != b.VersHigh {
		return false
	}
	if !slices.Equal(a.Reads, b.Reads) || !slices.Equal(a.Reply, b.Reply) {
		return false
	}
	return slices.EqualFunc(a.Writes, b.Writes, func(x, y WriteChunk) bool { return slices.Equal(x, y) })
}

func seg(h, l uint32, o uint64) Segment { return Segment{Handle: h, Length: l, Offset: o} }

func rseg(pos, h, l uint32, o uint64) ReadSegment {
	return ReadSegment{Position: pos, Segment: seg(h, l, o)}
}

func manySegments(n int) WriteChunk {
	c := make(WriteChunk, n)
	for i := range c {
		c[i] = seg(uint32(0x100+i), uint32(4096), uint64(i)<<12)
	}
	return c
}

func manyReads(n int) []ReadSegment {
	r := make([]ReadSegment, n)
	for i := range r {
		r[i] = rseg(uint32(i/4)*8, uint32(0x200+i), 512, uint64(i)<<20)
	}
	return r
}

// headerCases are valid headers used by several tests and as fuzz seeds.
var headerCases = []struct {
	name string
	h    Header
}{
	{"null call", Header{XID: 0x01020304, Credits: 32, Proc: ProcMsg}},
	{"zero", Header{}},
	{"nomsg long call", Header{XID: 7, Credits: 1, Proc: ProcNoMsg,
		Reads: []ReadSegment{rseg(0, 0xabcd, 9000, 0x7f0000001000)}}},
	{"write data in read chunk", Header{XID: 8, Credits: 64, Proc: ProcMsg,
		Reads: []ReadSegment{rseg(128, 1, 4096, 0x1000), rseg(128, 2, 4096, 0x2000), rseg(128, 3, 100, 0x3000)}}},
	{"read reply in write chunk", Header{XID: 9, Credits: 64, Proc: ProcMsg,
		Writes: []WriteChunk{{seg(0x11, 65536, 0xdead0000)}}}},
	{"two write chunks and reply chunk", Header{XID: 10, Credits: 3, Proc: ProcMsg,
		Writes: []WriteChunk{{seg(1, 1, 1), seg(2, 2, 2)}, {seg(3, 3, 3)}},
		Reply:  WriteChunk{seg(4, 8192, 0xffffffffffffffff)}, HasReply: true}},
	{"long reply", Header{XID: 11, Credits: 2, Proc: ProcNoMsg,
		Reply: WriteChunk{seg(5, 4096, 0), seg(6, 4096, 4096)}, HasReply: true}},
	{"empty chunks", Header{XID: 12, Proc: ProcMsg,
		Writes: []WriteChunk{{}}, HasReply: true}},
	{"all limits", Header{XID: 13, Credits: 0xffffffff, Proc: ProcMsg,
		Reads:  manyReads(MaxReadSegments),
		Writes: slices.Repeat([]WriteChunk{manySegments(MaxChunkSegments)}, MaxWriteChunks),
		Reply:  manySegments(MaxChunkSegments), HasReply: true}},
	{"err vers", Header{XID: 14, Credits: 1, Proc: ProcError, ErrCode: ErrCodeVers, VersLow: 1, VersHigh: 2}},
	{"err chunk", Header{XID: 15, Credits: 1, Proc: ProcError, ErrCode: ErrCodeChunk}},
}

func mustAppend(t testing.TB, h *Header) []byte {
	t.Helper()
	b, err := h.Append(nil)
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	return b
}

func TestNullCallWireBytes(t *testing.T) {
	h := Header{XID: 0x01020304, Credits: 32, Proc: ProcMsg}
	got := mustAppend(t, &h)
	want, _ := hex.DecodeString("01020304" + "00000001" + "00000020" + "00000000" + "00000000" + "00000000" + "00000000")
	if !bytes.Equal(got, want) {
		t.Fatalf("encoding\n got %x\nwant %x", got, want)
	}
	if len(got) != MinHeaderLen {
		t.Fatalf("len %d, want MinHeaderLen %d", len(got), MinHeaderLen)
	}

	// Followed by the RPC call itself, which Decode must leave alone.
	msg := append(slices.Clone(want), 0x01, 0x02, 0x03, 0x04, 0, 0, 0, 0)
	var d Header
	n, err := d.Decode(msg)
	if err != nil || n != MinHeaderLen {
		t.Fatalf("Decode = %d, %v; want %d, nil", n, err, MinHeaderLen)
	}
	if !headersEqual(&d, &h) {
		t.Fatalf("decoded %+v, want %+v", d, h)
	}
	if !bytes.Equal(msg[n:], []byte{1, 2, 3, 4, 0, 0, 0, 0}) {
		t.Fatalf("RPC message %x", msg[n:])
	}
}

func TestChunkListWireBytes(t *testing.T) {
	h := Header{XID: 0xaabbccdd, Credits: 5, Proc: ProcNoMsg,
		Reads:    []ReadSegment{rseg(0, 0x10, 0x20, 0x30)},
		Writes:   []WriteChunk{{seg(0x40, 0x50, 0x0102030405060708)}},
		Reply:    WriteChunk{seg(0x60, 0x70, 0x80)},
		HasReply: true,
	}
	want := strings.Join([]string{
		"aabbccdd", "00000001", "00000005", "00000001", // fixed fields, RDMA_NOMSG
		"00000001", "00000000", "00000010", "00000020", "0000000000000030", "00000000", // read list
		"00000001", "00000001", "00000040", "00000050", "0102030405060708", "00000000", // write list
		"00000001", "00000001", "00000060", "00000070", "0000000000000080", // reply chunk
	}, "")
	got := mustAppend(t, &h)
	if hex.EncodeToString(got) != want {
		t.Fatalf("encoding\n got %x\nwant %s", got, want)
	}
	if h.Len() != len(got) {
		t.Fatalf("Len %d, encoding %d", h.Len(), len(got))
	}
}

func TestErrorWireBytes(t *testing.T) {
	for _, tc := range []struct {
		h    Header
		want string
	}{
		{Header{XID: 1, Credits: 2, Proc: ProcError, ErrCode: ErrCodeVers, VersLow: 1, VersHigh: 1},
			"00000001" + "00000001" + "00000002" + "00000004" + "00000001" + "00000001" + "00000001"},
		{Header{XID: 1, Credits: 2, Proc: ProcError, ErrCode: ErrCodeChunk},
			"00000001" + "00000001" + "00000002" + "00000004" + "00000002"},
	} {
		got := mustAppend(t, &tc.h)
		if hex.EncodeToString(got) != tc.want {
			t.Errorf("%v: got %x want %s", tc.h.ErrCode, got, tc.want)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	var d Header // reused across cases on purpose
	for _, tc := range headerCases {
		t.Run(tc.name, func(t *testing.T) {
			b := mustAppend(t, &tc.h)
			if tc.h.Len() != len(b) {
				t.Errorf("Len %d, encoding %d", tc.h.Len(), len(b))
			}
			if len(b) > MaxHeaderLen {
				t.Errorf("encoding %d bytes > MaxHeaderLen %d", len(b), MaxHeaderLen)
			}
			trailer := []byte("rpc message")
			n, err := d.Decode(append(b, trailer...))
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if n != len(b) {
				t.Fatalf("n = %d, want %d", n, len(b))
			}
			if !headersEqual(&d, &tc.h) {
				t.Fatalf("decoded %+v\nwant %+v", d, tc.h)
			}
			// Appending to a non-empty buffer keeps its prefix.
			b2, err := tc.h.Append([]byte("prefix"))
			if err != nil || string(b2[:6]) != "prefix" || !bytes.Equal(b2[6:], b) {
				t.Fatalf("Append to prefix: %q, %v", b2, err)
			}
		})
	}
	if n := MaxHeaderLen; n != len(mustAppend(t, &headerCases[8].h)) {
		t.Errorf("MaxHeaderLen %d is not the size of the all-limits header", n)
	}
}

func TestTruncated(t *testing.T) {
	var d Header
	for _, tc := range headerCases {
		b := mustAppend(t, &tc.h)
		for i := range len(b) {
			n, err := d.Decode(b[:i])
			if !errors.Is(err, ErrTruncated) || n != 0 {
				t.Fatalf("%s: Decode(b[:%d]) = %d, %v; want ErrTruncated", tc.name, i, n, err)
			}
			if len(d.Reads)+len(d.Writes)+len(d.Reply) != 0 || d.HasReply {
				t.Fatalf("%s: chunks left after error: %+v", tc.name, d)
			}
		}
	}
}

// wire builds a header from 32-bit words.
func wire(words ...uint32) []byte {
	var b []byte
	for _, w := range words {
		b = append(b, byte(w>>24), byte(w>>16), byte(w>>8), byte(w))
	}
	return b
}

func TestMalformed(t *testing.T) {
	const xid = 0x55
	tests := []struct {
		name  string
		b     []byte
		check func(error) bool
	}{
		{"version 0", wire(xid, 0, 1, 0, 0, 0, 0), func(err error) bool {
			var e *VersionError
			return errors.As(err, &e) && e.Vers == 0 && e.XID == xid
		}},
		{"version 2", wire(xid, 2, 1, 0, 0, 0, 0), func(err error) bool {
			var e *VersionError
			return errors.As(err, &e) && e.Vers == 2
		}},
		{"RDMA_MSGP", wire(xid, 1, 1, 2, 0, 0, 0, 0, 0), func(err error) bool {
			var e *UnsupportedProcError
			return errors.As(err, &e) && e.Proc == ProcMsgp && e.XID == xid
		}},
		{"RDMA_DONE", wire(xid, 1, 1, 3), func(err error) bool {
			var e *UnsupportedProcError
			return errors.As(err, &e) && e.Proc == ProcDone
		}},
		{"proc 5", wire(xid, 1, 1, 5, 0, 0, 0), func(err error) bool {
			var e *UnsupportedProcError
			return errors.As(err, &e) && e.Proc == 5
		}},
		{"read list discriminator 2", wire(xid, 1, 1, 0, 2, 0, 0), xdrAt(16)},
		{"second read discriminator", wire(xid, 1, 1, 0, 1, 0, 1, 2, 0, 3, 9, 0, 0), xdrAt(40)},
		{"write list discriminator", wire(xid, 1, 1, 0, 0, 0xffffffff, 0), xdrAt(20)},
		{"write list terminator", wire(xid, 1, 1, 0, 0, 1, 0, 3, 0), xdrAt(28)},
		{"reply discriminator", wire(xid, 1, 1, 1, 0, 0, 7), xdrAt(24)},
		{"error code 0", wire(xid, 1, 1, 4, 0), xdrAt(16)},
		{"error code 3", wire(xid, 1, 1, 4, 3, 1, 1), xdrAt(16)},
		{"too many read segments", readList(MaxReadSegments + 1), limit("read segments")},
		{"too many write chunks", writeList(MaxWriteChunks+1, 0), limit("write chunks")},
		{"too many write chunk segments", writeList(1, MaxChunkSegments+1), limit("chunk segments")},
		{"huge segment count", wire(xid, 1, 1, 0, 0, 1, 0xffffffff), limit("chunk segments")},
		{"too many reply segments", wire(xid, 1, 1, 0, 0, 0, 1, MaxChunkSegments+1), limit("chunk segments")},
		{"count beyond input", wire(xid, 1, 1, 0, 0, 0, 1, 2, 1, 2, 0, 3), errIs(ErrTruncated)},
	}
	var d Header
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := d.Decode(tc.b)
			if err == nil || n != 0 || !tc.check(err) {
				t.Fatalf("Decode = %d, %v (%T)", n, err, err)
			}
			if err.Error() == "" {
				t.Fatal("empty error text")
			}
			if d.XID != xid && !strings.HasPrefix(tc.name, "too many") {
				t.Errorf("XID %#x not kept for a malformed header", d.XID)
			}
		})
	}
}

func xdrAt(off int) func(error) bool {
	return func(err error) bool {
		var e *XDRError
		return errors.As(err, &e) && e.Offset == off
	}
}

func limit(what string) func(error) bool {
	return func(err error) bool {
		var e *LimitError
		return errors.As(err, &e) && e.What == what && e.Count > uint64(e.Limit)
	}
}

func errIs(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

// readList encodes an RDMA_MSG header with n read segments, bypassing
// Append's limit checks.
func readList(n int) []byte {
	b := wire(0x55, 1, 1, 0)
	for i := range n {
		b = append(b, wire(1, 0, uint32(i), 4, 0, 0)...)
	}
	return append(b, wire(0, 0, 0)...)
}

// writeList encodes an RDMA_MSG header with chunks Write chunks of segs
// segments each, bypassing Append's limit checks.
func writeList(chunks, segs int) []byte {
	b := wire(0x55, 1, 1, 0, 0)
	for range chunks {
		b = append(b, wire(1, uint32(segs))...)
		for i := range segs {
			b = append(b, wire(uint32(i), 4, 0, 0)...)
		}
	}
	return append(b, wire(0, 0)...)
}

func TestLimitsExact(t *testing.T) {
	var d Header
	for _, b := range [][]byte{readList(MaxReadSegments), writeList(MaxWriteChunks, MaxChunkSegments)} {
		if _, err := d.Decode(b); err != nil {
			t.Fatalf("header at the limits rejected: %v", err)
		}
	}
}

func TestAppendErrors(t *testing.T) {
	tests := []struct {
		name  string
		h     Header
		check func(error) bool
	}{
		{"msgp", Header{Proc: ProcMsgp}, func(err error) bool { var e *UnsupportedProcError; return errors.As(err, &e) }},
		{"done", Header{Proc: ProcDone}, func(err error) bool { var e *UnsupportedProcError; return errors.As(err, &e) }},
		{"proc 9", Header{Proc: 9}, func(err error) bool { var e *UnsupportedProcError; return errors.As(err, &e) }},
		{"error code 0", Header{Proc: ProcError}, xdrAt(FixedHeaderLen)},
		{"reads", Header{Reads: manyReads(MaxReadSegments + 1)}, limit("read segments")},
		{"writes", Header{Writes: make([]WriteChunk, MaxWriteChunks+1)}, limit("write chunks")},
		{"write segments", Header{Writes: []WriteChunk{manySegments(MaxChunkSegments + 1)}}, limit("chunk segments")},
		{"reply segments", Header{Reply: manySegments(MaxChunkSegments + 1), HasReply: true}, limit("chunk segments")},
		{"reply without HasReply", Header{Reply: manySegments(1)}, func(err error) bool { return err != nil }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte("keep")
			out, err := tc.h.Append(in)
			if !tc.check(err) {
				t.Fatalf("Append error %v (%T)", err, err)
			}
			if string(out) != "keep" {
				t.Fatalf("Append changed the buffer on error: %q", out)
			}
		})
	}
}

func TestDecodeReuse(t *testing.T) {
	big := mustAppend(t, &headerCases[8].h)   // all limits
	small := mustAppend(t, &headerCases[5].h) // two write chunks and a reply chunk
	none := mustAppend(t, &headerCases[0].h)  // no chunks
	var d Header
	for _, i := range []int{8, 5, 0, 8, 0, 5} {
		b := map[int][]byte{8: big, 5: small, 0: none}[i]
		if _, err := d.Decode(b); err != nil {
			t.Fatal(err)
		}
		if !headersEqual(&d, &headerCases[i].h) {
			t.Fatalf("after reuse, decoded %+v\nwant %+v", d, headerCases[i].h)
		}
	}
	// A decode into a warmed-up Header allocates nothing.
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := d.Decode(big); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Decode(small); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Decode into a reused Header: %v allocs/op", allocs)
	}
	// Decoded segments do not alias the input.
	in := slices.Clone(small)
	if _, err := d.Decode(in); err != nil {
		t.Fatal(err)
	}
	clear(in)
	if !headersEqual(&d, &headerCases[5].h) {
		t.Fatal("decoded header changed when its input was overwritten")
	}
}

func TestReadChunks(t *testing.T) {
	tests := []struct {
		name    string
		reads   []ReadSegment
		want    []uint32 // position of each chunk
		lengths []int    // segments per chunk
		err     error
	}{
		{"empty", nil, nil, nil, nil},
		{"position zero", []ReadSegment{rseg(0, 1, 1, 0)}, []uint32{0}, []int{1}, nil},
		{"runs", []ReadSegment{rseg(0, 1, 1, 0), rseg(0, 2, 1, 0), rseg(96, 3, 1, 0), rseg(200, 4, 1, 0), rseg(200, 5, 1, 0)},
			[]uint32{0, 96, 200}, []int{2, 1, 2}, nil},
		{"descending is fine", []ReadSegment{rseg(300, 1, 1, 0), rseg(100, 2, 1, 0)}, []uint32{300, 100}, []int{1, 1}, nil},
		{"split chunk", []ReadSegment{rseg(0, 1, 1, 0), rseg(96, 2, 1, 0), rseg(0, 3, 1, 0)}, nil, nil, ErrReadChunkSplit},
	}
	dst := make([]ReadChunk, 0, 8)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := Header{Reads: tc.reads}
			got, err := h.ReadChunks(dst[:0])
			if !errors.Is(err, tc.err) {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			if err != nil {
				if len(got) != 0 {
					t.Fatalf("chunks returned with error: %+v", got)
				}
				return
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d chunks, want %d", len(got), len(tc.want))
			}
			total := 0
			for i, c := range got {
				if c.Position != tc.want[i] || len(c.Segments) != tc.lengths[i] {
					t.Fatalf("chunk %d: position %d with %d segments, want %d with %d",
						i, c.Position, len(c.Segments), tc.want[i], tc.lengths[i])
				}
				for _, s := range c.Segments {
					if s.Position != c.Position {
						t.Fatalf("chunk %d holds a segment at position %d", i, s.Position)
					}
				}
				if c.TotalLength() != uint64(len(c.Segments)) {
					t.Fatalf("chunk %d TotalLength %d", i, c.TotalLength())
				}
				total += len(c.Segments)
			}
			if total != len(tc.reads) {
				t.Fatalf("chunks hold %d segments, list has %d", total, len(tc.reads))
			}
		})
	}
	// Appending to a chunk's segments must not overwrite the next chunk.
	h := Header{Reads: []ReadSegment{rseg(0, 1, 1, 0), rseg(8, 2, 1, 0)}}
	got, _ := h.ReadChunks(nil)
	_ = append(got[0].Segments, rseg(99, 99, 99, 99))
	if h.Reads[1].Position != 8 {
		t.Fatal("ReadChunk.Segments has capacity beyond its chunk")
	}
}

func TestRemoteError(t *testing.T) {
	h := Header{XID: 3, Proc: ProcError, ErrCode: ErrCodeVers, VersLow: 1, VersHigh: 1}
	var ve *RemoteVersError
	if err := h.RemoteError(); !errors.As(err, &ve) || ve.Low != 1 || ve.High != 1 || ve.XID != 3 {
		t.Fatalf("ERR_VERS: %v", err)
	}
	h = Header{XID: 4, Proc: ProcError, ErrCode: ErrCodeChunk}
	var ce *RemoteChunkError
	if err := h.RemoteError(); !errors.As(err, &ce) || ce.XID != 4 {
		t.Fatalf("ERR_CHUNK: %v", err)
	}
	h = Header{Proc: ProcMsg}
	if err := h.RemoteError(); err != nil {
		t.Fatalf("RDMA_MSG: %v", err)
	}
}

func TestStrings(t *testing.T) {
	for p, want := range map[Proc]string{ProcMsg: "RDMA_MSG", ProcNoMsg: "RDMA_NOMSG", ProcMsgp: "RDMA_MSGP",
		ProcDone: "RDMA_DONE", ProcError: "RDMA_ERROR", 77: "Proc(77)"} {
		if p.String() != want {
			t.Errorf("%d: %q", uint32(p), p.String())
		}
	}
	for c, want := range map[ErrorCode]string{ErrCodeVers: "ERR_VERS", ErrCodeChunk: "ERR_CHUNK", 0: "ErrorCode(0)"} {
		if c.String() != want {
			t.Errorf("%d: %q", uint32(c), c.String())
		}
	}
}

func TestWriteChunkTotalLength(t *testing.T) {
	c := WriteChunk{seg(1, 0xffffffff, 0), seg(2, 0xffffffff, 0), seg(3, 2, 0)}
	if got, want := c.TotalLength(), uint64(0xffffffff)*2+2; got != want {
		t.Fatalf("TotalLength %d, want %d", got, want)
	}
}
