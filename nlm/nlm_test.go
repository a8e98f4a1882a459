package nlm_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/nlm"
	"github.com/nfsrdma/nfsrdma/nlm/nlmtest"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

func TestXDRLockArgs(t *testing.T) {
	a := nlm.LockArgs{Cookie: []byte{1, 2, 3}, Block: true, Exclusive: true, Reclaim: true, State: 7,
		Lock: nlm.Lock{CallerName: "host", FH: []byte{9, 9, 9, 9, 9}, OH: []byte("oh"), Svid: 42, Start: 10, End: nlm.ToEOF}}
	b := nlm.AppendLockArgs(nil, &a)
	want := []byte{
		0, 0, 0, 3, 1, 2, 3, 0, // cookie
		0, 0, 0, 1, // block
		0, 0, 0, 1, // exclusive
		0, 0, 0, 4, 'h', 'o', 's', 't', // caller_name
		0, 0, 0, 5, 9, 9, 9, 9, 9, 0, 0, 0, // fh
		0, 0, 0, 2, 'o', 'h', 0, 0, // oh
		0, 0, 0, 42, // svid
		0, 0, 0, 0, 0, 0, 0, 10, // l_offset
		0, 0, 0, 0, 0, 0, 0, 0, // l_len 0: to the end of the file
		0, 0, 0, 1, // reclaim
		0, 0, 0, 7, // state
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("encoded\n%v\nwant\n%v", b, want)
	}
	d := sunrpc.NewDecoder(b)
	got := nlm.DecodeLockArgs(d)
	if d.Err() != nil || d.Len() != 0 {
		t.Fatalf("decode: %v, %d left", d.Err(), d.Len())
	}
	if !bytes.Equal(got.Cookie, a.Cookie) || got.Lock.CallerName != "host" || got.Lock.Svid != 42 ||
		got.Lock.Start != 10 || got.Lock.End != nlm.ToEOF || !got.Reclaim || got.State != 7 || !got.Block || !got.Exclusive {
		t.Fatalf("round trip: %+v", got)
	}
}

func TestXDRRanges(t *testing.T) {
	for _, tc := range []struct {
		start, end uint64
		len        uint64
	}{
		{0, nlm.ToEOF, 0},
		{0, 0, 1},
		{100, 199, 100},
		{1 << 40, 1<<40 + 4095, 4096},
	} {
		a := nlm.UnlockArgs{Lock: nlm.Lock{Start: tc.start, End: tc.end}}
		b := nlm.AppendUnlockArgs(nil, &a)
		if l := b[len(b)-8:]; !bytes.Equal(l, sunrpc.AppendUint64(nil, tc.len)) {
			t.Errorf("%d-%d: l_len %v, want %d", tc.start, tc.end, l, tc.len)
		}
		got := nlm.DecodeUnlockArgs(sunrpc.NewDecoder(b))
		if got.Lock.Start != tc.start || got.Lock.End != tc.end {
			t.Errorf("%d-%d came back as %d-%d", tc.start, tc.end, got.Lock.Start, got.Lock.End)
		}
	}
	// A range whose end overflows is to the end of the file.
	b := sunrpc.AppendUint64(sunrpc.AppendUint64(nil, 1<<63), 1<<63)
	var l []byte
	l = sunrpc.AppendString(l, "h")
	l = sunrpc.AppendOpaque(l, nil)
	l = sunrpc.AppendOpaque(l, nil)
	l = sunrpc.AppendInt32(l, 1)
	got := nlm.DecodeLock(sunrpc.NewDecoder(append(l, b...)))
	if got.End != nlm.ToEOF {
		t.Errorf("overflowing range ends at %d", got.End)
	}
}

func TestXDRTestRes(t *testing.T) {
	r := nlm.TestRes{Cookie: []byte("c"), Stat: nlm.Denied, Holder: &nlm.Holder{Exclusive: true, Svid: -3, OH: []byte("x"), Start: 5, End: 9}}
	d := sunrpc.NewDecoder(nlm.AppendTestRes(nil, &r))
	got := nlm.DecodeTestRes(d)
	if d.Err() != nil || d.Len() != 0 || got.Stat != nlm.Denied || got.Holder == nil || !bytes.Equal(got.Holder.OH, []byte("x")) {
		t.Fatalf("round trip: %+v %+v err %v", got, got.Holder, d.Err())
	}
	if got.Holder.Svid != -3 || got.Holder.Start != 5 || got.Holder.End != 9 || !got.Holder.Exclusive {
		t.Fatalf("holder %+v", got.Holder)
	}
	// GRANTED carries no holder.
	d = sunrpc.NewDecoder(nlm.AppendTestRes(nil, &nlm.TestRes{Stat: nlm.Granted}))
	if got := nlm.DecodeTestRes(d); got.Holder != nil || d.Len() != 0 {
		t.Fatalf("granted: %+v, %d left", got, d.Len())
	}
	// A truncated reply is an error, not a panic.
	b := nlm.AppendTestRes(nil, &r)
	for n := range len(b) {
		d := sunrpc.NewDecoder(b[:n])
		nlm.DecodeTestRes(d)
		if d.Err() == nil {
			t.Fatalf("truncated at %d: no error", n)
		}
	}
}

