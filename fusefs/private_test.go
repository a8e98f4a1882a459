package fusefs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// TestPrivateDirRoot: on a mount other users may enter, root's path walk
// through a directory that does not let others search it reaches the
// server with root's credential, so that a squashing server's refusal is
// root's EACCES (and not the name another user just looked up, from the
// kernel's caches); the owner's walks there cost FUSE requests but no
// call; directories others may search keep the kernel's caches.
func TestPrivateDirRoot(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	check(t, os.Chmod(srv.Dir, 0o755))
	for name, mode := range map[string]os.FileMode{"priv": 0o700, "pub": 0o755} {
		d := filepath.Join(srv.Dir, name)
		check(t, os.Mkdir(d, mode))
		check(t, os.Chmod(d, mode))
		check(t, os.WriteFile(filepath.Join(d, "f"), []byte("x"), 0o644))
		check(t, os.Chown(d, 1001, 1001))
		check(t, os.Chown(filepath.Join(d, "f"), 1001, 1001))
	}
	m, rec := mountRecorded(t, srv, nil, MountConfig{AllowOther: true})
	check(t, os.Chmod(filepath.Dir(m.dir), 0o755))
	// The server squashes root: every LOOKUP of root's is refused.
	rec.mu.Lock()
	rec.refuse = func(c sentCall) bool {
		a, err := sunrpc.ParseAuthSys(c.cred)
		return c.proc == nfs3.ProcLookup && err == nil && a.UID == 0
	}
	rec.mu.Unlock()
	asOwner := func(times int, p string) {
		t.Helper()
		cmd := exec.Command("sh", "-c", `i=0; while [ $i -lt `+strconv.Itoa(times)+` ]; do stat -c %i "$0" >/dev/null || exit 1; i=$((i+1)); done`, p)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1001}}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("stat %s as the owner: %v: %s", p, err, out)
		}
	}
	// count returns the FUSE LOOKUPs and the NFS LOOKUP calls fn made.
	count := func(fn func()) (fuseLookups uint64, calls int) {
		ev := m.fsys.Events()[evLookup]
		from := rec.mark()
		fn()
		return m.fsys.Events()[evLookup] - ev, len(rec.since(from, nfs3.ProcLookup))
	}
	const n = 5
	priv, pub := m.path("priv/f"), m.path("pub/f")
	asOwner(1, priv)
	asOwner(1, pub)

	l, c := count(func() { asOwner(n, priv) })
	t.Logf("owner, %d stats in the 0700 directory: %d FUSE LOOKUPs, %d LOOKUP calls", n, l, c)
	if l < n || c != 0 {
		t.Errorf("owner's %d stats in the 0700 directory: %d FUSE LOOKUPs (want >= %d: the kernel keeps no entry), %d calls (want 0)", n, l, n, c)
	}
	l, c = count(func() { asOwner(n, pub) })
	t.Logf("owner, %d stats in the 0755 directory: %d FUSE LOOKUPs, %d LOOKUP calls", n, l, c)
	if l != 0 || c != 0 {
		t.Errorf("owner's %d stats in the 0755 directory: %d FUSE LOOKUPs, %d calls (want 0, 0: the kernel's caches)", n, l, c)
	}
	l, c = count(func() {
		for range n {
			if _, err := os.Lstat(pub); err != nil {
				t.Errorf("root's lstat in the 0755 directory: %v", err)
			}
		}
	})
	if l != 0 || c != 0 {
		t.Errorf("root's %d stats in the 0755 directory: %d FUSE LOOKUPs, %d calls (want 0, 0)", n, l, c)
	}
	l, c = count(func() {
		for range n {
			if _, err := os.Lstat(priv); !errors.Is(err, syscall.EACCES) {
				t.Errorf("root's lstat in the 0700 directory of a squashing server: %v, want EACCES", err)
			}
		}
	})
	t.Logf("root, %d stats in the 0700 directory: %d FUSE LOOKUPs, %d LOOKUP calls", n, l, c)
	if c != 1 {
		t.Errorf("root's %d refused stats made %d LOOKUP calls, want 1 (the refusal is kept while the directory's attributes are)", n, c)
	}
	// The owner still reaches its file.
	asOwner(1, priv)
	// A missing name: root is refused too, not told ENOENT.
	if _, err := os.Lstat(m.path("priv/missing")); !errors.Is(err, syscall.EACCES) {
		t.Errorf("root's lstat of a missing name in the 0700 directory: %v, want EACCES", err)
	}
}

