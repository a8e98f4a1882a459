package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
)

// nfsrdma's own figures above the verbs: NULL round trips and 1 MiB
// READ/WRITE streams through the transport (one RPC per call, a fixed
// number outstanding), and whole-file sequential I/O through the NFS
// client's pipelined ReadAt/WriteAt. They take an *nfs3.Client on any
// transport: xprt over ibv to knfsd in the guest, xprt over sim to
// xprttest in this package's tests.

// NullLatency times NULL calls made one after another and returns the
// round trips (not halved: an RPC is a round trip).
func NullLatency(ctx context.Context, c *nfs3.Client, warmup, iters int) (Latency, error) {
	if iters <= 0 {
		return Latency{}, fmt.Errorf("bench: %d NULL calls", iters)
	}
	stamps := make([]time.Time, warmup+iters+1)
	for i := range warmup + iters {
		stamps[i] = time.Now()
		if err := c.Null(ctx); err != nil {
			return Latency{}, fmt.Errorf("bench: NULL call %d: %w", i, err)
		}
	}
	stamps[warmup+iters] = time.Now()
	samples := make([]time.Duration, iters)
	for i := range samples {
		samples[i] = stamps[warmup+i+1].Sub(stamps[warmup+i])
	}
	return newLatency(samples), nil
}

// ReadLatency times READs of size bytes one at a time at random
// size-aligned offsets within the first fileSize bytes of fh, into the
// caller's memory: a small READ's round trip, comparable with fio's
// randread at iodepth 1 on the kernel client.
func ReadLatency(ctx context.Context, c *nfs3.Client, fh nfs3.FileHandle, size, fileSize, warmup, iters int) (Latency, error) {
	if iters <= 0 || size <= 0 || fileSize < size {
		return Latency{}, fmt.Errorf("bench: %d READs of %d bytes in %d", iters, size, fileSize)
	}
	buf := make([]byte, size)
	rng := rand.New(rand.NewPCG(3, 4))
	samples := make([]time.Duration, 0, iters)
	for i := range warmup + iters {
		off := uint64(rng.IntN(fileSize/size)) * uint64(size)
		t0 := time.Now()
		r, err := c.Read(ctx, fh, off, buf)
		el := time.Since(t0)
		if err == nil && r.Count != size {
			err = fmt.Errorf("short READ: %d of %d bytes", r.Count, size)
		}
		if err != nil {
			return Latency{}, fmt.Errorf("bench: READ %d at %d: %w", i, off, err)
		}
		if i >= warmup {
			samples = append(samples, el)
		}
	}
	return newLatency(samples), nil
}

// RPCStream shapes a stream of READ or WRITE calls over one file.
type RPCStream struct {
	Write       bool // WRITE (UNSTABLE, then one COMMIT), else READ
	Size        int  // bytes per call (1 MiB)
	FileSize    int  // the file's size; calls cover it in order
	Passes      int  // times the file is covered
	Outstanding int  // calls in flight: one goroutine each
	// Borrow, when set, gives each goroutine its buffer (and the release
	// of it) instead of a Go allocation: READs into transport-lent
	// memory land with no copy.
	Borrow func(ctx context.Context) (buf []byte, release func(), err error)
}

// RPCThroughput runs s on fh: Outstanding goroutines each take the next
// offset, issue one READ or WRITE of s.Size there (a short READ or WRITE is
// an error: the file must exist and be s.FileSize long for READs), and
// repeat. It returns MiB/s over the whole stream (the COMMIT included).
func RPCThroughput(ctx context.Context, c *nfs3.Client, fh nfs3.FileHandle, s RPCStream) (float64, error) {
	if s.Size <= 0 || s.FileSize < s.Size || s.Passes <= 0 || s.Outstanding <= 0 {
		return 0, fmt.Errorf("bench: RPC stream %+v", s)
	}
	perPass := s.FileSize / s.Size
	calls := perPass * s.Passes
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var (
		mu    sync.Mutex
		first error
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
		cancel()
	}
	var wg sync.WaitGroup
	start := time.Now()
	for range s.Outstanding {
		wg.Go(func() {
			buf := make([]byte, s.Size)
			if s.Borrow != nil {
				b, release, err := s.Borrow(ctx)
				if err != nil {
					fail(fmt.Errorf("borrowing a buffer: %w", err))
					return
				}
				defer release()
				buf = b
			}
			for {
				i := int(next.Add(1) - 1)
				if i >= calls || ctx.Err() != nil {
					return
				}
				off := uint64(i%perPass) * uint64(s.Size)
				if s.Write {
					r, err := c.Write(ctx, fh, off, buf, nfs3.Unstable)
					if err == nil && int(r.Count) != s.Size {
						err = fmt.Errorf("short WRITE at %d: %d of %d bytes", off, r.Count, s.Size)
					}
					if err != nil {
						fail(err)
						return
					}
					continue
				}
				r, err := c.Read(ctx, fh, off, buf)
				if err == nil && r.Count != s.Size {
					err = fmt.Errorf("short READ at %d: %d of %d bytes", off, r.Count, s.Size)
				}
				if err != nil {
					fail(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if first == nil && s.Write {
		if _, err := c.Commit(ctx, fh, 0, 0); err != nil {
			first = fmt.Errorf("COMMIT: %w", err)
		}
	}
	el := time.Since(start)
	if first != nil {
		return 0, fmt.Errorf("bench: RPC stream: %w", first)
	}
	return float64(calls) * float64(s.Size) / (1 << 20) / el.Seconds(), nil
}

// SeqThroughput reads (or writes) the whole of buf from (to) fh at offset 0
// with the client's ReadAt (WriteAt, which ends with a COMMIT), passes
// times, and returns MiB/s.
func SeqThroughput(ctx context.Context, c *nfs3.Client, fh nfs3.FileHandle, write bool, buf []byte, passes int) (float64, error) {
	if len(buf) == 0 || passes <= 0 {
		return 0, errors.New("bench: empty sequential transfer")
	}
	start := time.Now()
	for p := range passes {
		var n int
		var err error
		if write {
			n, err = c.WriteAt(ctx, fh, buf, 0)
		} else {
			n, err = c.ReadAt(ctx, fh, buf, 0)
		}
		if err != nil {
			return 0, fmt.Errorf("bench: pass %d: %d of %d bytes: %w", p, n, len(buf), err)
		}
	}
	el := time.Since(start)
	return float64(passes) * float64(len(buf)) / (1 << 20) / el.Seconds(), nil
}
