package fusefs

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// failingWrites fails every WRITE call while fail is set.
type failingWrites struct {
	sunrpc.Transport
	fail atomic.Bool
}

func (f *failingWrites) RoundTrip(ctx context.Context, req *sunrpc.Request) (*sunrpc.Reply, error) {
	if _, proc, _ := callProc(req.Head); proc == nfs3.ProcWrite && f.fail.Load() {
		return nil, errors.New("injected transport failure")
	}
	return f.Transport.RoundTrip(ctx, req)
}

// TestWriteBehind: buffered writes are answered before the server's reply
// (pipelined over a slow link) yet a stat and a read through the mount,
// and the server's copy after close, see all of them; a write behind that
// fails is reported by close.
func TestWriteBehind(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	var fw *failingWrites
	m := mountGoNFSVia(t, srv, nil, func(tr sunrpc.Transport) sunrpc.Transport {
		fw = &failingWrites{Transport: &slowLink{Transport: tr, bw: 1 << 30, rtt: 30 * time.Millisecond}}
		return fw
	})
	data := make([]byte, 4<<20+123)
	rand.Read(data)
	f, err := os.Create(m.path("wb"))
	check(t, err)
	start := time.Now()
	for off := 0; off < len(data); off += 128 << 10 {
		_, err := f.Write(data[off:min(off+128<<10, len(data))])
		check(t, err)
	}
	// 33 requests of 128 KiB in one round trip each would take a second.
	if el := time.Since(start); el > 700*time.Millisecond {
		t.Errorf("33 buffered writes over a 30 ms link took %v: not pipelined", el)
	}
	fi, err := os.Stat(m.path("wb"))
	check(t, err)
	if fi.Size() != int64(len(data)) {
		t.Errorf("stat while writing: size %d, want %d", fi.Size(), len(data))
	}
	// Read back through the same descriptor (os.Create opens O_RDWR),
	// writes possibly still in flight.
	got := make([]byte, len(data))
	if n, err := f.ReadAt(got, 0); n != len(data) || !bytes.Equal(got, data) {
		f.Close()
		t.Fatalf("read back while writing: %d bytes, %v, same: %v", n, err, bytes.Equal(got, data))
	}
	check(t, f.Close())
	got, err = os.ReadFile(m.path("wb"))
	check(t, err)
	if !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, differs", len(got))
	}
	if b, err := readServer(srv, "wb"); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("server copy: %d bytes, %v", len(b), err)
	}

	// Read your own writes on one descriptor.
	rw, err := os.OpenFile(m.path("wb"), os.O_RDWR, 0)
	check(t, err)
	patch := bytes.Repeat([]byte{'P'}, 100_000)
	_, err = rw.WriteAt(patch, 1<<20)
	check(t, err)
	p := make([]byte, len(patch))
	_, err = rw.ReadAt(p, 1<<20)
	check(t, err)
	if !bytes.Equal(p, patch) {
		t.Fatal("read after a write behind on the same descriptor: old data")
	}
	check(t, rw.Close())

	// A failed write behind is close's error.
	g, err := os.OpenFile(m.path("wb"), os.O_WRONLY, 0)
	check(t, err)
	fw.fail.Store(true)
	_, err = g.Write(data[:4096])
	check(t, err)
	if err := g.Close(); !errors.Is(err, syscall.EIO) {
		t.Errorf("close after a failed write behind: %v, want EIO", err)
	}
	fw.fail.Store(false)
}