func TestStatErrno(t *testing.T) {
	for st, want := range map[nlm.Stat]syscall.Errno{
		nlm.Denied: syscall.EAGAIN, nlm.DeniedNoLocks: syscall.ENOLCK, nlm.Deadlock: syscall.EDEADLK,
		nlm.ReadOnlyFS: syscall.EROFS, nlm.StaleFH: syscall.ESTALE, nlm.FileTooBig: syscall.EOVERFLOW, nlm.Failed: syscall.ENOLCK,
	} {
		if st.Errno() != want || !errors.Is(st, want) {
			t.Errorf("%v: errno %v, want %v", st, st.Errno(), want)
		}
	}
}

// locker returns a Locker of caller name on s.
func locker(t *testing.T, s *nlmtest.Server, name string) *nlm.Locker {
	t.Helper()
	c, err := nlm.NewClient(nlm.Config{Server: "127.0.0.1", Portmapper: s.Portmapper(), CallerName: name,
		TCP: sunrpc.TCPOptions{NoResvPort: true}, CallTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l := nlm.NewLocker(c, nlm.LockerConfig{RetryInterval: 50 * time.Millisecond, MonitorInterval: 100 * time.Millisecond, LocalStatd: s.Portmapper(),
		RpcbindSocket: s.RpcbindSocket()})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l.Close(ctx)
		c.Close()
	})
	return l
}

var fh = []byte("file-handle-1")

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestLockExcludesOtherOwners(t *testing.T) {
	s := nlmtest.Serve(t)
	a := locker(t, s, "a")
	b := locker(t, s, "b")
	if err := a.Lock(ctx(t), fh, 1, nlm.Request{Start: 0, End: 99, Exclusive: true, Pid: 100}, false); err != nil {
		t.Fatal(err)
	}
	// Another client, and another owner of the same client, are refused.
	err := b.Lock(ctx(t), fh, 1, nlm.Request{Start: 50, End: 60}, false)
	if !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("other client's lock: %v, want EAGAIN", err)
	}
	err = a.Lock(ctx(t), fh, 2, nlm.Request{Start: 50, End: 60}, false)
	if !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("other owner's lock: %v, want EAGAIN", err)
	}
	// The same owner converts its own lock; beyond the range is free.
	if err := a.Lock(ctx(t), fh, 1, nlm.Request{Start: 10, End: 19}, false); err != nil {
		t.Fatal(err)
	}
	if err := b.Lock(ctx(t), fh, 1, nlm.Request{Start: 100, End: nlm.ToEOF, Exclusive: true}, false); err != nil {
		t.Fatal(err)
	}
	want := []nlm.Request{{Start: 0, End: 9, Exclusive: true}, {Start: 10, End: 19}, {Start: 20, End: 99, Exclusive: true}}
	if got := a.Held(fh, 1); !slices.Equal(got, want) {
		t.Fatalf("held %v, want %v", got, want)
	}
	if n := len(s.Locks()); n != 4 {
		t.Fatalf("server holds %d locks, want 4: %v", n, s.Locks())
	}
	// F_GETLK: a local holder is named by its pid, a remote one is not.
	c, err := a.Test(ctx(t), fh, 2, nlm.Request{Start: 5, End: 5, Exclusive: true})
	if err != nil || c == nil || c.Pid != 100 || !c.Exclusive || c.Start != 0 || c.End != 9 {
		t.Fatalf("test: %+v %v", c, err)
	}
	c, err = a.Test(ctx(t), fh, 2, nlm.Request{Start: 200, End: 300})
	if err != nil || c == nil || c.Pid != 0 || c.End != nlm.ToEOF {
		t.Fatalf("test of the other client's lock: %+v %v", c, err)
	}
	if c, err := a.Test(ctx(t), fh, 2, nlm.Request{Start: 10, End: 19}); err != nil || c != nil {
		t.Fatalf("read lock over a read lock: conflict %+v %v", c, err)
	}
	// Unlock a piece, then the owner's close gives back the rest.
	if err := a.Unlock(ctx(t), fh, 1, 0, 9); err != nil {
		t.Fatal(err)
	}
	if err := b.Lock(ctx(t), fh, 2, nlm.Request{Start: 0, End: 9, Exclusive: true}, false); err != nil {
		t.Fatalf("after unlock: %v", err)
	}
	if err := a.ReleaseOwner(ctx(t), fh, 1); err != nil {
		t.Fatal(err)
	}
	if got := a.Held(fh, 1); got != nil || !a.Asked(fh) {
		t.Fatalf("after release: held %v", got)
	}
	if err := a.ReleaseOwner(ctx(t), fh, 2); err != nil || a.Asked(fh) {
		t.Fatalf("owner 2 (which asked, and was refused) released: %v, file still listed %v", err, a.Asked(fh))
	}
	for _, l := range s.Locks() {
		if l.Owner.Caller == "a" {
			t.Fatalf("server still holds %v", l)
		}
	}
}

