package readahead

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const seg = 8192

// fakeFile is a file of size bytes whose byte at off is content(off, gen),
// read through Fetch: every fetch is recorded, and a fetch of a segment
// (len(p) == seg, the window's) can be held until released.
type fakeFile struct {
	size int64
	gen  atomic.Uint64

	mu      sync.Mutex
	fetches []fetch
	block   chan struct{} // non-nil: segment fetches wait for it to close
	fail    error         // segment fetches fail with it
}

type fetch struct {
	off int64
	n   int
}

func content(off int64, gen uint64) byte { return byte(off*7 + off/251 + int64(gen)*13) }

func (f *fakeFile) Fetch(ctx context.Context, p []byte, off int64) (int, error) {
	f.mu.Lock()
	f.fetches = append(f.fetches, fetch{off, len(p)})
	block, fail := f.block, f.fail
	f.mu.Unlock()
	if len(p) == seg && block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	if len(p) == seg && fail != nil {
		return 0, fail
	}
	gen := f.gen.Load()
	n := 0
	for n < len(p) && off+int64(n) < f.size {
		p[n] = content(off+int64(n), gen)
		n++
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// take returns the fetches made since the last take, by offset.
func (f *fakeFile) take() []fetch {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs := f.fetches
	f.fetches = nil
	slices.SortFunc(fs, func(a, b fetch) int { return int(a.off - b.off) })
	return fs
}

func newWindow(t *testing.T, f *fakeFile, window int, pool *Pool) *Window {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return New(Config{SegSize: seg, Window: window, Fetch: f.Fetch, Gen: f.gen.Load,
		Size: func() int64 { return f.size }, Ctx: ctx, Pool: pool})
}

// read reads n bytes at off through w, checks them against the file at
// generation gen, and releases a Hold at once.
func read(t *testing.T, w *Window, off int64, n int, gen uint64) (int, error, bool) {
	t.Helper()
	dest := make([]byte, n)
	var h Hold
	m, err := w.Read(context.Background(), dest, off, &h)
	got := dest[:m]
	held := h.Data() != nil
	if held {
		got = h.Data()
		if len(got) != m {
			t.Fatalf("Read at %d: n %d, %d bytes held", off, m, len(got))
		}
	}
	for i, b := range got {
		if want := content(off+int64(i), gen); b != want {
			t.Fatalf("Read(%d bytes at %d): byte %d is %#x, want %#x", n, off, i, b, want)
		}
	}
	h.Release()
	return m, err, held
}

// settle waits until every segment fetch the window started has ended and
// let go of its segment.
func settle(t *testing.T, w *Window) {
	t.Helper()
	w.fetching.Wait()
}

// wantFree checks that the pool has want free.
func wantFree(t *testing.T, p *Pool, want int) {
	t.Helper()
	if p.Free() != want {
		t.Fatalf("%d free in the pool, want %d", p.Free(), want)
	}
}

func segFetches(first, last int64) []fetch {
	var fs []fetch
	for i := first; i <= last; i++ {
		fs = append(fs, fetch{i * seg, seg})
	}
	return fs
}

// TestSequentialWindow: the first read goes to the server as asked; a
// sequential reader then opens the window, doubling up to Window/SegSize
// segments ahead, each fetched once.
func TestSequentialWindow(t *testing.T) {
	f := &fakeFile{size: 64 * seg}
	w := newWindow(t, f, 8*seg, &Pool{})
	const n = 4096
	if m, err, held := read(t, w, 0, n, 0); m != n || err != nil || held {
		t.Fatalf("first read: %d, %v, held %v", m, err, held)
	}
	if got := f.take(); !slices.Equal(got, []fetch{{0, n}}) {
		t.Fatalf("first read fetched %v, want just what was asked", got)
	}
	// The second read is sequential: segment 0 and 1 ahead (depth 1).
	if _, _, held := read(t, w, n, n, 0); !held {
		t.Error("a read within one segment was copied, not held")
	}
	settle(t, w)
	if got := f.take(); !slices.Equal(got, segFetches(0, 1)) {
		t.Fatalf("second read fetched %v, want segments 0-1", got)
	}
	// Depth doubles: 2, 4, then stays at 8 segments ahead.
	wantDepth := []int{2, 4, 8, 8, 8}
	for k, off := 0, int64(2*n); k < len(wantDepth); k, off = k+1, off+n {
		read(t, w, off, n, 0)
		w.mu.Lock()
		d := w.depth
		w.mu.Unlock()
		if d != wantDepth[k] {
			t.Fatalf("read %d: depth %d, want %d", k+3, d, wantDepth[k])
		}
	}
	settle(t, w)
	// Reads up to offset 7*4096 (segment 3) with depth 8: segments 2-11.
	if got := f.take(); !slices.Equal(got, segFetches(2, 11)) {
		t.Fatalf("fetched %v, want segments 2-11 once each", got)
	}
	// A read spanning two segments is copied.
	if m, err, held := read(t, w, 4*seg-100, 200, 0); m != 200 || err != nil || held {
		t.Fatalf("read across segments: %d, %v, held %v", m, err, held)
	}
}

// TestRandomClosesWindow: a read elsewhere closes the window and goes to
// the server for exactly what it asks; so does a read of data the reader
// was given before.
func TestRandomClosesWindow(t *testing.T) {
	f := &fakeFile{size: 64 * seg}
	pool := &Pool{}
	w := newWindow(t, f, 4*seg, pool)
	read(t, w, 0, 4096, 0)
	read(t, w, 4096, 4096, 0)
	read(t, w, 8192, 4096, 0)
	settle(t, w)
	f.take()
	if _, _, held := read(t, w, 40*seg+5, 100, 0); held {
		t.Error("a random read was served from a segment")
	}
	if got := f.take(); !slices.Equal(got, []fetch{{40*seg + 5, 100}}) {
		t.Fatalf("random read fetched %v", got)
	}
	w.mu.Lock()
	segs, depth := len(w.segs), w.depth
	w.mu.Unlock()
	if segs != 0 || depth != 0 {
		t.Errorf("after a random read: %d segments, depth %d; want the window closed", segs, depth)
	}
	wantFree(t, pool, int(pool.Made())) // the closed window's segments

	// Sequential again, then back over what was given: the server again.
	read(t, w, 40*seg+105, 4096, 0)
	read(t, w, 40*seg+105+4096, 4096, 0)
	settle(t, w)
	f.take()
	read(t, w, 40*seg+105, 4096, 0) // given out before
	if got := f.take(); !slices.Equal(got, []fetch{{40*seg + 105, 4096}}) {
		t.Fatalf("a read of data given out before fetched %v, want it from the server", got)
	}
}

// TestStaleGeneration: a segment fetched before the file's data changed
// (a write of this mount, a granted lock) is never used.
func TestStaleGeneration(t *testing.T) {
	f := &fakeFile{size: 64 * seg}
	w := newWindow(t, f, 4*seg, &Pool{})
	read(t, w, 0, 4096, 0)
	read(t, w, 4096, 4096, 0)
	settle(t, w) // segments 0-1 of generation 0
	f.take()
	f.gen.Add(1)
	// read checks the bytes against generation 1.
	if m, err, _ := read(t, w, 8192, 4096, 1); m != 4096 || err != nil {
		t.Fatalf("read after the change: %d, %v", m, err)
	}
	settle(t, w)
	got := f.take()
	if !slices.Contains(got, fetch{seg, seg}) {
		t.Errorf("segment 1 of the old generation was not fetched again: %v", got)
	}

	// A segment whose fetch is still under way when the data changes is
	// not used either: the read fetches its part itself.
	f2 := &fakeFile{size: 64 * seg}
	w2 := newWindow(t, f2, 4*seg, &Pool{})
	read(t, w2, 0, 4096, 0)
	block := make(chan struct{})
	f2.mu.Lock()
	f2.block = block
	f2.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		dest := make([]byte, 4096)
		var h Hold
		_, err := w2.Read(context.Background(), dest, 4096, &h) // starts segments 0-1 of generation 0
		if err == nil && h.Data() == nil && dest[0] != content(4096, 1) || h.Data() != nil && h.Data()[0] != content(4096, 1) {
			err = errors.New("served data of the old generation")
		}
		h.Release()
		done <- err
	}()
	for {
		f2.mu.Lock()
		n := len(f2.fetches)
		f2.mu.Unlock()
		if n >= 3 { // the first read and the two segments
			break
		}
		time.Sleep(time.Millisecond)
	}
	f2.gen.Add(1) // the write lands while the segments are on their way...
	close(block)  // ...and they are answered with new data, but began under gen 0
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestEOF: the segment that ends the file ends the read with io.EOF, and
// nothing is read ahead past the file's size.
func TestEOF(t *testing.T) {
	f := &fakeFile{size: 3*seg + 100}
	w := newWindow(t, f, 8*seg, &Pool{})
	read(t, w, 0, seg, 0)
	read(t, w, seg, seg, 0)
	read(t, w, 2*seg, seg, 0)
	if m, err, _ := read(t, w, 3*seg, seg, 0); m != 100 || err != io.EOF {
		t.Fatalf("read of the last segment: %d, %v; want 100, io.EOF", m, err)
	}
	settle(t, w)
	for _, fe := range f.take() {
		if fe.off >= f.size {
			t.Errorf("fetched %v past the end (%d)", fe, f.size)
		}
	}
	// Across the last two segments: copied, short.
	w2 := newWindow(t, f, 8*seg, &Pool{})
	read(t, w2, 0, seg, 0)
	read(t, w2, seg, 2*seg, 0)
	if m, err, _ := read(t, w2, 3*seg, 2*seg, 0); m != 100 || err != io.EOF {
		t.Fatalf("read across the end: %d, %v; want 100, io.EOF", m, err)
	}
}

// TestFailedSegment: a segment whose fetch failed is not served; the read
// fetches its part itself and gets the server's answer.
func TestFailedSegment(t *testing.T) {
	f := &fakeFile{size: 64 * seg}
	w := newWindow(t, f, 4*seg, &Pool{})
	read(t, w, 0, 4096, 0)
	f.mu.Lock()
	f.fail = errors.New("segment failed")
	f.mu.Unlock()
	if m, err, held := read(t, w, 4096, 4096, 0); m != 4096 || err != nil || held {
		t.Fatalf("read with its segment failed: %d, %v, held %v", m, err, held)
	}
}

// TestCancel: a read waiting for its segment ends with its context.
func TestCancel(t *testing.T) {
	f := &fakeFile{size: 64 * seg, block: make(chan struct{})}
	w := newWindow(t, f, 4*seg, &Pool{})
	read(t, w, 0, 4096, 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var h Hold
	if _, err := w.Read(ctx, make([]byte, 4096), 4096, &h); !errors.Is(err, context.Canceled) || h.Data() != nil {
		t.Fatalf("read cancelled while its segment is fetched: %v", err)
	}
	close(f.block)
	w.Close()
}

// TestPoolReuse: a segment's memory goes back when its last holder lets go
// (a Hold outlives the window's close), and serves the segments of the
// next file instead of fresh memory.
func TestPoolReuse(t *testing.T) {
	f := &fakeFile{size: 64 * seg}
	pool := &Pool{}
	w := newWindow(t, f, 2*seg, pool)
	read(t, w, 0, 4096, 0)
	var h Hold
	dest := make([]byte, 4096)
	if _, err := w.Read(context.Background(), dest, 4096, &h); err != nil || h.Data() == nil {
		t.Fatalf("sequential read: %v, held %v", err, h.Data() != nil)
	}
	settle(t, w)
	held := slices.Clone(h.Data())
	w.Close()
	made := pool.Made()
	if made != 2 {
		t.Fatalf("%d segments made, want 2", made)
	}
	wantFree(t, pool, int(made)-1) // all but the held one

	// Other files' segments do not take the held memory, and once the
	// pool has as many as one window uses at once, files make no more.
	var after1 uint64
	for k := range 3 {
		g := &fakeFile{size: 64 * seg}
		g.gen.Store(uint64(10 + k))
		w2 := newWindow(t, g, 2*seg, pool)
		for off := int64(0); off < 6*seg; off += 4096 {
			read(t, w2, off, 4096, uint64(10+k))
			settle(t, w2) // the same segments in use at once for each file
		}
		settle(t, w2)
		w2.Close()
		if want := min(int(pool.Made())-1, 6); pool.Free() != want {
			t.Fatalf("file %d closed: %d free, want %d", k, pool.Free(), want)
		}
		if k == 0 {
			after1 = pool.Made()
		}
	}
	if !bytes.Equal(h.Data(), held) {
		t.Fatal("held data was overwritten by another segment's fetch")
	}
	if pool.Made() != after1 {
		t.Errorf("the second and third files made %d segments' memory, want the pool's reused", pool.Made()-after1)
	}
	h.Release()
	h.Release() // a second release does nothing
	// Every window closed: the pool keeps one window's worth (2*2+2).
	wantFree(t, pool, min(int(pool.Made()), 6))
}
