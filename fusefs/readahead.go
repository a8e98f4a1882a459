package fusefs

import (
	"context"
	"io"
	"sync"
	"sync/atomic"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// readAhead serves a sequential reader of one open file from segments of
// rsize fetched ahead of it: each READ the kernel asks for starts the READs
// of the next segments (up to the window) in the background, so that up to
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
// Direct I/O is never read ahead, as the kernel client's is not: a file
// opened O_DIRECT has no window, and a direct read of a buffered handle
// (O_DIRECT turned on with fcntl) does not use it (openFile.Read). A
// segment fetched before another client's write would otherwise serve a
// direct read, which must always read the server.
//
// A granted lock makes every segment of the file stale (fileState.dataGen, see
// dropCaches): the lock holder reads what other clients wrote before it.
//
// A segment is used only if no change of the file's data by this mount
// completed after its READ started (fileState.dataGen), so the reader sees its
// own writes, and only for bytes it has not given out yet: the kernel asks
// again for data it was given only when its page cache let go of it, and
// such a read goes to the server as the kernel client's would, instead of
// being a second cache that nothing revalidates.
//
// A segment's memory (rsize bytes) is reused from segment to segment, and
// from file to file (FS.segBufs): a fresh megabyte for every segment costs
// its zeroing and, once the runtime has returned freed memory to the
// kernel, a page fault for every page the READ's data is copied into (on
// the test bed a 128 MiB sequential read cost the mount server 2.7 s of
// CPU with fresh memory, 1.8 s with reused). A segment counts its holders
// (the window, the READ filling it, each read copying from it) and its
// memory goes back when the last lets go, so no read ever copies from
// memory that another segment is being filled into.
type readAhead struct {
	f       *openFile
	segSize int
	maxSegs int

	mu     sync.Mutex
	depth  int                // segments read ahead of the one being read
	next   int64              // where a sequential reader reads next
	begun  bool               // a read was served (next is known)
	eof    int64              // a segment ended the file here (-1: not seen)
	eofGen uint64             // dataGen when eof was seen
	segs   map[int64]*segment // by index (offset / segSize)
	gave   map[int64][]uint64 // pages given out, by segment index (see given)
	spare  []uint64           // a bitmap of gave's, zeroed, for the next (forgetGiven)

	pooled bool // counted in FS.segBufs.windows (segPool's mu)
}

type segment struct {
	done chan struct{} // closed when data/err are set
	gen  uint64        // fileState.dataGen when the READ started
	data []byte
	eof  bool
	err  error
	refs int     // holders (ra.mu): the window's, the fetch's, each read's
	mem  *[]byte // the reused memory data is in; nil once given back
}

// unrefLocked drops one hold on s; the last gives its memory back for
// another segment (ra.mu is held).
func (ra *readAhead) unrefLocked(s *segment) {
	s.refs--
	if s.refs > 0 || s.mem == nil {
		return
	}
	mem := s.mem
	s.mem, s.data = nil, nil
	ra.f.n.fsys.segBufs.put(mem)
}

// segPool is the free segments' memory of a mount, kept for the next
// segments rather than left to the garbage collector: up to as many as
// were in use at once while windows were open; once the last window
// closes, one window's worth (its read-ahead and as many segments behind:
// 18 MiB with the default rsize and read-ahead).
type segPool struct {
	mu      sync.Mutex
	free    []*[]byte
	per     int // the most segments one window holds
	windows int // windows holding segments (readAhead.pooled)
	inUse   int // memory given out and not given back
	peak    int // the most in use at once since the windows opened
	made    atomic.Uint64
}

// get returns segment memory for ra, rsize bytes (its contents are left
// from an earlier segment: a segment exposes only what its READ wrote).
func (p *segPool) get(ra *readAhead) *[]byte {
	size := ra.segSize
	p.mu.Lock()
	p.per = max(p.per, 2*ra.maxSegs+2)
	if !ra.pooled {
		ra.pooled = true
		p.windows++
	}
	p.inUse++
	p.peak = max(p.peak, p.inUse)
	for len(p.free) > 0 {
		last := len(p.free) - 1
		mem := p.free[last]
		p.free[last] = nil
		p.free = p.free[:last]
		if len(*mem) == size {
			p.mu.Unlock()
			return mem
		}
	}
	p.mu.Unlock()
	p.made.Add(1)
	b := make([]byte, size)
	return &b
}

// put gives segment memory back.
func (p *segPool) put(mem *[]byte) {
	p.mu.Lock()
	p.inUse--
	if len(p.free) < max(p.peak, p.per) {
		p.free = append(p.free, mem)
	}
	p.mu.Unlock()
}

// closed is ra's window closing; with the last, what is kept shrinks to
// one window's worth.
func (p *segPool) closed(ra *readAhead) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !ra.pooled {
		return
	}
	ra.pooled = false
	p.windows--
	if p.windows > 0 {
		return
	}
	p.peak = p.inUse
	if len(p.free) > p.per {
		clear(p.free[p.per:])
		p.free = p.free[:p.per]
	}
}