func TestSvidsDistinct(t *testing.T) {
	s := nlmtest.Serve(t)
	a := locker(t, s, "a")
	for id := range uint64(50) {
		if err := a.Lock(ctx(t), fh, id, nlm.Request{Start: id, End: id, Exclusive: true}, false); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[int32]bool{}
	for _, l := range s.Locks() {
		if seen[l.Owner.Svid] || l.Owner.Svid < 1<<30 {
			t.Fatalf("svid %d reused or in the kernel client's range", l.Owner.Svid)
		}
		seen[l.Owner.Svid] = true
	}
}

func TestBlockingLockGrantedWhenFreed(t *testing.T) {
	s := nlmtest.Serve(t)
	a := locker(t, s, "a")
	other := nlmtest.Owner{Caller: "other", Svid: 7}
	s.SetLock(nlmtest.HeldLock{FH: string(fh), Owner: other, Start: 0, End: nlm.ToEOF, Exclusive: true})
	done := make(chan error, 1)
	go func() { done <- a.Lock(ctx(t), fh, 1, nlm.Request{Start: 0, End: nlm.ToEOF, Exclusive: true}, true) }()
	deadline := time.Now().Add(5 * time.Second)
	for s.Blocked() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no blocked LOCK at the server")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("granted while held: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	s.ClearLocks(other)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not granted after the holder unlocked")
	}
	if got := a.Held(fh, 1); len(got) != 1 {
		t.Fatalf("held %v", got)
	}
}

func TestBlockingLockCancelled(t *testing.T) {
	s := nlmtest.Serve(t)
	a := locker(t, s, "a")
	s.SetLock(nlmtest.HeldLock{FH: string(fh), Owner: nlmtest.Owner{Caller: "other", Svid: 7}, Start: 0, End: 0, Exclusive: true})
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Lock(c, fh, 1, nlm.Request{Start: 0, End: 0, Exclusive: true}, true) }()
	time.Sleep(300 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("interrupted lock: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("interrupted lock still waits")
	}
	if s.Cancels() != 1 || s.Blocked() != 0 {
		t.Fatalf("%d CANCELs, %d blocked at the server", s.Cancels(), s.Blocked())
	}
}

func uidOf(t *testing.T, cred sunrpc.OpaqueAuth) uint32 {
	t.Helper()
	a, err := sunrpc.ParseAuthSys(cred)
	if err != nil {
		t.Fatal(err)
	}
	return a.UID
}

