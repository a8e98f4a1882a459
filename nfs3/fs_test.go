package nfs3

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"math"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// TestExclusiveCreateSendsVerifier checks the CREATE of O_EXCL: EXCLUSIVE
// with a verifier, then SETATTR of the mode.
func TestExclusiveCreateSendsVerifier(t *testing.T) {
	var mu sync.Mutex
	var modes []CreateMode
	var verfs []CreateVerf
	var setMode *uint32
	m := &memTransport{handle: func(h sunrpc.CallHeader, d *sunrpc.Decoder, _ *sunrpc.Request) fakeReply {
		mu.Lock()
		defer mu.Unlock()
		a := Attr{Type: TypeReg, Mode: 0o600}
		switch h.Proc {
		case ProcCreate:
			decodeFH(d)
			d.String(MaxNameLen)
			how := CreateMode(d.Uint32())
			modes = append(modes, how)
			if how == Exclusive {
				var v CreateVerf
				copy(v[:], d.FixedOpaque(CreateVerfSize))
				verfs = append(verfs, v)
			}
			b := appendPostOpFH(status(StatusOK), testFH)
			b = appendPostOpAttr(b, &a)
			return ok(appendWcc(b, &WccData{}))
		case ProcSetattr:
			decodeFH(d)
			sa := decodeSetAttr(d)
			setMode = sa.Mode
			return ok(appendWcc(status(StatusOK), &WccData{}))
		case ProcGetattr:
			return ok(appendAttr(status(StatusOK), &a))
		}
		return ok(status(ErrNotSupp))
	}}
	c := newFakeClient(t, m, nil)
	tgt := NewTarget(c, FileHandle("root"), 0)
	defer tgt.Close()
	for range 2 {
		f, err := tgt.OpenFile("/x", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(modes) != 2 || modes[0] != Exclusive || modes[1] != Exclusive {
		t.Fatalf("CREATE modes %v, want EXCLUSIVE twice", modes)
	}
	if verfs[0] == verfs[1] || verfs[0] == (CreateVerf{}) {
		t.Errorf("verifiers %x and %x: want distinct, non-zero", verfs[0], verfs[1])
	}
	if setMode == nil || *setMode != 0o640 {
		t.Errorf("SETATTR after EXCLUSIVE create set mode %v", setMode)
	}
}

// freezable is a Transport that stops answering (until the call's context
// ends) while frozen, like a server that hangs.
type freezable struct {
	sunrpc.Transport
	mu     sync.Mutex
	frozen chan struct{} // nil: not frozen
}

func (f *freezable) freeze() {
	f.mu.Lock()
	f.frozen = make(chan struct{})
	f.mu.Unlock()
}

func (f *freezable) thaw() {
	f.mu.Lock()
	close(f.frozen)
	f.frozen = nil
	f.mu.Unlock()
}

func (f *freezable) RoundTrip(ctx context.Context, req *sunrpc.Request) (*sunrpc.Reply, error) {
	f.mu.Lock()
	ch := f.frozen
	f.mu.Unlock()
	if ch != nil {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ch:
		}
	}
	return f.Transport.RoundTrip(ctx, req)
}

// TestDeadlines freezes the server under an open File: reads and writes end
// at their deadline or context instead of waiting until Target.Close.
func TestDeadlines(t *testing.T) {
	s := startGoNFS(t)
	ctx := testCtx(t)
	tcp, err := sunrpc.DialTCP(ctx, s.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	fr := &freezable{Transport: tcp}
	tgt := s.mount(t, &MountOptions{Transport: fr})
	f, err := tgt.OpenFileContext(ctx, "/d", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("data")); err != nil {
		t.Fatal(err)
	}
	fr.freeze()

	const limit = 5 * time.Second // far below the test context's 30 s
	timed := func(what string, fn func() error) {
		t.Helper()
		start := time.Now()
		err := fn()
		if el := time.Since(start); el > limit {
			t.Errorf("%s took %v", what, el)
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: %v, want a deadline error", what, err)
		}
		var pe *fs.PathError
		if !errors.As(err, &pe) || pe.Path != "/d" {
			t.Errorf("%s: %v is not a PathError on /d", what, err)
		}
	}
	f.SetDeadline(time.Now().Add(100 * time.Millisecond))
	timed("ReadAt", func() error { _, err := f.ReadAt(make([]byte, 4), 0); return err })
	timed("Write", func() error { _, err := f.Write([]byte("more")); return err })
	timed("Stat", func() error { _, err := f.Stat(); return err })
	timed("Seek", func() error { _, err := f.Seek(0, io.SeekEnd); return err })

	// A deadline set in the past interrupts a Read already waiting.
	f.SetDeadline(time.Time{})
	done := make(chan error, 1)
	go func() { _, err := f.Read(make([]byte, 4)); done <- err }()
	time.Sleep(50 * time.Millisecond)
	f.SetReadDeadline(time.Now().Add(-time.Second))
	timed("Read interrupted", func() error {
		select {
		case err := <-done:
			return err
		case <-time.After(limit):
			return errors.New("Read still blocked")
		}
	})

	// The *Context variants follow their context.
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := f.ReadContext(cctx, make([]byte, 4)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("ReadContext: %v", err)
	}
	if _, err := f.WriteContext(cctx, []byte("x")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WriteContext: %v", err)
	}

	fr.thaw()
	f.SetDeadline(time.Time{})
	b := make([]byte, 4)
	if n, err := f.ReadAt(b, 0); n != 4 || string(b) != "data" {
		t.Errorf("after thaw: %q, %v", b[:n], err)
	}
	if err := f.Close(); err != nil {
		t.Error(err)
	}
}

func TestStatusErrnos(t *testing.T) {
	// The Linux client's nfs_stat_to_errno, and what a process sees.
	tests := []struct {
		st            Status
		kernel, errno syscall.Errno
	}{
		{ErrPerm, syscall.EPERM, syscall.EPERM},
		{ErrNoEnt, syscall.ENOENT, syscall.ENOENT},
		{ErrIO, syscall.EIO, syscall.EIO},
		{ErrNXIO, syscall.ENXIO, syscall.ENXIO},
		{ErrAcces, syscall.EACCES, syscall.EACCES},
		{ErrExist, syscall.EEXIST, syscall.EEXIST},
		{ErrXDev, syscall.EXDEV, syscall.EXDEV},
		{ErrNoDev, syscall.ENODEV, syscall.ENODEV},
		{ErrNotDir, syscall.ENOTDIR, syscall.ENOTDIR},
		{ErrIsDir, syscall.EISDIR, syscall.EISDIR},
		{ErrInval, syscall.EINVAL, syscall.EINVAL},
		{ErrFBig, syscall.EFBIG, syscall.EFBIG},
		{ErrNoSpc, syscall.ENOSPC, syscall.ENOSPC},
		{ErrROFS, syscall.EROFS, syscall.EROFS},
		{ErrMLink, syscall.EMLINK, syscall.EMLINK},
		{ErrNameTooLong, syscall.ENAMETOOLONG, syscall.ENAMETOOLONG},
		{ErrNotEmpty, syscall.ENOTEMPTY, syscall.ENOTEMPTY},
		{ErrDQuot, syscall.EDQUOT, syscall.EDQUOT},
		{ErrStale, syscall.ESTALE, syscall.ESTALE},
		{ErrRemote, syscall.EREMOTE, syscall.EREMOTE},
		{ErrBadHandle, EBADHANDLE, syscall.ESTALE},
		{ErrNotSync, ENOTSYNC, syscall.EIO},
		{ErrBadCookie, EBADCOOKIE, syscall.EINVAL},
		{ErrNotSupp, ENOTSUPP, syscall.EOPNOTSUPP},
		{ErrTooSmall, ETOOSMALL, syscall.EINVAL},
		{ErrServerFault, syscall.EREMOTEIO, syscall.EREMOTEIO},
		{ErrBadType, EBADTYPE, syscall.EINVAL},
		{ErrJukebox, EJUKEBOX, syscall.EAGAIN},
		{Status(99), syscall.EIO, syscall.EIO},
	}
	for _, tc := range tests {
		err := &fs.PathError{Op: "x", Path: "y", Err: tc.st}
		if tc.st.KernelErrno() != tc.kernel || tc.st.Errno() != tc.errno {
			t.Errorf("%v: kernel %d errno %d, want %d and %d", tc.st, tc.st.KernelErrno(), tc.st.Errno(), tc.kernel, tc.errno)
		}
		if !errors.Is(err, tc.kernel) || !errors.Is(err, tc.errno) {
			t.Errorf("%v does not match %v and %v", tc.st, tc.kernel, tc.errno)
		}
		if tc.errno >= 512 {
			t.Errorf("%v: errno %d is kernel-internal", tc.st, tc.errno)
		}
	}
	if !errors.Is(ErrNotSupp, errors.ErrUnsupported) || !errors.Is(ErrNotEmpty, fs.ErrExist) || errors.Is(ErrROFS, fs.ErrPermission) {
		t.Error("io/fs sentinels")
	}
	if errors.Is(ErrStale, EBADHANDLE) || errors.Is(ErrIO, ErrStale) {
		t.Error("false match")
	}
}

func TestTimeOfClamps(t *testing.T) {
	tests := []struct {
		in   time.Time
		want Time
	}{
		{time.Unix(1_000_000_000, 5), Time{1_000_000_000, 5}},
		{time.Unix(0, 0), Time{0, 0}},
		{time.Unix(0, 7), Time{0, 0}}, // at a bound the nanoseconds go, as in Linux
		{time.Unix(-1, 5), Time{0, 0}},
		{time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC), Time{0, 0}},
		{time.Unix(math.MaxUint32-1, 999_999_999), Time{math.MaxUint32 - 1, 999_999_999}},
		{time.Unix(math.MaxUint32, 5), Time{math.MaxUint32, 0}},
		{time.Unix(1<<32, 0), Time{math.MaxUint32, 0}}, // not 1970
		{time.Unix(1<<40, 0), Time{math.MaxUint32, 0}},
	}
	for _, tc := range tests {
		if got := TimeOf(tc.in); got != tc.want {
			t.Errorf("TimeOf(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
	if got := TimeOfUnix(math.MaxInt64, 2e9); got != (Time{math.MaxUint32, 0}) {
		t.Errorf("TimeOfUnix overflow: %v", got)
	}
	if got := TimeOfUnix(10, -1); got != (Time{9, 999_999_999}) {
		t.Errorf("TimeOfUnix(10, -1) = %v", got)
	}
	// SETATTR carries the clamped value on the wire.
	b := appendSetAttr(nil, &SetAttr{Mtime: SetTime{How: SetToClientTime, Time: TimeOf(time.Unix(1<<32, 0))}})
	if !bytes.HasSuffix(b, []byte{0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}) {
		t.Errorf("set_mtime encoded as % x", b)
	}
}

// TestDefaultCredential: a bare ClientOptions sends AUTH_SYS with the
// process's ids; AuthNone asks for AUTH_NONE.
func TestDefaultCredential(t *testing.T) {
	for _, tc := range []struct {
		opts *ClientOptions
		want sunrpc.AuthFlavor
	}{
		{nil, sunrpc.AuthFlavorSys},
		{&ClientOptions{}, sunrpc.AuthFlavorSys},
		{&ClientOptions{AuthNone: true}, sunrpc.AuthFlavorNone},
	} {
		m := &memTransport{handle: func(sunrpc.CallHeader, *sunrpc.Decoder, *sunrpc.Request) fakeReply { return ok() }}
		c := newFakeClient(t, m, tc.opts)
		if err := c.Null(context.Background()); err != nil {
			t.Fatal(err)
		}
		cred := m.calls[0].Cred
		if cred.Flavor != tc.want {
			t.Errorf("%+v: sent %v, want %v", tc.opts, cred.Flavor, tc.want)
			continue
		}
		if tc.want == sunrpc.AuthFlavorSys {
			a, err := sunrpc.ParseAuthSys(cred)
			if err != nil || int(a.UID) != os.Getuid() || int(a.GID) != os.Getgid() {
				t.Errorf("AUTH_SYS %+v, %v; want uid %d gid %d", a, err, os.Getuid(), os.Getgid())
			}
		}
	}
	// Mount with an explicit AuthNone keeps AUTH_NONE for NFS calls too.
	s := startGoNFS(t)
	ctx := testCtx(t)
	tcp, err := sunrpc.DialTCP(ctx, s.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &credRecorder{Transport: tcp}
	tgt := s.mount(t, &MountOptions{Transport: rec, Cred: &sunrpc.AuthNone})
	if err := tgt.Client().Null(ctx); err != nil {
		t.Fatal(err)
	}
	if rec.last() != sunrpc.AuthFlavorNone {
		t.Errorf("Mount with &sunrpc.AuthNone sent %v", rec.last())
	}
}

// credRecorder remembers the flavor of the last call's credential.
type credRecorder struct {
	sunrpc.Transport
	mu     sync.Mutex
	flavor sunrpc.AuthFlavor
}

func (c *credRecorder) RoundTrip(ctx context.Context, req *sunrpc.Request) (*sunrpc.Reply, error) {
	h, err := sunrpc.DecodeCall(sunrpc.NewDecoder(req.Head))
	if err == nil {
		c.mu.Lock()
		c.flavor = h.Cred.Flavor
		c.mu.Unlock()
	}
	return c.Transport.RoundTrip(ctx, req)
}

func (c *credRecorder) last() sunrpc.AuthFlavor {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.flavor
}
