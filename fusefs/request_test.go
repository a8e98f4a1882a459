package fusefs

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// loopingServer repeats the first page of every directory: a READDIRPLUS
// that asks to resume after a cookie is answered from the start again.
type loopingServer struct {
	sunrpc.Transport
	rewritten atomic.Int64
}

func (l *loopingServer) RoundTrip(ctx context.Context, req *sunrpc.Request) (*sunrpc.Reply, error) {
	if _, proc, ok := callProc(req.Head); ok && proc == nfs3.ProcReaddirplus && req.Bulk == nil {
		h := req.Head
		// ... cookie (8), cookieverf (8), dircount (4), maxcount (4).
		if binary.BigEndian.Uint64(h[len(h)-24:]) != 0 {
			h = slices.Clone(h)
			clear(h[len(h)-24 : len(h)-8])
			r := *req
			r.Head = h
			req = &r
			l.rewritten.Add(1)
		}
	}
	return l.Transport.RoundTrip(ctx, req)
}

// TestReaddirCookieLoop: a server whose cookies lead back to the start
// makes the listing fail with EIO instead of running forever.
func TestReaddirCookieLoop(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	check(t, os.Mkdir(filepath.Join(srv.Dir, "d"), 0o755))
	for i := range 2000 {
		check(t, os.WriteFile(filepath.Join(srv.Dir, "d", "a-file-name-long-enough-to-fill-pages-"+strconv.Itoa(i)), nil, 0o644))
	}
	ls := &loopingServer{}
	m := mountGoNFSVia(t, srv, nil, func(tr sunrpc.Transport) sunrpc.Transport {
		ls.Transport = tr
		return ls
	})
	done := make(chan error, 1)
	go func() {
		_, err := os.ReadDir(m.path("d"))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, syscall.EIO) {
			t.Fatalf("listing a directory whose cookies loop: %v, want EIO", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("listing a directory whose cookies loop did not end")
	}
	if ls.rewritten.Load() == 0 {
		t.Fatal("the directory fit one page: the loop was not exercised")
	}
	if calls := m.calls(nfs3.ProcReaddirplus); calls > 10 {
		t.Errorf("%d READDIRPLUS calls before the loop was seen", calls)
	}
	// The mount still works.
	if _, err := os.Stat(m.path("d")); err != nil {
		t.Fatal(err)
	}
}

// silentServer never answers the calls of one procedure while armed: they
// wait until their context ends.
type silentServer struct {
	sunrpc.Transport
	proc      uint32
	armed     atomic.Bool
	waiting   chan struct{} // one send per call held
	cancelled atomic.Int64
	release   chan struct{} // closed: calls held let go (a failed test's cleanup); nil: never
}

func (s *silentServer) RoundTrip(ctx context.Context, req *sunrpc.Request) (*sunrpc.Reply, error) {
	if _, proc, ok := callProc(req.Head); ok && proc == s.proc && s.armed.Load() {
		select {
		case s.waiting <- struct{}{}:
		default:
		}
		select {
		case <-ctx.Done():
		case <-s.release:
			return nil, errors.New("silentServer: released")
		}
		s.cancelled.Add(1)
		return nil, ctx.Err()
	}
	return s.Transport.RoundTrip(ctx, req)
}

// held waits until a call of the armed procedure is held; ended is the
// result of the process or goroutine that made it, which must not end
// first.
func (s *silentServer) held(t *testing.T, ended <-chan error) {
	t.Helper()
	select {
	case <-s.waiting:
	case err := <-ended:
		t.Fatalf("ended before its call was held: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("no call of the armed procedure reached the server")
	}
}

// TestKillBlockedCaller: a process waiting on an NFS call the server never
// answers (a hard mount of a silent server) is ended by SIGKILL: the FUSE
// interrupt cancels the call.
func TestKillBlockedCaller(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	ss := &silentServer{proc: nfs3.ProcLookup, waiting: make(chan struct{}, 1)}
	m := mountGoNFSVia(t, srv, nil, func(tr sunrpc.Transport) sunrpc.Transport {
		ss.Transport = tr
		return ss
	})
	ss.armed.Store(true)
	cmd := exec.Command("stat", m.path("stuck"))
	check(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	ss.held(t, exited)
	time.Sleep(50 * time.Millisecond)
	check(t, cmd.Process.Signal(syscall.SIGKILL))
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		ss.armed.Store(false)
		m.fsys.Close() // let it go, so the test can end
		t.Fatal("a process blocked on a silent server survived SIGKILL")
	}
	ss.armed.Store(false)
	if ss.cancelled.Load() == 0 {
		t.Error("the held LOOKUP was not cancelled")
	}
	// The mount goes on.
	check(t, os.WriteFile(m.path("after"), []byte("x"), 0o644))
}

// TestCloseEndsRequestCalls: FS.Close ends the NFS calls FUSE requests are
// waiting on (their contexts are not the mount's children: Close reaches
// them through the requests in flight), and a request that comes after
// Close fails at once instead of waiting on the server.
func TestCloseEndsRequestCalls(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	ss := &silentServer{proc: nfs3.ProcLookup, waiting: make(chan struct{}, 1), release: make(chan struct{})}
	m := mountGoNFSVia(t, srv, nil, func(tr sunrpc.Transport) sunrpc.Transport {
		ss.Transport = tr
		return ss
	})
	ss.armed.Store(true)
	defer func() {
		ss.armed.Store(false)
		close(ss.release) // a call Close failed to end must not hold the unmount
	}()
	// syscall.Stat, not os.Stat: a call ended by Close fails the request
	// with EINTR, which os.Stat would retry.
	var st syscall.Stat_t
	statted := make(chan error, 1)
	go func() { statted <- syscall.Stat(m.path("stuck"), &st) }()
	ss.held(t, statted)
	// failed waits for the stat to fail: what ends the wait is what
	// is tested.
	failed := func(what string) {
		t.Helper()
		select {
		case err := <-statted:
			if err == nil {
				t.Fatalf("%s: the stat succeeded", what)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the stat still waits on the server", what)
		}
	}
	check(t, m.fsys.Close())
	failed("a LOOKUP held across FS.Close")
	if ss.cancelled.Load() != 1 {
		t.Errorf("%d held LOOKUPs cancelled, want 1", ss.cancelled.Load())
	}
	// After Close: the request's context is cancelled from the start.
	go func() { statted <- syscall.Stat(m.path("later"), &st) }()
	failed("a request after FS.Close")
}

// TestCallerIdentity: each caller's calls carry its own uid, gid and
// supplementary groups (AUTH_SYS), on a mount other users may enter.
func TestCallerIdentity(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	check(t, os.Chmod(srv.Dir, 0o777))
	m, rec := mountRecorded(t, srv, nil, MountConfig{AllowOther: true})
	// Let the other users reach the mount point.
	check(t, os.Chmod(filepath.Dir(m.dir), 0o755))
	users := []struct {
		uid, gid uint32
		groups   []uint32
	}{
		{1001, 1001, []uint32{2001, 2002}},
		{1002, 1002, nil},
		{0, 0, []uint32{0}},
	}
	for _, u := range users {
		name := "by-" + strconv.Itoa(int(u.uid))
		from := rec.mark()
		cmd := exec.Command("mkdir", m.path(name))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: u.groups}}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("mkdir as %d: %v: %s", u.uid, err, out)
		}
		creates := rec.since(from, nfs3.ProcMkdir)
		if len(creates) != 1 {
			t.Fatalf("mkdir as %d: %d MKDIRs", u.uid, len(creates))
		}
		a, err := sunrpc.ParseAuthSys(creates[0].cred)
		if err != nil {
			t.Fatalf("MKDIR for uid %d: credential %v: %v", u.uid, creates[0].cred.Flavor, err)
		}
		want := u.groups
		if u.uid == 0 {
			want = []uint32{0}
		}
		if a.UID != u.uid || a.GID != u.gid || !slices.Equal(a.GIDs, want) {
			t.Errorf("MKDIR by uid %d gid %d groups %v carried uid %d gid %d groups %v", u.uid, u.gid, u.groups, a.UID, a.GID, a.GIDs)
		}
	}
}

// TestNameTooLong: a name longer than the server's name_max is
// ENAMETOOLONG, with no call.
func TestNameTooLong(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	m, rec := mountRecorded(t, srv, nil, MountConfig{})
	from := rec.mark()
	long := strings.Repeat("n", int(m.fsys.nameMax)+1)
	for what, err := range map[string]error{
		"create": os.WriteFile(m.path(long), nil, 0o644),
		"mkdir":  os.Mkdir(m.path(long), 0o755),
		"stat":   func() error { _, err := os.Stat(m.path(long)); return err }(),
	} {
		if !errors.Is(err, syscall.ENAMETOOLONG) {
			t.Errorf("%s of a %d-byte name: %v, want ENAMETOOLONG", what, len(long), err)
		}
	}
	if n := len(rec.since(from, nfs3.ProcLookup)) + len(rec.since(from, nfs3.ProcCreate)) + len(rec.since(from, nfs3.ProcMkdir)); n != 0 {
		t.Errorf("%d calls for over-long names", n)
	}
	// A name of exactly name_max is fine.
	check(t, os.WriteFile(m.path(long[1:]), nil, 0o644))
}