func TestReclaimAfterRestart(t *testing.T) {
	s := nlmtest.Serve(t)
	a := locker(t, s, "a")
	user := sunrpc.AuthSys{MachineName: "a", UID: 1000, GID: 1000}
	cred, err := user.Credential()
	if err != nil {
		t.Fatal(err)
	}
	// The caller's credential goes with its LOCK, and with the reclaim.
	if err := a.Lock(sunrpc.WithCredential(ctx(t), cred), fh, 1, nlm.Request{Start: 0, End: 9, Exclusive: true}, false); err != nil {
		t.Fatal(err)
	}
	if uid := uidOf(t, s.Cred(nlm.ProcLock)); uid != 1000 {
		t.Fatalf("LOCK sent as uid %d", uid)
	}
	if err := a.Lock(sunrpc.WithCredential(ctx(t), cred), fh, 2, nlm.Request{Start: 20, End: 29}, false); err != nil {
		t.Fatal(err)
	}
	oldPort := s.Port()
	s.Restart()
	if s.Port() == oldPort || len(s.Locks()) != 0 {
		t.Fatal("restart did not move the port or keep no lock")
	}
	deadline := time.Now().Add(s.Grace)
	for len(s.Locks()) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("locks not reclaimed within the grace period: %v", s.Locks())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s.Reclaims() != 2 || a.Reclaims() < 1 {
		t.Fatalf("%d reclaims at the server, %d rounds", s.Reclaims(), a.Reclaims())
	}
	if uid := uidOf(t, s.Cred(nlm.ProcLock)); uid != 1000 {
		t.Fatalf("reclaim sent as uid %d", uid)
	}
	// A new lock of another client waits for the grace period to end.
	b := locker(t, s, "b")
	start := time.Now()
	err = b.Lock(ctx(t), fh, 1, nlm.Request{Start: 100, End: 100, Exclusive: true}, false)
	if err != nil || time.Since(start) < 500*time.Millisecond {
		t.Fatalf("lock in the grace period: %v after %v", err, time.Since(start))
	}
	if err := b.Lock(ctx(t), fh, 1, nlm.Request{Start: 5, End: 5}, false); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("reclaimed lock not enforced: %v", err)
	}
}