// dropLocked takes segment i out of the window (ra.mu is held).
func (ra *readAhead) dropLocked(i int64) {
	if s := ra.segs[i]; s != nil {
		delete(ra.segs, i)
		ra.unrefLocked(s)
	}
}

// close empties the window when the file is closed: the segments' memory
// goes back as soon as no READ fills it and no read copies from it.
func (ra *readAhead) close() {
	ra.mu.Lock()
	ra.dropAllLocked()
	clear(ra.gave)
	ra.mu.Unlock()
	ra.f.n.fsys.segBufs.closed(ra)
}

// dropAllLocked empties the window (ra.mu is held).
func (ra *readAhead) dropAllLocked() {
	for i := range ra.segs {
		ra.dropLocked(i)
	}
}

// raPage is the unit in which the read-ahead records what it gave out.
const raPage = 4096

// given reports whether every page of [off, off+n) was given out to the
// kernel since the window opened (a read of data it was given before);
// ra.mu is held.
func (ra *readAhead) given(off int64, n int) bool {
	size := int64(ra.segSize)
	for p := off &^ (raPage - 1); p < off+int64(n); p += raPage {
		b := ra.gave[p/size]
		k := (p % size) / raPage
		if b == nil || b[k/64]&(1<<(k%64)) == 0 {
			return false
		}
	}
	return true
}

// forgetGiven empties gave, keeping one of its bitmaps for the next
// markGiven: a random reader forgets and marks at every read (ra.mu is
// held).
func (ra *readAhead) forgetGiven() {
	for _, b := range ra.gave {
		if ra.spare != nil {
			break
		}
		clear(b)
		ra.spare = b
	}
	clear(ra.gave)
}

// markGiven records that [off, off+n) was given out; ra.mu is held.
func (ra *readAhead) markGiven(off int64, n int) {
	size := int64(ra.segSize)
	for p := off &^ (raPage - 1); p < off+int64(n); p += raPage {
		i, k := p/size, (p%size)/raPage
		b := ra.gave[i]
		if b == nil {
			if b, ra.spare = ra.spare, nil; b == nil {
				b = make([]uint64, (size/raPage+63)/64)
			}
			ra.gave[i] = b
		}
		b[k/64] |= 1 << (k % 64)
	}
}

func newReadAhead(f *openFile, segSize, window int) *readAhead {
	return &readAhead{f: f, segSize: segSize, maxSegs: max(window/segSize, 1), eof: -1, segs: make(map[int64]*segment), gave: make(map[int64][]uint64)}
}

// read reads len(dest) bytes at off; n < len(dest) means the file ended
// (io.EOF). The data is in dest, or, when one segment read ahead holds all
// of it, in res: the kernel's reply is written from the segment itself
// (no copy), which stays held until the reply is sent (res.Done).
func (ra *readAhead) read(ctx context.Context, dest []byte, off int64) (n int, res fuse.ReadResult, err error) {
	n, err = ra.readInto(ctx, dest, off, &res)
	return n, res, err
}

// segResult is a reply served from a segment's memory: Done lets go of
// the segment.
//
// It gives its data as Slices (go-fuse's vectored results), not only as
// Bytes: with splicing off (FUSEOptions), go-fuse takes a plain result's
// Bytes and calls Done before it writes the reply, which would give the
// segment's memory back while the reply is still written from it, to be
// filled by another segment's READ (the race detector saw exactly that).
// A vectored result is written first and let go after.
type segResult struct {
	ra   *readAhead
	s    *segment
	data []byte
	one  [1][]byte
}

func (r *segResult) Bytes([]byte) ([]byte, fuse.Status) { return r.data, fuse.OK }
func (r *segResult) Size() int                          { return len(r.data) }

// vectoredResult is go-fuse's (unexported) interface of vectored read
// results, which it writes before it calls Done.
type vectoredResult interface {
	Slices() ([][]byte, fuse.Status)
}

var _ vectoredResult = (*segResult)(nil)

// Slices gives the data as go-fuse's vectored results do.
func (r *segResult) Slices() ([][]byte, fuse.Status) {
	r.one[0] = r.data
	return r.one[:], fuse.OK
}
func (r *segResult) Done() {
	if r.s == nil {
		return
	}
	r.ra.mu.Lock()
	r.ra.unrefLocked(r.s)
	r.ra.mu.Unlock()
	r.s, r.data = nil, nil
}

