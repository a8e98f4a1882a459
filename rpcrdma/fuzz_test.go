package rpcrdma

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// FuzzHeaderDecode checks that Decode never panics, and that a header it
// accepts re-encodes to exactly the bytes it came from (the encoding is
// canonical) and decodes again to the same values.
func FuzzHeaderDecode(f *testing.F) {
	for _, tc := range headerCases {
		b, err := tc.h.Append(nil)
		if err != nil {
			f.Fatal(err)
		}
		if len(b) <= 1024 { // the all-limits header would slow minimization down
			f.Add(b)
		}
	}
	f.Add(writeList(1, MaxChunkSegments))
	f.Add(wire(1, 1, 1, 0, 2, 0, 0))
	f.Add(wire(1, 1, 1, 4, 3))
	f.Add(wire(1, 2, 1, 0, 0, 0, 0))
	f.Add(wire(1, 1, 1, 2, 0, 0, 0, 0, 0))
	f.Add(readList(MaxReadSegments + 1))
	f.Add(writeList(2, 3))

	var h, h2 Header // reused, as a transport would
	var chunks []ReadChunk
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := h.Decode(b)
		if err != nil {
			if n != 0 {
				t.Fatalf("n = %d with error %v", n, err)
			}
			if len(h.Reads)+len(h.Writes)+len(h.Reply) != 0 || h.HasReply {
				t.Fatalf("chunks left after error %v", err)
			}
			return
		}
		if n > len(b) || n < FixedHeaderLen {
			t.Fatalf("n = %d for %d bytes", n, len(b))
		}
		if h.Len() != n {
			t.Fatalf("Len %d, decoded %d bytes", h.Len(), n)
		}
		if len(h.Reads) > MaxReadSegments || len(h.Writes) > MaxWriteChunks || len(h.Reply) > MaxChunkSegments {
			t.Fatalf("limits exceeded: %d reads, %d writes, %d reply", len(h.Reads), len(h.Writes), len(h.Reply))
		}
		enc, err := h.Append(nil)
		if err != nil {
			t.Fatalf("re-encoding a decoded header: %v", err)
		}
		if !bytes.Equal(enc, b[:n]) {
			t.Fatalf("re-encoding differs\n got %x\nwant %x", enc, b[:n])
		}
		n2, err := h2.Decode(enc)
		if err != nil || n2 != len(enc) {
			t.Fatalf("decoding the re-encoding: %d, %v", n2, err)
		}
		if !headersEqual(&h, &h2) {
			t.Fatalf("round trip changed the header\n%+v\n%+v", h, h2)
		}
		if h.Proc == ProcError && h.RemoteError() == nil {
			t.Fatal("RDMA_ERROR without a RemoteError")
		}
		chunks, err = h.ReadChunks(chunks[:0])
		if err == nil {
			total := 0
			for _, c := range chunks {
				total += len(c.Segments)
			}
			if total != len(h.Reads) {
				t.Fatalf("read chunks hold %d segments of %d", total, len(h.Reads))
			}
		} else if !errors.Is(err, ErrReadChunkSplit) {
			t.Fatalf("ReadChunks: %v", err)
		}
	})
}

// FuzzHeaderAppend builds headers from fuzzed parameters and checks that
// whatever Append accepts, Decode returns unchanged.
func FuzzHeaderAppend(f *testing.F) {
	f.Add(uint32(1), uint32(32), uint8(0), uint8(0), uint8(0), uint8(0), uint8(0), []byte{})
	f.Add(uint32(9), uint32(64), uint8(1), uint8(3), uint8(2), uint8(5), uint8(1), []byte("segments and more segments"))
	f.Add(uint32(2), uint32(1), uint8(4), uint8(0), uint8(0), uint8(0), uint8(1), []byte{1, 2, 3})
	f.Add(uint32(3), uint32(1), uint8(0), uint8(17), uint8(9), uint8(65), uint8(65), []byte{0xff})
	f.Fuzz(func(t *testing.T, xid, credits uint32, proc, reads, writes, perChunk, reply uint8, seed []byte) {
		// Segment fields come from the seed bytes, cycled.
		next := func() uint32 {
			if len(seed) == 0 {
				return 0
			}
			var w [4]byte
			for i := range w {
				w[i] = seed[0]
				seed = append(seed[1:], seed[0])
			}
			return binary.BigEndian.Uint32(w[:])
		}
		s := func() Segment {
			return Segment{Handle: next(), Length: next(), Offset: uint64(next())<<32 | uint64(next())}
		}
		h := Header{XID: xid, Credits: credits, Proc: Proc(proc % 6)}
		if h.Proc == ProcError {
			h.ErrCode = ErrorCode(reads % 3)
			h.VersLow, h.VersHigh = next(), next()
			if h.ErrCode != ErrCodeVers {
				h.VersLow, h.VersHigh = 0, 0
			}
		} else {
			for range int(reads) % (MaxReadSegments + 2) {
				h.Reads = append(h.Reads, ReadSegment{Position: next(), Segment: s()})
			}
			for range int(writes) % (MaxWriteChunks + 2) {
				c := WriteChunk{}
				for range int(perChunk) % (MaxChunkSegments + 2) {
					c = append(c, s())
				}
				h.Writes = append(h.Writes, c)
			}
			if reply%2 == 1 {
				h.HasReply = true
				for range int(reply/2) % (MaxChunkSegments + 2) {
					h.Reply = append(h.Reply, s())
				}
			}
		}
		b, err := h.Append(nil)
		if err != nil {
			return
		}
		if len(b) != h.Len() || len(b) > MaxHeaderLen {
			t.Fatalf("encoded %d bytes, Len %d, MaxHeaderLen %d", len(b), h.Len(), MaxHeaderLen)
		}
		var d Header
		n, err := d.Decode(b)
		if err != nil || n != len(b) {
			t.Fatalf("Decode of Append output: %d, %v", n, err)
		}
		if !headersEqual(&d, &h) {
			t.Fatalf("round trip\n got %+v\nwant %+v", d, h)
		}
	})
}

// FuzzPrivateDataDecode checks that PrivateData.Decode never panics, that
// absent data yields the defaults, and that present data re-encodes to the
// same fields and decodes again to the same value.
func FuzzPrivateDataDecode(f *testing.F) {
	f.Add(mustHex("f6ab0e18 01 00 03 03"))
	f.Add(mustHex("f6ab0e18 01 01 ff 00 00 00 00 00"))
	f.Add(mustHex("f6ab0e18 02 01 03 03"))
	f.Add(mustHex("f6ab0e18 01 01 03"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var p PrivateData
		if !p.Decode(b) {
			if p != DefaultPrivateData() {
				t.Fatalf("absent private data decoded as %+v", p)
			}
			return
		}
		if p.SendSize < DefaultInlineSize || p.SendSize > MaxInlineSize || p.SendSize%1024 != 0 ||
			p.RecvSize < DefaultInlineSize || p.RecvSize > MaxInlineSize || p.RecvSize%1024 != 0 {
			t.Fatalf("sizes out of range: %+v", p)
		}
		enc := p.Append(nil)
		want := bytes.Clone(b[:PrivateDataLen])
		want[5] &= flagRemoteInvalidation // unused flags are ignored on receipt and sent as zero
		if !bytes.Equal(enc, want) {
			t.Fatalf("re-encoding %x, want %x", enc, want)
		}
		var q PrivateData
		if !q.Decode(enc) || q != p {
			t.Fatalf("round trip %+v -> %+v", p, q)
		}
	})
}
