package nfs4

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
)

// ioOverhead is what a READ or WRITE compound holds besides the payload:
// the RPC header, SEQUENCE, PUTFH, the operation's arguments or results.
const ioOverhead = 1024

// DefaultWindow is the number of READs or WRITEs ReadAt and WriteAt keep
// outstanding.
const DefaultWindow = 8

// IOSizes returns the largest READ and WRITE payloads: ClientOptions.MaxIO,
// within the session's ca_maxresponsesize and ca_maxrequestsize.
func (c *Client) IOSizes() (rsize, wsize int) {
	_, fore := c.Session()
	rsize = min(c.opts.MaxIO, int(fore.MaxResponseSize)-ioOverhead)
	wsize = min(c.opts.MaxIO, int(fore.MaxRequestSize)-ioOverhead)
	return max(rsize, 512), max(wsize, 512)
}

// window runs fn(i) for i in [0, n) with at most DefaultWindow running,
// starting no more after the first error, and returns the error of the
// lowest index that failed.
func window(n int, fn func(i int) error) error {
	errs := make([]error, n)
	sem := make(chan struct{}, DefaultWindow)
	var wg sync.WaitGroup
	var failed atomic.Bool
	for i := 0; i < n && !failed.Load(); i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(i); err != nil {
				errs[i] = err
				failed.Store(true)
			}
		}()
	}
	wg.Wait()
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// ReadAt reads len(p) bytes of fh at off under sid, in READs of the read
// size with a window of them outstanding. It returns io.EOF with the count
// when the file ends before p is full.
func (c *Client) ReadAt(ctx context.Context, fh FileHandle, sid StateID, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("nfs4: negative offset")
	}
	rsize, _ := c.IOSizes()
	n := (len(p) + rsize - 1) / rsize
	counts := make([]int, n)
	eofs := make([]bool, n)
	err := window(n, func(i int) error {
		lo := i * rsize
		hi := min(lo+rsize, len(p))
		got := 0
		for got < hi-lo {
			r, err := c.Read(ctx, fh, sid, uint64(off)+uint64(lo+got), p[lo+got:hi])
			if err != nil {
				return err
			}
			got += r.Count
			if r.EOF || r.Count == 0 {
				eofs[i] = true
				break
			}
		}
		counts[i] = got
		return nil
	})
	total := 0
	for i := range counts {
		total += counts[i]
		if counts[i] < min(rsize, len(p)-i*rsize) {
			if err == nil {
				err = io.EOF
			}
			break
		}
	}
	if err == nil && total < len(p) {
		err = io.EOF
	}
	return total, err
}

// WriteAt writes p to fh at off under sid in WRITEs of the write size,
// with a window of them outstanding, FILE_SYNC when one WRITE holds it all
// and otherwise UNSTABLE followed by a COMMIT, resent whole if the write
// verifier changed in between (the server restarted and lost them).
func (c *Client) WriteAt(ctx context.Context, fh FileHandle, sid StateID, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("nfs4: negative offset")
	}
	_, wsize := c.IOSizes()
	if len(p) <= wsize {
		return c.writeFull(ctx, fh, sid, p, off, FileSync)
	}
	for try := 0; ; try++ {
		n := (len(p) + wsize - 1) / wsize
		verfs := make([]Verifier, n)
		err := window(n, func(i int) error {
			lo := i * wsize
			hi := min(lo+wsize, len(p))
			for lo < hi {
				r, err := c.Write(ctx, fh, sid, uint64(off)+uint64(lo), p[lo:hi], Unstable)
				if err != nil {
					return err
				}
				if r.Count == 0 {
					return io.ErrShortWrite
				}
				verfs[i] = r.Verf
				lo += int(r.Count)
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
		v, err := c.Commit(ctx, fh, uint64(off), 0)
		if err != nil {
			return 0, err
		}
		same := true
		for _, w := range verfs {
			same = same && w == v
		}
		if same {
			return len(p), nil
		}
		if try >= 2 {
			return 0, errors.New("nfs4: the write verifier changed on every try: the server keeps restarting")
		}
	}
}

// writeFull writes p with how; a server that committed less than asked
// (RFC 8881 §18.32.3 allows more, never less, but be safe) gets a COMMIT.
func (c *Client) writeFull(ctx context.Context, fh FileHandle, sid StateID, p []byte, off int64, how StableHow) (int, error) {
	done := 0
	weaker := false
	for done < len(p) {
		r, err := c.Write(ctx, fh, sid, uint64(off)+uint64(done), p[done:], how)
		if err != nil {
			return done, err
		}
		if r.Count == 0 {
			return done, io.ErrShortWrite
		}
		weaker = weaker || r.Committed < how
		done += int(r.Count)
	}
	if weaker {
		if _, err := c.Commit(ctx, fh, uint64(off), clampSize(len(p))); err != nil {
			return done, err
		}
	}
	return done, nil
}
