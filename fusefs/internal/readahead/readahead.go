// Package readahead serves a sequential reader of one open file from
// segments of rsize fetched ahead of it: each read starts the READs of the
// next segments (up to the window) in the background, so that up to
// window/rsize READs are in flight while the reader consumes. The window
// opens one segment at a time and doubles while the reader stays
// sequential; a random read closes it and goes straight to the server.
//
// Sequential is exact: a read is sequential only if it starts where the
// previous one ended (or falls in a segment already read ahead for a
// sequential reader: concurrent requests arrive a little out of order). A
// random reader thus costs exactly the READs of what it asks for; the
// first read of a handle is not read ahead either.
//
// A segment is used only if no change of the file's data completed after
// its READ started (Config.Gen: the file system bumps the generation when
// its own write lands, and when a granted lock makes every segment stale),
// so the reader sees its own writes and, after a lock, what other clients
// wrote before it; and only for bytes it has not given out yet: the kernel
// asks again for data it was given only when its page cache let go of it,
// and such a read goes to the server as the kernel client's would, instead
// of being a second cache that nothing revalidates.
//
// Direct I/O is not this package's: the file system gives an O_DIRECT
// file no Window and sends a direct read of a buffered handle past it, as
// the kernel client never reads ahead for direct I/O.
//
// A segment's memory (rsize bytes) is reused from segment to segment, and
// from file to file (Pool): a fresh megabyte for every segment costs its
// zeroing and, once the runtime has returned freed memory to the kernel, a
// page fault for every page the READ's data is copied into (on the test
// bed a 128 MiB sequential read cost the mount server 2.7 s of CPU with
// fresh memory, 1.8 s with reused). A segment counts its holders (the
// window, the READ filling it, each read copying from it, each Hold) and
// its memory goes back when the last lets go, so no read ever copies from
// memory that another segment is being filled into.
package readahead

import (
	"context"
	"io"
	"sync"
)

// Config is what a Window needs of its file.
type Config struct {
	// SegSize is the size of a segment: one READ (rsize).
	SegSize int
	// Window is how many bytes are read ahead at most (at least one
	// segment).
	Window int
	// Fetch reads len(p) bytes of the file at off from the server;
	// n < len(p) comes with io.EOF when the file ends first. It is called
	// for a read that is not served from segments (in the reader's
	// goroutine, with its context) and for each segment (in a goroutine
	// of its own, with Ctx).
	Fetch func(ctx context.Context, p []byte, off int64) (int, error)
	// Gen returns the file's data generation: a segment whose READ began
	// under an older one is never used.
	Gen func() uint64
	// Size returns the file's size as last known: no segment is read ahead
	// past it.
	Size func() int64
	// Ctx bounds the segments' READs: the open file's lifetime.
	Ctx context.Context
	// Pool is the segments' memory, shared by the files of a mount.
	Pool *Pool
}

// Window is the read-ahead of one open file. mu guards every field below
// it and each segment's refs and mem; a segment's data, eof and err are
// set before its done is closed and read only after.
type Window struct {
	cfg     Config
	segSize int
	maxSegs int

	mu     sync.Mutex
	depth  int                // segments read ahead of the one being read
	next   int64              // where a sequential reader reads next
	begun  bool               // a read was served (next is known)
	eof    int64              // a segment ended the file here (-1: not seen)
	eofGen uint64             // generation when eof was seen
	segs   map[int64]*segment // by index (offset / segSize)
	gave   map[int64][]uint64 // pages given out, by segment index (see given)
	spare  []uint64           // a bitmap of gave's, zeroed, for the next (forgetGiven)

	pooled bool // counted in Pool.windows (the pool's mu)

	fetching sync.WaitGroup // segment fetches not yet ended (tests wait for them)
}

type segment struct {
	done chan struct{} // closed when data/err are set
	gen  uint64        // Config.Gen when the READ started
	data []byte
	eof  bool
	err  error
	refs int     // holders (w.mu): the window's, the fetch's, each read's, each Hold's
	mem  *[]byte // the reused memory data is in; nil once given back
}

