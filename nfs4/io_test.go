package nfs4

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"testing"
)

// TestReadAtWriteAt: transfers larger than the I/O size are split into
// READs and WRITEs of that size, the file's end is io.EOF with the count,
// and a write verifier that changes between the WRITEs and the COMMIT (a
// server restart) makes WriteAt send everything again.
func TestReadAtWriteAt(t *testing.T) {
	s := newFakeServer(60, 4)
	c := newTestClient(t, s, &ClientOptions{MaxIO: 4096})
	defer c.Close()
	ctx := context.Background()
	if r, w := c.IOSizes(); r != 4096 || w != 4096 {
		t.Fatalf("I/O sizes %d/%d, want MaxIO", r, w)
	}
	want := make([]byte, 5*4096+100)
	for i := range want {
		want[i] = byte(rand.Uint32())
	}
	fh := FileHandle{1}
	if n, err := c.WriteAt(ctx, fh, AnonymousStateID, want, 0); err != nil || n != len(want) {
		t.Fatalf("WriteAt: %d, %v", n, err)
	}
	if !bytes.Equal(s.data, want) || s.writes != 6 {
		t.Fatalf("the server got %d WRITEs and %d bytes", s.writes, len(s.data))
	}
	got := make([]byte, len(want)+50)
	n, err := c.ReadAt(ctx, fh, AnonymousStateID, got, 0)
	if err != io.EOF || n != len(want) || !bytes.Equal(got[:n], want) {
		t.Fatalf("ReadAt past the end: %d, %v", n, err)
	}
	n, err = c.ReadAt(ctx, fh, AnonymousStateID, got[:1000], 4000)
	if err != nil || n != 1000 || !bytes.Equal(got[:1000], want[4000:5000]) {
		t.Fatalf("ReadAt across a READ boundary: %d, %v", n, err)
	}

	s.mu.Lock()
	s.data, s.writes, s.bumpAfter = nil, 0, 3
	s.mu.Unlock()
	if n, err := c.WriteAt(ctx, fh, AnonymousStateID, want, 0); err != nil || n != len(want) {
		t.Fatalf("WriteAt across a restart: %d, %v", n, err)
	}
	if s.writes != 12 || !bytes.Equal(s.data, want) {
		t.Errorf("after a verifier change: %d WRITEs (want all 6 twice), data equal %v", s.writes, bytes.Equal(s.data, want))
	}
}