func TestCloseUnlocksAll(t *testing.T) {
	s := nlmtest.Serve(t)
	c, err := nlm.NewClient(nlm.Config{Server: "127.0.0.1", Portmapper: s.Portmapper(), CallerName: "a", TCP: sunrpc.TCPOptions{NoResvPort: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a := nlm.NewLocker(c, nlm.LockerConfig{LocalStatd: s.Portmapper()})
	for i := range uint64(3) {
		if err := a.Lock(ctx(t), []byte{byte(i)}, i, nlm.Request{Start: 0, End: nlm.ToEOF, Exclusive: true}, false); err != nil {
			t.Fatal(err)
		}
	}
	if len(s.Locks()) != 3 {
		t.Fatalf("%v", s.Locks())
	}
	if err := a.Close(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if len(s.Locks()) != 0 {
		t.Fatalf("after Close the server holds %v", s.Locks())
	}
}

// TestReclaimLost: a reclaim the server refuses (another client holds the
// range) and a reclaim after the grace period ended (the server's NSM
// state shows it restarted) are lost: dropped from the record and
// reported to OnLost with their file and owner; a lock reclaimed in time
// is not.
func TestReclaimLost(t *testing.T) {
	s := nlmtest.Serve(t)
	a := locker(t, s, "a")
	type lostLock struct {
		fh    string
		owner uint64
	}
	lostc := make(chan lostLock, 4)
	a.OnLost(func(fh []byte, owner uint64) { lostc <- lostLock{string(fh), owner} })
	fh2 := []byte("file-handle-2")
	if err := a.Lock(ctx(t), fh, 1, nlm.Request{Start: 0, End: 9, Exclusive: true}, false); err != nil {
		t.Fatal(err)
	}
	if err := a.Lock(ctx(t), fh2, 2, nlm.Request{Start: 0, End: 9, Exclusive: true}, false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the monitor learns the server's NSM state
	// Refused: another client took fh's range in the grace period.
	s.Restart()
	s.SetLock(nlmtest.HeldLock{FH: string(fh), Owner: nlmtest.Owner{Caller: "b", Svid: 9}, Start: 5, End: 5, Exclusive: true})
	select {
	case got := <-lostc:
		if got != (lostLock{string(fh), 1}) {
			t.Fatalf("lost %+v, want fh's lock of owner 1", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a refused reclaim was not reported lost")
	}
	for deadline := time.Now().Add(5 * time.Second); a.Reclaims() < 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no reclaim round")
		}
	}
	if a.Lost() != 1 || len(a.Held(fh, 1)) != 0 || len(a.Held(fh2, 2)) != 1 {
		t.Fatalf("lost %d; held on fh %v, on fh2 %v", a.Lost(), a.Held(fh, 1), a.Held(fh2, 2))
	}
	// Missed: the server restarts with no grace period at all.
	s.ClearLocks(nlmtest.Owner{Caller: "b", Svid: 9})
	time.Sleep(s.Grace) // the first grace period ends
	s.Grace = 0
	s.Restart()
	select {
	case got := <-lostc:
		if got != (lostLock{string(fh2), 2}) {
			t.Fatalf("lost %+v, want fh2's lock of owner 2", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a reclaim after the grace period was not reported lost")
	}
	if len(s.Locks()) != 0 {
		t.Fatalf("the server holds %v after the missed grace", s.Locks())
	}
}

// TestRebootNotification: while a Locker holds locks, the local statd
// monitors the server for it (SM_MON naming a callback registered with
// rpcbind's local socket, program NLM and procedure 16 as rpc.statd
// demands); statd's callback after the server's SM_NOTIFY starts the
// reclaim at once, long before the poll; the last unlock ends the
// monitoring (SM_UNMON, callback unregistered).
func TestRebootNotification(t *testing.T) {
	s := nlmtest.Serve(t)
	c, err := nlm.NewClient(nlm.Config{Server: "127.0.0.1", Portmapper: s.Portmapper(), CallerName: "a",
		TCP: sunrpc.TCPOptions{NoResvPort: true}, CallTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const poll = time.Minute
	a := nlm.NewLocker(c, nlm.LockerConfig{RetryInterval: 50 * time.Millisecond, MonitorInterval: poll,
		LocalStatd: s.Portmapper(), RpcbindSocket: s.RpcbindSocket()})
	defer a.Close(ctx(t))
	if err := a.Lock(ctx(t), fh, 1, nlm.Request{Start: 0, End: 9, Exclusive: true}, false); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "SM_MON", func() bool { return a.Notifying() && len(s.Monitors()) == 1 })
	m := s.Monitors()[0]
	if m.Name != "127.0.0.1" || m.Prog != nlm.Program || m.Proc != 16 || m.Vers < 1<<30 {
		t.Fatalf("monitor %+v", m)
	}
	if port, ok := s.Mappings()[sunrpc.Mapping{Prog: nlm.Program, Vers: m.Vers, Prot: sunrpc.IPProtoUDP}]; !ok || port == 0 {
		t.Fatalf("callback not registered (UDP) with rpcbind: %v", s.Mappings())
	}
	s.Restart()
	start := time.Now()
	if n := s.Notify("127.0.0.1", s.State()); n != 1 {
		t.Fatalf("%d callbacks answered, want 1", n)
	}
	waitUntil(t, "the reclaim", func() bool { return len(s.Locks()) == 1 })
	took := time.Since(start)
	t.Logf("lock reclaimed %v after the notification (poll interval %v)", took.Round(time.Millisecond), poll)
	if took > 5*time.Second || a.Reclaims() != 1 || s.Reclaims() != 1 || a.Lost() != 0 {
		t.Fatalf("after %v: %d rounds, %d reclaims at the server, %d lost", took, a.Reclaims(), s.Reclaims(), a.Lost())
	}
	// Another host's notification, or a callback with another cookie,
	// starts nothing.
	if n := s.Notify("elsewhere", 99); n != 0 {
		t.Fatalf("%d callbacks for a host not monitored", n)
	}
	time.Sleep(s.Grace) // UNLOCK is refused in the grace period
	if err := a.ReleaseFile(ctx(t), fh); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "SM_UNMON", func() bool { return !a.Notifying() && len(s.Monitors()) == 0 })
	if _, ok := s.Mappings()[sunrpc.Mapping{Prog: nlm.Program, Vers: m.Vers, Prot: sunrpc.IPProtoUDP}]; ok {
		t.Fatal("callback still registered after SM_UNMON")
	}
}

// TestRebootNotificationUnavailable: with no statd to take SM_MON, the
// Locker falls back to polling, which still finds the restart.
func TestRebootNotificationUnavailable(t *testing.T) {
	s := nlmtest.Serve(t)
	c, err := nlm.NewClient(nlm.Config{Server: "127.0.0.1", Portmapper: s.Portmapper(), CallerName: "a",
		TCP: sunrpc.TCPOptions{NoResvPort: true}, CallTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// No rpcbind socket, and a port mapper that is not there.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	a := nlm.NewLocker(c, nlm.LockerConfig{RetryInterval: 50 * time.Millisecond, MonitorInterval: 100 * time.Millisecond,
		LocalStatd: deadAddr, RpcbindSocket: filepath.Join(t.TempDir(), "none.sock")})
	defer a.Close(ctx(t))
	if err := a.Lock(ctx(t), fh, 1, nlm.Request{Start: 0, End: 9, Exclusive: true}, false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if a.Notifying() || len(s.Monitors()) != 0 {
		t.Fatal("notifications on with no statd")
	}
	s.Restart()
	waitUntil(t, "the polled reclaim", func() bool { return len(s.Locks()) == 1 })
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
