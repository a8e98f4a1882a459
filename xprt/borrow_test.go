package xprt

import (
	"bytes"
	"testing"
	"time"
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