// readInto is read: it sets *res (with a nil or io.EOF error) instead of
// filling dest when one segment holds the data.
func (ra *readAhead) readInto(ctx context.Context, dest []byte, off int64, res *fuse.ReadResult) (int, error) {
	n := ra.f.n
	size := int64(ra.segSize)
	first, last := off/size, (off+int64(len(dest))-1)/size
	gen := n.file.dataGen.Load()

	// The file's size as last known: no segment is read ahead past it (a
	// reader going further reads directly).
	n.mu.Lock()
	size0 := int64(n.attrs.attr.Size)
	n.mu.Unlock()

	ra.mu.Lock()
	_, known := ra.segs[first]
	// Concurrent requests of one sequential reader (the kernel's own
	// read-ahead, several threads) arrive a little out of order: one
	// that falls in a segment already read ahead is sequential too.
	seq := ra.begun && off == ra.next || known && ra.depth > 0
	if seq && ra.given(off, len(dest)) {
		seq = false // read again: from the server (see above)
	}
	if !seq {
		// Random access (or the first read): forget the window and read
		// just what was asked, directly.
		ra.dropAllLocked()
		ra.forgetGiven()
		ra.depth = 0
		ra.next = off + int64(len(dest))
		ra.begun = true
		ra.markGiven(off, len(dest))
		ra.mu.Unlock()
		return n.readAt(ctx, dest, off)
	}
	ra.depth = min(max(2*ra.depth, 1), ra.maxSegs)
	ra.next = max(ra.next, off+int64(len(dest)))
	if ra.eofGen != gen {
		ra.eof = -1 // the file may have grown since
	}
	for i := range ra.segs {
		// Segments a window behind: concurrent requests for the ones just
		// behind this may still be on their way.
		if i < first-int64(ra.maxSegs) {
			ra.dropLocked(i)
		}
	}
	for i := range ra.gave {
		if i < first-int64(ra.maxSegs) {
			delete(ra.gave, i)
		}
	}
	need := make([]*segment, 0, last-first+1)
	for i := first; i <= last+int64(ra.depth); i++ {
		if i > last && (ra.eof >= 0 && i*size >= ra.eof || i*size >= size0) {
			break // nothing to read ahead past the end
		}
		s := ra.segs[i]
		if s == nil || s.gen != gen {
			s = ra.start(i, gen)
		}
		if i <= last {
			s.refs++
			need = append(need, s)
		}
	}
	ra.mu.Unlock()
	defer func() {
		ra.mu.Lock()
		for _, s := range need {
			ra.unrefLocked(s)
		}
		ra.mu.Unlock()
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
			m, err := n.readAt(ctx, dest[total:], off+int64(total))
			return total + m, err
		}
		segOff := i * size
		from := max(off+int64(total)-segOff, 0)
		if len(need) == 1 && from < int64(len(s.data)) {
			// One segment holds it all: the reply is written from
			// there, the segment held until it is sent.
			to := min(from+int64(len(dest)), int64(len(s.data)))
			ra.mu.Lock()
			ra.markGiven(segOff+from, int(to-from))
			s.refs++
			ra.mu.Unlock()
			*res = &segResult{ra: ra, s: s, data: s.data[from:to]}
			total = int(to - from)
			if total == len(dest) {
				return total, nil
			}
			return total, io.EOF // the segment is short: the file ends there
		}
		if from < int64(len(s.data)) {
			c := copy(dest[total:], s.data[from:])
			ra.mu.Lock()
			ra.markGiven(segOff+from, c)
			ra.mu.Unlock()
			total += c
		}
		if total == len(dest) {
			return total, nil
		}
		if s.eof || len(s.data) < ra.segSize {
			return total, io.EOF
		}
	}
	return total, nil
}

// start begins the READ of segment i; ra.mu is held.
func (ra *readAhead) start(i int64, gen uint64) *segment {
	ra.dropLocked(i) // an older one, if any
	n := ra.f.n
	mem := n.fsys.segBufs.get(ra)
	s := &segment{done: make(chan struct{}), gen: gen, refs: 2, mem: mem}
	ra.segs[i] = s
	go func() {
		buf := *mem
		m, err := n.readAt(ra.f.ctx, buf, i*int64(ra.segSize))
		s.data = buf[:m]
		if err == io.EOF {
			s.eof, err = true, nil
			ra.mu.Lock()
			if end := i*int64(ra.segSize) + int64(m); ra.eof < 0 || end < ra.eof || ra.eofGen != gen {
				ra.eof, ra.eofGen = end, gen
			}
			ra.mu.Unlock()
		}
		s.err = err
		close(s.done)
		ra.mu.Lock()
		ra.unrefLocked(s)
		ra.mu.Unlock()
	}()
	return s
}
