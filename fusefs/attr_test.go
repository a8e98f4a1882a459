package fusefs

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// fakeTransport answers every call after a fixed delay, or fails.
type fakeTransport struct {
	delay time.Duration
	err   error
}

func (f *fakeTransport) RoundTrip(ctx context.Context, req *sunrpc.Request) (*sunrpc.Reply, error) {
	time.Sleep(f.delay)
	if f.err != nil {
		return nil, f.err
	}
	return sunrpc.NewReply(make([]byte, 100), nil, nil), nil
}

func (f *fakeTransport) Close() error { return nil }

func callHead(prog, proc uint32) []byte {
	h := sunrpc.CallHeader{XID: 1, Prog: prog, Vers: 3, Proc: proc}
	return sunrpc.AppendCall(nil, &h)
}

func TestMeteredTransport(t *testing.T) {
	ft := &fakeTransport{delay: 2 * time.Millisecond}
	m := NewMeteredTransport(ft)
	ctx := context.Background()
	for range 3 {
		if _, err := m.RoundTrip(ctx, &sunrpc.Request{Head: callHead(nfs3.Program, nfs3.ProcRead), Bulk: make([]byte, 10)}); err != nil {
			t.Fatal(err)
		}
	}
	ft.err = &sunrpc.CallError{Err: context.DeadlineExceeded}
	m.RoundTrip(ctx, &sunrpc.Request{Head: callHead(nfs3.Program, nfs3.ProcGetattr)})
	m.RoundTrip(ctx, &sunrpc.Request{Head: callHead(nfs3.MountProgram, nfs3.MountProcMnt)})
	m.RoundTrip(ctx, &sunrpc.Request{Head: []byte{1, 2, 3}}) // not a call: not counted

	st := m.Stats()
	if len(st) != 3 {
		t.Fatalf("%d procedures: %+v", len(st), st)
	}
	get, read, mnt := st[0], st[1], st[2]
	if get.Name != "GETATTR" || read.Name != "READ" || mnt.Name != "MOUNT/1" {
		t.Fatalf("names %q %q %q", get.Name, read.Name, mnt.Name)
	}
	if read.Calls != 3 || read.Errors != 0 || read.BytesRecv != 300 || read.BytesSent != uint64(3*(len(callHead(0, 0))+12)) {
		t.Errorf("READ %+v", read)
	}
	if read.RTTMax < 2*time.Millisecond || read.RTTTotal < 6*time.Millisecond || read.MeanRTT() < 2*time.Millisecond {
		t.Errorf("READ times %v %v", read.RTTMax, read.RTTTotal)
	}
	var hist uint64
	for _, n := range read.RTTHist {
		hist += n
	}
	if hist != 3 {
		t.Errorf("READ histogram holds %d calls", hist)
	}
	if get.Errors != 1 || get.Timeouts != 1 {
		t.Errorf("GETATTR %+v", get)
	}
	var sb strings.Builder
	if err := WriteStats(&sb, st); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sb.String(), "READ: calls 3 errors 0") {
		t.Errorf("WriteStats:\n%s", sb.String())
	}
	if rttBucket(0) != 0 || rttBucket(time.Microsecond) != 1 || rttBucket(time.Hour) != RTTBuckets-1 {
		t.Error("rttBucket")
	}
	if BucketBound(1) != 2*time.Microsecond || BucketBound(RTTBuckets-1) != 0 {
		t.Error("BucketBound")
	}
}
