package nfs3

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// goid returns the id of the calling goroutine, from the first line of its
// stack ("goroutine 42 [running]:").
func goid(t *testing.T) uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b, ok := bytes.CutPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); ok && i > 0 {
		if id, err := strconv.ParseUint(string(b[:i]), 10, 64); err == nil {
			return id
		}
	}
	t.Fatalf("no goroutine id in %q", buf)
	return 0
}

// readGoroutines wraps a fake server's handler: it records the goroutine
// each READ's RoundTrip ran on.
type readGoroutines struct {
	t    *testing.T
	next fakeHandler
	mu   sync.Mutex
	ids  []uint64
}

func (g *readGoroutines) handle(h sunrpc.CallHeader, d *sunrpc.Decoder, req *sunrpc.Request) fakeReply {
	if h.Proc == ProcRead {
		id := goid(g.t)
		g.mu.Lock()
		g.ids = append(g.ids, id)
		g.mu.Unlock()
	}
	return g.next(h, d, req)
}

func (g *readGoroutines) take() []uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	ids := g.ids
	g.ids = nil
	return ids
}

// TestReadAtOneChunkInline holds that a ReadAt of at most rsize bytes makes
// its READs in the caller's goroutine with the results of the pipelined
// path (short reads continued, EOF on the boundary, a zero-count reply
// refused), and that a longer one still goes through the window (which
// shows the goroutine check can fail).
func TestReadAtOneChunkInline(t *testing.T) {
	const rsize = 1000
	data := make([]byte, 3*rsize)
	for i := range data {
		data[i] = byte(i*7 + 1)
	}
	ctx := testCtx(t)
	for _, tc := range []struct {
		name      string
		shortBy   int // the server moves at most this many bytes a READ
		size, off int
		n         int
		err       error
		reads     int
		inline    bool
	}{
		{name: "whole chunk", size: rsize, off: 0, n: rsize, reads: 1, inline: true},
		{name: "less than a chunk", size: 10, off: 1234, n: 10, reads: 1, inline: true},
		{name: "short reads continued", shortBy: 300, size: rsize, off: 0, n: rsize, reads: 4, inline: true},
		{name: "EOF on the boundary", size: rsize, off: 2 * rsize, n: rsize, reads: 1, inline: true},
		{name: "EOF inside", size: 500, off: 2800, n: 200, err: io.EOF, reads: 1, inline: true},
		{name: "EOF after short reads", shortBy: 150, size: 500, off: 2800, n: 200, err: io.EOF, reads: 2, inline: true},
		{name: "at the end", size: 10, off: 3 * rsize, n: 0, err: io.EOF, reads: 1, inline: true},
		{name: "two chunks: the window", size: 2 * rsize, off: 0, n: 2 * rsize, reads: 2, inline: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ff := &fakeFile{current: data, shortBy: tc.shortBy}
			g := &readGoroutines{t: t, next: ff.handle}
			c := newFakeClient(t, &memTransport{handle: g.handle}, &ClientOptions{Rsize: rsize, Window: 4})
			if _, _, err := c.IOSizes(ctx, testFH); err != nil {
				t.Fatal(err)
			}
			p := make([]byte, tc.size)
			n, err := c.ReadAt(ctx, testFH, p, int64(tc.off))
			if n != tc.n || err != tc.err {
				t.Fatalf("ReadAt(%d bytes at %d) = %d, %v; want %d, %v", tc.size, tc.off, n, err, tc.n, tc.err)
			}
			if !bytes.Equal(p[:n], data[tc.off:tc.off+n]) {
				t.Errorf("ReadAt(%d bytes at %d) returned the wrong bytes", tc.size, tc.off)
			}
			ids := g.take()
			if len(ids) != tc.reads {
				t.Errorf("%d READs, want %d", len(ids), tc.reads)
			}
			me := goid(t)
			for i, id := range ids {
				if (id == me) != tc.inline {
					t.Errorf("READ %d ran on goroutine %d, the caller is %d: want inline %v", i, id, me, tc.inline)
				}
			}
		})
	}
}

// TestReadAtOneChunkNoProgress: a READ that moves nothing and does not
// report the end of the file fails the single-chunk ReadAt with
// io.ErrNoProgress, as it fails a chunk of a longer one.
func TestReadAtOneChunkNoProgress(t *testing.T) {
	ctx := testCtx(t)
	ff := &fakeFile{current: make([]byte, 3000), shortBy: 100}
	m := &memTransport{handle: func(h sunrpc.CallHeader, d *sunrpc.Decoder, req *sunrpc.Request) fakeReply {
		if h.Proc != ProcRead {
			return ff.handle(h, d, req)
		}
		// 100 bytes at offset 0, then nothing (and no EOF) anywhere.
		args := *d // the arguments are decoded again by ff.handle
		if decodeFH(&args); args.Uint64() == 0 {
			return ff.handle(h, d, req)
		}
		a := ff.attr()
		r := appendPostOpAttr(status(StatusOK), &a)
		r = sunrpc.AppendUint32(r, 0)
		r = sunrpc.AppendBool(r, false)
		return fakeReply{before: sunrpc.AppendUint32(r, 0), bulk: []byte{}}
	}}
	c := newFakeClient(t, m, &ClientOptions{Rsize: 1000, Window: 4})
	for _, size := range []int{500, 1500} { // one chunk, then two
		n, err := c.ReadAt(ctx, testFH, make([]byte, size), 0)
		if !errors.Is(err, io.ErrNoProgress) || n != 100 {
			t.Errorf("ReadAt(%d bytes) with a zero-count READ = %d, %v; want 100, io.ErrNoProgress", size, n, err)
		}
	}
}