// TestPrivateDirMadeByRoot: a 0700 directory root makes (tar -x makes
// its directories 0700 and sets their modes at the end) is root's own on
// the server, squashed or not (the server squashes root here: its
// creations come back owned by the anonymous uid): root may search it, and
// its work in it needs no LOOKUP call to learn that. The kernel keeps no
// entry there (other users would walk them): a FUSE LOOKUP per walk,
// answered without a call.
func TestPrivateDirMadeByRoot(t *testing.T) {
	srv := startGoNFS(t, backendDiskSquashed)
	check(t, os.Chmod(srv.Dir, 0o755))
	m, rec := mountRecorded(t, srv, nil, MountConfig{AllowOther: true})
	check(t, os.Chmod(filepath.Dir(m.dir), 0o755))
	// In a directory this mount made, whose names it knows (as tar -x
	// into a fresh directory).
	check(t, os.Mkdir(m.path("top"), 0o755))
	from := rec.mark()
	var l uint64
	const dirs, files = 3, 3
	for i := range dirs {
		d := m.path("top/d" + strconv.Itoa(i))
		check(t, os.Mkdir(d, 0o700))
		for j := range files {
			l += fuseLookups(m, func() {
				check(t, os.WriteFile(filepath.Join(d, "f"+strconv.Itoa(j)), []byte("x"), 0o644))
				if _, err := os.Lstat(filepath.Join(d, "f"+strconv.Itoa(j))); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
	if got := rec.since(from, nfs3.ProcLookup); len(got) != 0 {
		t.Errorf("root making files in 0700 directories it made: %d LOOKUP calls, want 0", len(got))
	}
	if l > 2*dirs*files {
		t.Errorf("root making and statting files in 0700 directories it made on a squashing server: %d FUSE LOOKUPs, want at most %d (one per walk)", l, 2*dirs*files)
	}
}

// fuseLookups returns the FUSE LOOKUP requests fn made.
func fuseLookups(m *mounted, fn func()) uint64 {
	ev := m.fsys.Events()[evLookup]
	fn()
	return m.fsys.Events()[evLookup] - ev
}

// makeAndStat makes the file p and stats it times times, as root: the
// FUSE LOOKUPs of cp -a's work in p's directory.
func makeAndStat(t *testing.T, m *mounted, p string, times int) uint64 {
	t.Helper()
	return fuseLookups(m, func() {
		check(t, os.WriteFile(p, []byte("x"), 0o644))
		for range times {
			if _, err := os.Lstat(p); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// topAnswered returns a check of whether root's work in the mount's 0700
// directory "top" is answered without a LOOKUP call with root's credential
// (root's search of it known), each time with a new file made and statted
// 3 times.
func topAnswered(t *testing.T, m *mounted, rec *recorder) func(what string, want bool) {
	const stats = 3
	file := 0
	return func(what string, want bool) {
		t.Helper()
		file++
		from := rec.mark()
		makeAndStat(t, m, m.path("top/f"+strconv.Itoa(file)), stats)
		n := rootLookupCalls(rec, from)
		t.Logf("%s: a file made and statted %d times: %d LOOKUP calls as root", what, stats, n)
		if got := n == 0; got != want {
			t.Errorf("%s: a file made in a 0700 directory and statted %d times: %d LOOKUP calls as root; want none %v", what, stats, n, want)
		}
	}
}

// rootLookupCalls returns the LOOKUP calls with root's credential recorded
// from index from on.
func rootLookupCalls(rec *recorder, from int) (n int) {
	for _, c := range rec.since(from, nfs3.ProcLookup) {
		if a, err := sunrpc.ParseAuthSys(c.cred); err == nil && a.UID == 0 {
			n++
		}
	}
	return n
}

// TestPrivateDirRootUnsquashed: a 0700 directory root makes (cp -a and
// tar -x make each one so, and set its mode at the end) is root's to
// search: root's path walks through it cost no call (a FUSE LOOKUP each:
// the kernel keeps no entry there, which other users would walk).
func TestPrivateDirRootUnsquashed(t *testing.T) {
	srv := startGoNFS(t, backendDisk) // go-nfs makes root's objects root's
	check(t, os.Chmod(srv.Dir, 0o755))
	m, rec := mountRecorded(t, srv, nil, MountConfig{AllowOther: true})
	check(t, os.Chmod(filepath.Dir(m.dir), 0o755))
	check(t, os.Mkdir(m.path("top"), 0o700))
	check(t, os.Mkdir(m.path("top/d"), 0o700))
	const n, stats = 10, 3
	from := rec.mark()
	var l uint64
	for i := range n {
		l += makeAndStat(t, m, m.path("top/d/f"+strconv.Itoa(i)), stats)
	}
	t.Logf("%d files made and statted %d times each in 0700 directories: %d FUSE LOOKUPs", n, stats, l)
	// Two private directories on each walk.
	if l > 2*n*(1+stats) {
		t.Errorf("%d files made and statted %d times each in 0700 directories: %d FUSE LOOKUPs, want at most %d (one per private directory walked)", n, stats, l, 2*n*(1+stats))
	}
	if c := len(rec.since(from, nfs3.ProcLookup)); c != 0 {
		t.Errorf("%d LOOKUP calls, want 0", c)
	}
}

// TestPrivateDirSquashSwitched: root's verdict on a directory is that
// directory's own, as the Linux client's ACCESS replies are kept per
// inode: root's mkdir (owned by uid 0: the server did not squash root)
// says nothing of another user's 0700 directory. Once the export squashes
// root, the owner's walk there leaves the kernel no entry for root to use,
// and root's stat is refused (EACCES) as on the Linux client. Root's walks
// in the directory it made are answered without a call while its verdict
// holds, and root's search is asked again once its attributes time out.
func TestPrivateDirSquashSwitched(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	check(t, os.Chmod(srv.Dir, 0o755))
	d := filepath.Join(srv.Dir, "priv")
	check(t, os.Mkdir(d, 0o700))
	check(t, os.Chmod(d, 0o700))
	check(t, os.WriteFile(filepath.Join(d, "f"), []byte("x"), 0o644))
	check(t, os.Chown(d, 1001, 1001))
	check(t, os.Chown(filepath.Join(d, "f"), 1001, 1001))
	var skew atomic.Int64
	m, rec := mountRecordedSetup(t, srv, nil, MountConfig{AllowOther: true}, func(f *FS) {
		f.now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	})
	check(t, os.Chmod(filepath.Dir(m.dir), 0o755))
	check(t, os.Mkdir(m.path("top"), 0o700))
	public := topAnswered(t, m, rec)
	public("root's own directory", true)

	// exportfs -o root_squash: root's LOOKUPs refused.
	refuseRoot := func(on bool) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		rec.refuse = nil
		if on {
			rec.refuse = func(c sentCall) bool {
				a, err := sunrpc.ParseAuthSys(c.cred)
				return c.proc == nfs3.ProcLookup && err == nil && a.UID == 0
			}
		}
	}
	refuseRoot(true)
	cmd := exec.Command("stat", "-c", "%i", m.path("priv/f"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1001}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("stat as the owner: %v: %s", err, out)
	}
	if _, err := os.Lstat(m.path("priv/f")); !errors.Is(err, syscall.EACCES) {
		t.Errorf("root's lstat in another user's 0700 directory, root squashed since its mkdir elsewhere: %v, want EACCES", err)
	}
	public("root's own directory, its verdict held", true)

	refuseRoot(false)
	rootLookups := func(from int) int { return rootLookupCalls(rec, from) }
	from := rec.mark()
	makeAndStat(t, m, m.path("top/before"), 3)
	if n := rootLookups(from); n != 0 {
		t.Errorf("root's work in its own directory while its verdict holds: %d LOOKUP calls, want 0", n)
	}
	skew.Add(int64(m.fsys.opts.AcDirMax + 5*time.Second))
	from = rec.mark()
	makeAndStat(t, m, m.path("top/after"), 3)
	if n := rootLookups(from); n == 0 {
		t.Errorf("root's work in its own directory past its attribute timeout: no LOOKUP call, want root's search asked again")
	}
}
