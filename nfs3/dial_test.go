package nfs3

import (
	"context"
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

func TestMountOptionsRefused(t *testing.T) {
	ctx := testCtx(t)
	dial := func(context.Context, netip.Addr) (sunrpc.Transport, error) { return nil, errors.New("dialed") }
	released := 0
	_, err := Mount(ctx, "127.0.0.1", "/", &MountOptions{Transport: &memTransport{}, Dial: dial, Release: func() error { released++; return nil }})
	if err == nil || !strings.Contains(err.Error(), "Transport and Dial") {
		t.Errorf("Transport with Dial: %v", err)
	}
	if released != 1 {
		t.Errorf("a failed Mount called Release %d times, want 1", released)
	}
	if _, err := MountTCP(ctx, "127.0.0.1", nil); err == nil || !strings.Contains(err.Error(), "want host:/export") {
		t.Errorf("spec without export: %v", err)
	}
}

// TestMountDial: with Dial, the host is resolved once, MOUNT goes to the
// address, Dial makes NConnect connections to it, and Release runs once the
// connections are closed.
func TestMountDial(t *testing.T) {
	s := startGoNFS(t)
	ctx := testCtx(t)
	var dialed []netip.Addr
	var closedBeforeRelease, released atomic.Int32
	var conns atomic.Int32
	o := &MountOptions{MountPort: s.port, Cred: &sunrpc.AuthNone, NConnect: 3,
		Dial: func(ctx context.Context, addr netip.Addr) (sunrpc.Transport, error) {
			dialed = append(dialed, addr)
			t, err := sunrpc.DialTCP(ctx, netip.AddrPortFrom(addr, uint16(s.port)).String(), nil)
			if err != nil {
				return nil, err
			}
			conns.Add(1)
			return closeCounted{t, &conns}, nil
		},
		Release: func() error {
			released.Add(1)
			closedBeforeRelease.Store(3 - conns.Load())
			return errors.New("released")
		},
	}
	tgt, err := MountTCP(ctx, "localhost:/", o)
	if err != nil {
		t.Fatal(err)
	}
	if want := netip.MustParseAddr("127.0.0.1"); len(dialed) != 3 || dialed[0] != want || dialed[2] != want {
		t.Errorf("dialed %v, want 127.0.0.1 three times", dialed)
	}
	if err := tgt.Client().Null(ctx); err != nil {
		t.Fatal(err)
	}
	if released.Load() != 0 {
		t.Fatal("released while mounted")
	}
	if err := tgt.Close(); err == nil || !strings.Contains(err.Error(), "released") {
		t.Errorf("Close = %v, want Release's error", err)
	}
	tgt.Close()
	if released.Load() != 1 || closedBeforeRelease.Load() != 3 {
		t.Errorf("Release called %d times with %d of 3 connections closed before; want once, after all", released.Load(), closedBeforeRelease.Load())
	}
}

type closeCounted struct {
	sunrpc.Transport
	n *atomic.Int32
}

func (c closeCounted) Close() error { c.n.Add(-1); return c.Transport.Close() }

// TestMountTCPSpec mounts "localhost:/" over TCP with two connections.
func TestMountTCPSpec(t *testing.T) {
	s := startGoNFS(t)
	ctx := testCtx(t)
	tgt, err := MountTCP(ctx, "localhost:/", &MountOptions{MountPort: s.port, NFSPort: s.port, Cred: &sunrpc.AuthNone, NConnect: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	if _, ok := tgt.c.rpc.Transport().(*sunrpc.MultiTransport); !ok {
		t.Errorf("transport %T, want a MultiTransport of NConnect 2", tgt.c.rpc.Transport())
	}
	if err := tgt.Client().Null(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := MountTCP(ctx, "localhost:/", &MountOptions{MountPort: s.port, NFSPort: s.port, Cred: &sunrpc.AuthNone, NConnect: MaxNConnect + 1}); err == nil {
		t.Error("NConnect above MaxNConnect accepted")
	}
}

func TestSplitSpec(t *testing.T) {
	for _, tc := range []struct{ spec, host, export string }{
		{"server:/export", "server", "/export"},
		{"10.99.0.1:/export-insecure", "10.99.0.1", "/export-insecure"},
		{"[fe80::1%rxe0]:/a/b", "fe80::1%rxe0", "/a/b"},
		{"fe80::1:/a", "fe80::1", "/a"},
		{"server:/", "server", "/"},
		{"server:/a:b", "server", "/a:b"},
		{"server", "", ""},
		{"server:export", "", ""},
		{":/export", "", ""},
		{"[::1]/export", "", ""},
		{"a b:/x", "", ""},
	} {
		h, e, err := SplitSpec(tc.spec)
		if tc.host == "" {
			if err == nil {
				t.Errorf("SplitSpec(%q) = %q, %q; want an error", tc.spec, h, e)
			}
			continue
		}
		if err != nil || h != tc.host || e != tc.export {
			t.Errorf("SplitSpec(%q) = %q, %q, %v; want %q, %q", tc.spec, h, e, err, tc.host, tc.export)
		}
	}
}

// TestStatusText: errors say what the status means, and still match.
func TestStatusText(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{ErrAcces, "NFS3ERR_ACCES (permission denied)"},
		{ErrNoEnt, "NFS3ERR_NOENT (no such file or directory)"},
		{ErrBadHandle, "NFS3ERR_BADHANDLE (illegal NFS file handle)"},
		{ErrJukebox, "NFS3ERR_JUKEBOX (the server is slow to answer: try again later)"},
		{ErrServerFault, "NFS3ERR_SERVERFAULT (remote I/O error)"},
		{Status(12345), "nfsstat3(12345)"},
		{MountErrNoEnt, "MNT3ERR_NOENT (no such file or directory)"},
		{MountErrAcces, "MNT3ERR_ACCES (permission denied)"},
		{MountStatus(99), "mountstat3(99)"},
		{pathErr("open", "docs/a", ErrAcces), "open docs/a: NFS3ERR_ACCES (permission denied)"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("%#v: %q, want %q", tc.err, got, tc.want)
		}
	}
	err := pathErr("open", "docs/a", ErrAcces)
	var st Status
	if !errors.Is(err, fs.ErrPermission) || !errors.Is(err, syscall.EACCES) || !errors.As(err, &st) || st != ErrAcces {
		t.Errorf("%v does not match fs.ErrPermission, EACCES and Status", err)
	}
	if !errors.Is(MountErrAcces, fs.ErrPermission) {
		t.Error("MNT3ERR_ACCES does not match fs.ErrPermission")
	}
	for s := range statusInfo {
		if s != StatusOK && !strings.HasSuffix(s.Error(), ")") {
			t.Errorf("%d: %q has no meaning", uint32(s), s.Error())
		}
	}
}

// TestPathStyles: the path methods take io/fs names and, deprecated, rooted
// paths for the same files; the io/fs methods take io/fs names only; each
// io/fs method's Context twin gives what it gives.
func TestPathStyles(t *testing.T) {
	s := startGoNFS(t)
	tgt := s.mount(t, nil)
	ctx := testCtx(t)
	if _, err := tgt.Mkdir(ctx, "docs", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := tgt.OpenFileContext(ctx, "docs/a", os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteContext(ctx, []byte("hello"))
	if err := f.CloseContext(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"docs/a", "/docs/a", "docs/../docs/a", "./docs/a"} {
		fi, err := tgt.StatContext(ctx, p)
		if err != nil || fi.Name() != "a" || fi.Size() != 5 {
			t.Errorf("StatContext(%q) = %v, %v", p, fi, err)
		}
		if b, err := tgt.ReadFileContext(ctx, p); err != nil || string(b) != "hello" {
			t.Errorf("ReadFileContext(%q) = %q, %v", p, b, err)
		}
	}
	for _, p := range []string{".", "/", ""} {
		fi, err := tgt.StatContext(ctx, p)
		if err != nil || fi.Name() != "." || !fi.IsDir() {
			t.Errorf("StatContext(%q) = %v, %v; want the root, named \".\"", p, fi, err)
		}
	}
	if fi, err := tgt.Stat("docs/a"); err != nil || fi.Name() != "a" {
		t.Errorf("Stat(docs/a) = %v, %v", fi, err)
	}
	if fi, err := tgt.Stat("."); err != nil || fi.Name() != "." {
		t.Errorf("Stat(.) = %v, %v", fi, err)
	}
	for _, p := range []string{"/docs/a", "docs/../docs/a", "", "/"} {
		if _, err := tgt.Stat(p); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("Stat(%q) = %v, want fs.ErrInvalid", p, err)
		}
		if _, err := tgt.Open(p); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("Open(%q) = %v, want fs.ErrInvalid", p, err)
		}
	}
	a, err := tgt.ReadDir("docs")
	if err != nil {
		t.Fatal(err)
	}
	b, err := tgt.ReadDirContext(ctx, "/docs")
	if err != nil || len(a) != 1 || len(b) != 1 || a[0].Name() != b[0].Name() {
		t.Errorf("ReadDir(docs) = %v; ReadDirContext(/docs) = %v, %v", a, b, err)
	}
	if _, err := tgt.StatContext(ctx, "docs/missing"); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "stat docs/missing: NFS3ERR_NOENT (no such file or directory)") {
		t.Errorf("StatContext(docs/missing) = %v", err)
	}
}
