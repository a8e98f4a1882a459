package fusefs

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

func TestAttrCacheTimeouts(t *testing.T) {
	const lo, hi = 3 * time.Second, 60 * time.Second
	t0 := time.Unix(1000, 0)
	a := nfs3.Attr{Type: nfs3.TypeReg, Size: 10, Mtime: nfs3.Time{Seconds: 5}}
	var c attrCache
	steps := []struct {
		at      time.Duration // after t0
		attr    nfs3.Attr
		changed bool
		timeo   time.Duration
	}{
		{0, a, false, lo},                   // first attributes: the minimum
		{time.Second, a, false, lo},         // revalidated early: unchanged timeout
		{4 * time.Second, a, false, 2 * lo}, // after the timeout, unchanged: doubles
		{11 * time.Second, a, false, 4 * lo},
		{24 * time.Second, a, false, 8 * lo},
		{49 * time.Second, a, false, 16 * lo},
		{100 * time.Second, a, false, hi}, // capped
		{200 * time.Second, a, false, hi},
		{201 * time.Second, nfs3.Attr{Type: nfs3.TypeReg, Size: 11, Mtime: nfs3.Time{Seconds: 5}}, true, lo}, // changed: back to the minimum
		{202 * time.Second, nfs3.Attr{Type: nfs3.TypeReg, Size: 11, Mtime: nfs3.Time{Seconds: 6}}, true, lo},
	}
	for i, s := range steps {
		now := t0.Add(s.at)
		if changed := c.update(s.attr, now, lo, hi); changed != s.changed || c.timeo != s.timeo {
			t.Fatalf("step %d: changed %v timeo %v, want %v %v", i, changed, c.timeo, s.changed, s.timeo)
		}
		if left, ok := c.fresh(now.Add(s.timeo - time.Millisecond)); !ok || left != time.Millisecond {
			t.Fatalf("step %d: fresh just before the timeout: %v %v", i, left, ok)
		}
		if _, ok := c.fresh(now.Add(s.timeo)); ok {
			t.Fatalf("step %d: fresh at the timeout", i)
		}
	}
	c.invalidate()
	if _, ok := c.fresh(t0.Add(202 * time.Second)); ok {
		t.Fatal("fresh after invalidate")
	}
	// noac: every timeout is zero.
	var z attrCache
	z.update(a, t0, 0, 0)
	if _, ok := z.fresh(t0); ok {
		t.Fatal("noac attributes fresh")
	}
}

func TestIdentity(t *testing.T) {
	for _, tc := range []struct{ fileid, ino uint64 }{
		{12345, 12345}, {1, 1}, {0, 1 << 62}, {^uint64(0), ^uint64(0) ^ 1<<62},
	} {
		if got := ino(tc.fileid); got != tc.ino {
			t.Errorf("ino(%#x) = %#x, want %#x", tc.fileid, got, tc.ino)
		}
	}
	if generation(nfs3.FileHandle{1, 2, 3}) == generation(nfs3.FileHandle{1, 2, 4}) {
		t.Error("handles differing in a byte have one generation")
	}
	if typeMode(nfs3.TypeDir) != syscall.S_IFDIR || typeMode(nfs3.TypeLnk) != syscall.S_IFLNK || typeMode(nfs3.TypeReg) != syscall.S_IFREG {
		t.Error("typeMode")
	}
}

func TestToErrno(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{nfs3.ErrNoEnt, syscall.ENOENT},
		{fmt.Errorf("wrapped: %w", nfs3.ErrNotEmpty), syscall.ENOTEMPTY},
		{nfs3.ErrStale, syscall.ESTALE},
		{nfs3.ErrJukebox, syscall.EAGAIN},
		{&sunrpc.TimeoutError{Tries: 3}, syscall.EIO}, // soft: EIO, as nfs(5) says
		{&sunrpc.CallError{Err: context.DeadlineExceeded}, syscall.EIO},
		{context.Canceled, syscall.EINTR},
		{fmt.Errorf("x: %w", sunrpc.ErrClosed), syscall.ENOTCONN},
		{errors.New("connection reset"), syscall.EIO},
		{syscall.ECONNRESET, syscall.EIO},
	} {
		if got := toErrno(tc.err); got != tc.want {
			t.Errorf("toErrno(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
