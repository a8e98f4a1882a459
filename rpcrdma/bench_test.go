package rpcrdma

import "testing"

// A READ call: RDMA_MSG with one single-segment Write chunk for the data.
var benchRead = Header{XID: 0x1234, Credits: 64, Proc: ProcMsg,
	Writes: []WriteChunk{{seg(0x4242, 1<<20, 0x7f0012340000)}}}

// A WRITE call whose data travels in a four-segment Read chunk, plus a Reply
// chunk.
var benchWrite = Header{XID: 0x1235, Credits: 64, Proc: ProcMsg,
	Reads: []ReadSegment{rseg(132, 1, 4096, 0x1000), rseg(132, 2, 4096, 0x2000),
		rseg(132, 3, 4096, 0x3000), rseg(132, 4, 4096, 0x4000)},
	Reply: WriteChunk{seg(5, 8192, 0x5000)}, HasReply: true}

func benchAppend(b *testing.B, h *Header) {
	buf := make([]byte, 0, MaxHeaderLen)
	b.ReportAllocs()
	b.SetBytes(int64(h.Len()))
	for b.Loop() {
		var err error
		if buf, err = h.Append(buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
}

func benchDecode(b *testing.B, h *Header) {
	enc, err := h.Append(nil)
	if err != nil {
		b.Fatal(err)
	}
	var d Header
	if _, err := d.Decode(enc); err != nil { // warm up d's slices
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(enc)))
	for b.Loop() {
		if _, err := d.Decode(enc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkHeaderAppendRead(b *testing.B)  { benchAppend(b, &benchRead) }
func BenchmarkHeaderAppendWrite(b *testing.B) { benchAppend(b, &benchWrite) }
func BenchmarkHeaderDecodeRead(b *testing.B)  { benchDecode(b, &benchRead) }
func BenchmarkHeaderDecodeWrite(b *testing.B) { benchDecode(b, &benchWrite) }
func BenchmarkHeaderDecodeLimits(b *testing.B) {
	benchDecode(b, &headerCases[8].h)
}

func BenchmarkReadChunks(b *testing.B) {
	var dst []ReadChunk
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if dst, err = benchWrite.ReadChunks(dst[:0]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPrivateDataAppend(b *testing.B) {
	p := PrivateData{RemoteInvalidation: true, SendSize: 4096, RecvSize: 4096}
	buf := make([]byte, 0, PrivateDataLen)
	b.ReportAllocs()
	for b.Loop() {
		buf = p.Append(buf[:0])
	}
}

func BenchmarkPrivateDataDecode(b *testing.B) {
	enc := mustHex("f6ab0e18 01 01 03 03")
	var p PrivateData
	b.ReportAllocs()
	for b.Loop() {
		if !p.Decode(enc) {
			b.Fatal("absent")
		}
	}
}