// New returns the window of a file, closed (the first read is not read
// ahead).
func New(cfg Config) *Window {
	return &Window{cfg: cfg, segSize: cfg.SegSize, maxSegs: max(cfg.Window/cfg.SegSize, 1), eof: -1,
		segs: make(map[int64]*segment), gave: make(map[int64][]uint64)}
}

// unrefLocked drops one hold on s; the last gives its memory back for
// another segment (w.mu is held).
func (w *Window) unrefLocked(s *segment) {
	s.refs--
	if s.refs > 0 || s.mem == nil {
		return
	}
	mem := s.mem
	s.mem, s.data = nil, nil
	w.cfg.Pool.put(mem)
}

// dropLocked takes segment i out of the window (w.mu is held).
func (w *Window) dropLocked(i int64) {
	if s := w.segs[i]; s != nil {
		delete(w.segs, i)
		w.unrefLocked(s)
	}
}

// Close empties the window when the file is closed: the segments' memory
// goes back as soon as no READ fills it, no read copies from it and no
// Hold holds it.
func (w *Window) Close() {
	w.mu.Lock()
	w.dropAllLocked()
	clear(w.gave)
	w.mu.Unlock()
	w.cfg.Pool.closed(w)
}

// dropAllLocked empties the window (w.mu is held).
func (w *Window) dropAllLocked() {
	for i := range w.segs {
		w.dropLocked(i)
	}
}

// page is the unit in which the window records what it gave out.
const page = 4096

// given reports whether every page of [off, off+n) was given out to the
// kernel since the window opened (a read of data it was given before);
// w.mu is held.
func (w *Window) given(off int64, n int) bool {
	size := int64(w.segSize)
	for p := off &^ (page - 1); p < off+int64(n); p += page {
		b := w.gave[p/size]
		k := (p % size) / page
		if b == nil || b[k/64]&(1<<(k%64)) == 0 {
			return false
		}
	}
	return true
}

// forgetGiven empties gave, keeping one of its bitmaps for the next
// markGiven: a random reader forgets and marks at every read (w.mu is
// held).
func (w *Window) forgetGiven() {
	for _, b := range w.gave {
		if w.spare != nil {
			break
		}
		clear(b)
		w.spare = b
	}
	clear(w.gave)
}

// markGiven records that [off, off+n) was given out; w.mu is held.
func (w *Window) markGiven(off int64, n int) {
	size := int64(w.segSize)
	for p := off &^ (page - 1); p < off+int64(n); p += page {
		i, k := p/size, (p%size)/page
		b := w.gave[i]
		if b == nil {
			if b, w.spare = w.spare, nil; b == nil {
				b = make([]uint64, (size/page+63)/64)
			}
			w.gave[i] = b
		}
		b[k/64] |= 1 << (k % 64)
	}
}

// Hold is data given out from a segment's memory without a copy: the
// segment stays held, its memory not reused, until Release. The zero Hold
// holds nothing.
type Hold struct {
	w    *Window
	s    *segment
	data []byte
}

// Data returns the data held (nil for the zero Hold).
func (h *Hold) Data() []byte { return h.data }

// Release lets go of the segment; the data must not be used after. A
// second Release does nothing.
func (h *Hold) Release() {
	if h.s == nil {
		return
	}
	h.w.mu.Lock()
	h.w.unrefLocked(h.s)
	h.w.mu.Unlock()
	h.s, h.data = nil, nil
}

