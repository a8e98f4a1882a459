package nfs3

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
)

// The throughput layer: ReadAt and WriteAt split a transfer into READs or
// WRITEs of the negotiated size and keep up to ClientOptions.Window of them
// outstanding.

// IOSizes returns the READ and WRITE sizes, learning them from FSINFO on fh the
// first time (the server's preferred sizes, at most its maximum, Rsize/Wsize and
// MaxIOSize).
func (c *Client) IOSizes(ctx context.Context, fh FileHandle) (rsize, wsize uint32, err error) {
	c.ioMu.Lock()
	defer c.ioMu.Unlock()
	if c.rsize != 0 {
		return c.rsize, c.wsize, nil
	}
	info, err := c.Fsinfo(ctx, fh)
	if err != nil {
		return 0, 0, err
	}
	c.setIOSizesLocked(&info)
	return c.rsize, c.wsize, nil
}

func (c *Client) setIOSizesLocked(info *FSInfo) {
	pick := func(pref, max, limit uint32) uint32 {
		n := pref
		if n == 0 {
			n = max
		}
		if limit != 0 {
			n = limit
		}
		if max != 0 {
			n = min(n, max)
		}
		if n == 0 {
			n = 32 << 10
		}
		return min(n, MaxIOSize)
	}
	c.rsize = pick(info.RtPref, info.RtMax, c.opts.Rsize)
	c.wsize = pick(info.WtPref, info.WtMax, c.opts.Wsize)
	c.fsinfo = info
}

// window runs fn(i) for i in [0, n) with at most c.opts.Window running, in
// order of i, until fn reports stop. It returns when every started fn has.
// A single fn runs in the caller's goroutine: a goroutine of its own would
// cost a start and a wake-up per call of the commonest small WRITE.
func (c *Client) window(ctx context.Context, n int, fn func(i int) (stop bool)) error {
	if n == 1 {
		if err := ctx.Err(); err != nil {
			return err
		}
		fn(0)
		return nil
	}
	sem := make(chan struct{}, c.opts.Window)
	var wg sync.WaitGroup
	var stopped atomic.Bool
	var err error
	for i := 0; i < n && !stopped.Load(); i++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if fn(i) {
				stopped.Store(true)
			}
		})
	}
	wg.Wait()
	return err
}

// ReadAt reads len(p) bytes of fh at off with pipelined READs, honouring
// io.ReaderAt: n < len(p) comes with an error, io.EOF when the file ends first.
// A read of at most rsize bytes runs in the caller's goroutine; a longer one
// keeps up to ClientOptions.Window READs outstanding, each in a goroutine of
// its own.
func (c *Client) ReadAt(ctx context.Context, fh FileHandle, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("nfs3: ReadAt: negative offset %d", off)
	}
	if len(p) == 0 {
		return 0, nil
	}
	rsize, _, err := c.IOSizes(ctx, fh)
	if err != nil {
		return 0, err
	}
	chunk := int(rsize)
	if len(p) <= chunk {
		// One chunk: its READ (more only if the server answers short) runs
		// in the caller's goroutine. The window would hand even a single
		// READ to a goroutine of its own, a goroutine start and a wake-up
		// per call for the commonest request of a file system (a 4 KiB to
		// rsize read of the page cache or the read-ahead).
		n, eof, err := c.readFull(ctx, fh, p, off)
		if err == nil && eof && n < len(p) {
			err = io.EOF
		}
		return n, err
	}
	nchunks := (len(p) + chunk - 1) / chunk
	type outcome struct {
		n       int
		eof     bool
		err     error
		started bool
	}
	out := make([]outcome, nchunks)
	werr := c.window(ctx, nchunks, func(i int) bool {
		lo := i * chunk
		hi := min(lo+chunk, len(p))
		n, eof, err := c.readFull(ctx, fh, p[lo:hi], off+int64(lo))
		out[i] = outcome{n: n, eof: eof, err: err, started: true}
		return err != nil || eof
	})
	total := 0
	for i := range out {
		o := out[i]
		if !o.started {
			break
		}
		total += o.n
		if o.err != nil {
			return total, o.err
		}
		if o.eof || o.n < min(chunk, len(p)-i*chunk) {
			if total == len(p) {
				return total, nil
			}
			return total, io.EOF
		}
	}
	if total < len(p) {
		if werr == nil {
			werr = io.ErrUnexpectedEOF
		}
		return total, werr
	}
	return total, nil
}

// readFull READs until p is full or the file ends.
func (c *Client) readFull(ctx context.Context, fh FileHandle, p []byte, off int64) (n int, eof bool, err error) {
	for n < len(p) {
		r, err := c.Read(ctx, fh, uint64(off)+uint64(n), p[n:])
		if err != nil {
			return n, false, err
		}
		n += r.Count
		if r.EOF {
			return n, true, nil
		}
		if r.Count == 0 {
			return n, false, fmt.Errorf("nfs3: READ at %d: %w", off+int64(n), io.ErrNoProgress)
		}
	}
	return n, false, nil
}

