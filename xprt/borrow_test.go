package xprt

import (
	"bytes"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
)

// A READ into a borrowed registered buffer lands there with no copy; one
// into the caller's own buffer is copied out of the transport's.
func TestBorrowedBufferZeroCopy(t *testing.T) {
	s := newStack(t, stackOpts{})
	fh, data := s.file("f", 200<<10)
	ctx := s.ctx(20 * time.Second)
	b, err := s.tr.Borrow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Bytes()) != 256<<10 {
		t.Fatalf("borrowed %d bytes", len(b.Bytes()))
	}
	r, err := s.c.Read(ctx, fh, 0, b.Bytes()[:len(data)])
	if err != nil {
		t.Fatal(err)
	}
	if r.Count != len(data) || !bytes.Equal(b.Bytes()[:len(data)], data) {
		t.Fatal("wrong data in the borrowed buffer")
	}
	if c := s.tr.Counters(); c.ZeroCopyReads != 1 {
		t.Fatalf("zero-copy reads %d", c.ZeroCopyReads)
	}
	own := make([]byte, len(data))
	if _, err := s.c.Read(ctx, fh, 0, own); err != nil || !bytes.Equal(own, data) {
		t.Fatalf("READ into the caller's buffer: %v", err)
	}
	if c := s.tr.Counters(); c.ZeroCopyReads != 1 {
		t.Fatalf("a READ into the caller's own buffer counted as zero-copy")
	}
	b.Release()
	b.Release() // idempotent
}

// A WRITE from a borrowed registered buffer is read by the server from
// there, with no copy; the data lands intact, and the buffer stays the
// caller's.
func TestBorrowedBufferZeroCopyWrite(t *testing.T) {
	s := newStack(t, stackOpts{})
	fh, _ := s.file("w", 0)
	ctx := s.ctx(20 * time.Second)
	b, err := s.tr.Borrow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	data := b.Bytes()[:200<<10]
	for i := range data {
		data[i] = byte(i*7 + i>>9)
	}
	want := bytes.Clone(data)
	if _, err := s.c.Write(ctx, fh, 0, data, nfs3.FileSync); err != nil {
		t.Fatal(err)
	}
	if c := s.tr.Counters(); c.ZeroCopyWrites != 1 || c.ReadChunks != 1 {
		t.Fatalf("zero-copy writes %d, read chunks %d: want 1 and 1", c.ZeroCopyWrites, c.ReadChunks)
	}
	// From the caller's own memory: copied, not counted.
	if _, err := s.c.Write(ctx, fh, uint64(len(want)), bytes.Clone(want[:100<<10]), nfs3.FileSync); err != nil {
		t.Fatal(err)
	}
	if c := s.tr.Counters(); c.ZeroCopyWrites != 1 {
		t.Fatal("a WRITE from the caller's own buffer counted as zero-copy")
	}
	got := make([]byte, len(want)+100<<10)
	for off := 0; off < len(got); off += len(want) {
		p := got[off:min(len(got), off+len(want))]
		if r, err := s.c.Read(ctx, fh, uint64(off), p); err != nil || r.Count != len(p) {
			t.Fatalf("READ back at %d: %v (%d bytes)", off, err, r.Count)
		}
	}
	if !bytes.Equal(got[:len(want)], want) || !bytes.Equal(got[len(want):], want[:100<<10]) {
		t.Fatal("the file does not hold what was written")
	}
	if !bytes.Equal(data, want) {
		t.Fatal("the borrowed buffer changed")
	}
}
