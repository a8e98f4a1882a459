package fusefs

import (
	"context"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nfsrdma/nfsrdma/fusefs/internal/readahead"
)

// readAhead is an open file's read-ahead (package readahead) and the
// go-fuse plumbing of its replies. The file system decides what it serves:
// an O_DIRECT file has none (newOpenFile), and a direct read of a buffered
// handle (O_DIRECT turned on with fcntl) does not use it (openFile.Read).
// A granted lock makes every segment of the file stale (fileState.dataGen, see
// dropCaches): the lock holder reads what other clients wrote before it.
type readAhead struct{ w *readahead.Window }

func newReadAhead(f *openFile, segSize, window int) *readAhead {
	n := f.n
	return &readAhead{readahead.New(readahead.Config{
		SegSize: segSize,
		Window:  window,
		Fetch:   n.readAt,
		Gen:     n.file.dataGen.Load,
		Size: func() int64 {
			n.mu.Lock()
			defer n.mu.Unlock()
			return int64(n.attrs.attr.Size)
		},
		Ctx:  f.ctx,
		Pool: &n.fsys.segBufs,
	})}
}

// read reads len(dest) bytes at off; n < len(dest) means the file ended
// (io.EOF). The data is in dest, or, when one segment read ahead holds all
// of it, in res: the kernel's reply is written from the segment itself
// (no copy), which stays held until the reply is sent (res.Done).
func (ra *readAhead) read(ctx context.Context, dest []byte, off int64) (int, fuse.ReadResult, error) {
	var h readahead.Hold
	n, err := ra.w.Read(ctx, dest, off, &h)
	if h.Data() == nil {
		return n, nil, err
	}
	return n, &segResult{h: h}, err
}

// close empties the window when the file is closed.
func (ra *readAhead) close() { ra.w.Close() }

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
	h   readahead.Hold
	one [1][]byte
}

func (r *segResult) Bytes([]byte) ([]byte, fuse.Status) { return r.h.Data(), fuse.OK }
func (r *segResult) Size() int                          { return len(r.h.Data()) }

// vectoredResult is go-fuse's (unexported) interface of vectored read
// results, which it writes before it calls Done.
type vectoredResult interface {
	Slices() ([][]byte, fuse.Status)
}

var _ vectoredResult = (*segResult)(nil)

// Slices gives the data as go-fuse's vectored results do.
func (r *segResult) Slices() ([][]byte, fuse.Status) {
	r.one[0] = r.h.Data()
	return r.one[:], fuse.OK
}

func (r *segResult) Done() { r.h.Release() }