// Read reads len(dest) bytes at off; n < len(dest) comes with io.EOF when
// the file ends first. The data is in dest, or, when one segment read
// ahead holds all of it, in *hold (which must hold nothing on entry): the
// caller writes its reply from the segment itself and then releases it.
func (w *Window) Read(ctx context.Context, dest []byte, off int64, hold *Hold) (int, error) {
	size := int64(w.segSize)
	first, last := off/size, (off+int64(len(dest))-1)/size
	gen := w.cfg.Gen()
	size0 := w.cfg.Size()

	w.mu.Lock()
	_, known := w.segs[first]
	// Concurrent requests of one sequential reader (the kernel's own
	// read-ahead, several threads) arrive a little out of order: one
	// that falls in a segment already read ahead is sequential too.
	seq := w.begun && off == w.next || known && w.depth > 0
	if seq && w.given(off, len(dest)) {
		seq = false // read again: from the server (see the package doc)
	}
	if !seq {
		// Random access (or the first read): forget the window and read
		// just what was asked, directly.
		w.dropAllLocked()
		w.forgetGiven()
		w.depth = 0
		w.next = off + int64(len(dest))
		w.begun = true
		w.markGiven(off, len(dest))
		w.mu.Unlock()
		return w.cfg.Fetch(ctx, dest, off)
	}
	w.depth = min(max(2*w.depth, 1), w.maxSegs)
	w.next = max(w.next, off+int64(len(dest)))
	if w.eofGen != gen {
		w.eof = -1 // the file may have grown since
	}
	for i := range w.segs {
		// Segments a window behind: concurrent requests for the ones just
		// behind this may still be on their way.
		if i < first-int64(w.maxSegs) {
			w.dropLocked(i)
		}
	}
	for i := range w.gave {
		if i < first-int64(w.maxSegs) {
			delete(w.gave, i)
		}
	}
	need := make([]*segment, 0, last-first+1)
	for i := first; i <= last+int64(w.depth); i++ {
		if i > last && (w.eof >= 0 && i*size >= w.eof || i*size >= size0) {
			break // nothing to read ahead past the end
		}
		s := w.segs[i]
		if s == nil || s.gen != gen {
			s = w.start(i, gen)
		}
		if i <= last {
			s.refs++
			need = append(need, s)
		}
	}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		for _, s := range need {
			w.unrefLocked(s)
		}
		w.mu.Unlock()
	}()

	total := 0
	for k, s := range need {
		i := first + int64(k)
		select {
		case <-s.done:
		case <-ctx.Done():
			return total, ctx.Err()
		}
		if s.err != nil || s.gen != gen {
			// Failed, or older than a write this reader may have made:
			// read this part directly.
			m, err := w.cfg.Fetch(ctx, dest[total:], off+int64(total))
			return total + m, err
		}
		segOff := i * size
		from := max(off+int64(total)-segOff, 0)
		if len(need) == 1 && from < int64(len(s.data)) {
			// One segment holds it all: the reply is written from
			// there, the segment held until it is sent.
			to := min(from+int64(len(dest)), int64(len(s.data)))
			w.mu.Lock()
			w.markGiven(segOff+from, int(to-from))
			s.refs++
			w.mu.Unlock()
			*hold = Hold{w: w, s: s, data: s.data[from:to]}
			total = int(to - from)
			if total == len(dest) {
				return total, nil
			}
			return total, io.EOF // the segment is short: the file ends there
		}
		if from < int64(len(s.data)) {
			c := copy(dest[total:], s.data[from:])
			w.mu.Lock()
			w.markGiven(segOff+from, c)
			w.mu.Unlock()
			total += c
		}
		if total == len(dest) {
			return total, nil
		}
		if s.eof || len(s.data) < w.segSize {
			return total, io.EOF
		}
	}
	return total, nil
}

// start begins the READ of segment i; w.mu is held.
func (w *Window) start(i int64, gen uint64) *segment {
	w.dropLocked(i) // an older one, if any
	mem := w.cfg.Pool.get(w)
	s := &segment{done: make(chan struct{}), gen: gen, refs: 2, mem: mem}
	w.segs[i] = s
	w.fetching.Go(func() {
		buf := *mem
		m, err := w.cfg.Fetch(w.cfg.Ctx, buf, i*int64(w.segSize))
		s.data = buf[:m]
		if err == io.EOF {
			s.eof, err = true, nil
			w.mu.Lock()
			if end := i*int64(w.segSize) + int64(m); w.eof < 0 || end < w.eof || w.eofGen != gen {
				w.eof, w.eofGen = end, gen
			}
			w.mu.Unlock()
		}
		s.err = err
		close(s.done)
		w.mu.Lock()
		w.unrefLocked(s)
		w.mu.Unlock()
	})
	return s
}
