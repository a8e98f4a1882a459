package fusefs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

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

// TestPrivateDirMadeByRoot: a private directory root makes (tar -x makes
// its directories 0700 and sets their modes at the end) is root's own on
// the server, squashed or not: root's work in it needs no LOOKUP to learn
// that it may search it.
func TestPrivateDirMadeByRoot(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	check(t, os.Chmod(srv.Dir, 0o755))
	m, rec := mountRecorded(t, srv, nil, MountConfig{AllowOther: true})
	check(t, os.Chmod(filepath.Dir(m.dir), 0o755))
	// In a directory this mount made, whose names it knows (as tar -x
	// into a fresh directory).
	check(t, os.Mkdir(m.path("top"), 0o755))
	from := rec.mark()
	for i := range 3 {
		d := m.path("top/d" + strconv.Itoa(i))
		check(t, os.Mkdir(d, 0o700))
		for j := range 3 {
			check(t, os.WriteFile(filepath.Join(d, "f"+strconv.Itoa(j)), []byte("x"), 0o644))
			if _, err := os.Lstat(filepath.Join(d, "f"+strconv.Itoa(j))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := rec.since(from, nfs3.ProcLookup); len(got) != 0 {
		t.Errorf("root making files in 0700 directories it made: %d LOOKUP calls, want 0", len(got))
	}
}