// VerifierChangedError reports writes the server lost because its write
// verifier kept changing (it restarted again and again) while WriteAt resent
// them.
type VerifierChangedError struct{ Tries int }

func (e *VerifierChangedError) Error() string {
	return fmt.Sprintf("nfs3: write verifier changed on each of %d tries", e.Tries)
}

// writeOutcome summarises a batch of WRITEs.
type writeOutcome struct {
	n        int       // bytes written from the start of p, contiguous
	verf     WriteVerf // the verifier of the unstable writes
	mixed    bool      // the unstable writes came back with different verifiers
	unstable bool      // some write was left UNSTABLE (needs COMMIT)
}

// writeAll WRITEs p at off with pipelined WRITEs of wsize at stability how.
func (c *Client) writeAll(ctx context.Context, fh FileHandle, p []byte, off int64, how StableHow, wsize int) (writeOutcome, error) {
	nchunks := (len(p) + wsize - 1) / wsize
	type outcome struct {
		n         int
		verf      WriteVerf
		committed StableHow
		mixed     bool
		err       error
		started   bool
	}
	out := make([]outcome, nchunks)
	werr := c.window(ctx, nchunks, func(i int) bool {
		lo := i * wsize
		hi := min(lo+wsize, len(p))
		o := outcome{started: true, committed: FileSync}
		for o.n < hi-lo && o.err == nil {
			r, err := c.Write(ctx, fh, uint64(off)+uint64(lo+o.n), p[lo+o.n:hi], how)
			switch {
			case err != nil:
				o.err = err
			case r.Count == 0:
				o.err = fmt.Errorf("nfs3: WRITE at %d: %w", off+int64(lo+o.n), io.ErrShortWrite)
			default:
				if r.Committed == Unstable {
					// Every unstable piece must carry the same verifier.
					if o.committed == Unstable && r.Verf != o.verf {
						o.mixed = true
					}
					o.verf = r.Verf
				}
				o.n += int(r.Count)
				o.committed = min(o.committed, r.Committed)
			}
		}
		out[i] = o
		return o.err != nil
	})
	var res writeOutcome
	first := true
	for i := range out {
		o := out[i]
		if !o.started {
			break
		}
		res.n += o.n
		if o.err != nil {
			return res, o.err
		}
		if o.committed != Unstable {
			continue // DATA_SYNC and FILE_SYNC data is durable
		}
		res.unstable = true
		res.mixed = res.mixed || o.mixed
		if first {
			res.verf, first = o.verf, false
		} else if o.verf != res.verf {
			res.mixed = true
		}
	}
	if res.n < len(p) {
		if werr == nil {
			werr = io.ErrShortWrite
		}
		return res, werr
	}
	return res, nil
}

// maxWriteTries bounds how often WriteAt resends data whose verifier changed.
const maxWriteTries = 3

// WriteAt writes p to fh at off and makes it durable: pipelined UNSTABLE
// WRITEs, then a COMMIT of the range. If the COMMIT's verifier differs from the
// WRITEs' (the server restarted and may have lost them), the data is sent again
// with FILE_SYNC. It honours io.WriterAt: n < len(p) comes with an error.
func (c *Client) WriteAt(ctx context.Context, fh FileHandle, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("nfs3: WriteAt: negative offset %d", off)
	}
	if len(p) == 0 {
		return 0, nil
	}
	_, wsize, err := c.IOSizes(ctx, fh)
	if err != nil {
		return 0, err
	}
	how := Unstable
	for try := 1; ; try++ {
		res, err := c.writeAll(ctx, fh, p, off, how, int(wsize))
		if err != nil {
			return res.n, err
		}
		if !res.unstable {
			return len(p), nil
		}
		if !res.mixed {
			ok, err := c.commitMatches(ctx, fh, off, len(p), res.verf)
			if err != nil {
				return 0, err
			}
			if ok {
				return len(p), nil
			}
		}
		if try == maxWriteTries {
			return 0, &VerifierChangedError{Tries: try}
		}
		c.log.WarnContext(ctx, "write verifier changed; resending with FILE_SYNC", "offset", off, "len", len(p))
		how = FileSync
	}
}

// commitMatches COMMITs [off, off+n) and reports whether the verifier is verf.
func (c *Client) commitMatches(ctx context.Context, fh FileHandle, off int64, n int, verf WriteVerf) (bool, error) {
	count := uint32(0) // to the end of file, when the range is too big to name
	if n <= int(^uint32(0)) {
		count = uint32(n)
	}
	r, err := c.Commit(ctx, fh, uint64(off), count)
	if err != nil {
		return false, err
	}
	return r.Verf == verf, nil
}
