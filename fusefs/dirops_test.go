package fusefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
	"golang.org/x/sys/unix"
)

// opDeltas returns a function giving the calls of each procedure since now.
func opDeltas(m *mounted) func(proc uint32) int {
	before := map[uint32]uint64{}
	for p := range uint32(nfs3.ProcCommit + 1) {
		before[p] = m.calls(p)
	}
	return func(proc uint32) int { return int(m.calls(proc) - before[proc]) }
}

// TestRPCDirOpsInOwnDirectory: in a directory this mount made, mkdir,
// create, rename (Go's os.Rename stats the target first), rmdir and
// unlink cost exactly their own call each: no LOOKUP of the new names
// (the mount knows every name there), no GETATTR (every reply brings the
// attributes), as the Linux client sends them.
func TestRPCDirOpsInOwnDirectory(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	m := mountGoNFS(t, srv, nil)
	top := m.path("top")
	check(t, os.Mkdir(top, 0o755))
	const n = 40
	d := opDeltas(m)
	for i := range n {
		check(t, os.Mkdir(filepath.Join(top, fmt.Sprintf("d%d", i)), 0o755))
		check(t, os.WriteFile(filepath.Join(top, fmt.Sprintf("f%d", i)), []byte("data"), 0o644))
	}
	for i := range n {
		check(t, os.Rename(filepath.Join(top, fmt.Sprintf("f%d", i)), filepath.Join(top, fmt.Sprintf("g%d", i))))
	}
	for i := range n {
		check(t, syscall.Rmdir(filepath.Join(top, fmt.Sprintf("d%d", i))))
		check(t, os.Remove(filepath.Join(top, fmt.Sprintf("g%d", i))))
	}
	want := map[uint32]int{nfs3.ProcMkdir: n, nfs3.ProcCreate: n, nfs3.ProcWrite: n, nfs3.ProcRename: n, nfs3.ProcRmdir: n, nfs3.ProcRemove: n}
	for p := range uint32(nfs3.ProcCommit + 1) {
		got := d(p)
		if p == nfs3.ProcGetattr && got <= n {
			// go-nfs answers a CREATE outside its root without the new
			// file's attributes: one GETATTR each (knfsd sends them).
			continue
		}
		if got != want[p] {
			t.Errorf("%s: %d calls, want %d", nfs3.ProcName(p), got, want[p])
		}
	}
	// Missing names are missing (without a call) and made ones are there.
	if _, err := os.Lstat(filepath.Join(top, "f0")); !os.IsNotExist(err) {
		t.Errorf("lstat of a renamed-away name: %v", err)
	}
	check(t, os.WriteFile(filepath.Join(top, "x"), nil, 0o644))
	if _, err := os.Lstat(filepath.Join(top, "x")); err != nil {
		t.Error(err)
	}
}

// TestRPCRenameCold: renaming files this mount has not seen, in a
// directory it did not make, costs a LOOKUP of each source only until those
// have cost what reading the directory does (listing.go: 2 for a small
// one); then one READDIRPLUS answers the later sources. Each target is a
// LOOKUP (missing names are not taken from a listing), asked once: rename(2)
// does not ask it again. The kernel client sends 2 LOOKUPs per rename.
func TestRPCRenameCold(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	check(t, os.Mkdir(filepath.Join(srv.Dir, "ren"), 0o755))
	const n = 30
	for i := range n {
		check(t, os.WriteFile(filepath.Join(srv.Dir, "ren", fmt.Sprintf("a%d", i)), nil, 0o644))
	}
	m := mountGoNFS(t, srv, nil)
	_, err := os.Stat(m.path("ren"))
	check(t, err)
	d := opDeltas(m)
	for i := range n {
		check(t, os.Rename(m.path(fmt.Sprintf("ren/a%d", i)), m.path(fmt.Sprintf("ren/b%d", i))))
	}
	if l, rp, r, g := d(nfs3.ProcLookup), d(nfs3.ProcReaddirplus), d(nfs3.ProcRename), d(nfs3.ProcGetattr); l != n+2 || rp != 1 || r != n || g != 0 {
		t.Errorf("%d renames: %d LOOKUP, %d READDIRPLUS, %d RENAME, %d GETATTR; want %d, 1, %d, 0", n, l, rp, r, g, n+2, n)
	}
	for i := range n {
		if _, err := os.Stat(filepath.Join(srv.Dir, "ren", fmt.Sprintf("b%d", i))); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNamesOtherClient: a name another client made in a directory this
// mount made is found once the directory's attributes expire, and a
// mkdir of it then fails with EEXIST.
func TestNamesOtherClient(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	o := DefaultOptions()
	o.AcDirMin, o.AcDirMax = 200*time.Millisecond, 200*time.Millisecond
	m := mountGoNFS(t, srv, &o)
	check(t, os.Mkdir(m.path("own"), 0o755))
	check(t, os.Mkdir(m.path("own/mine"), 0o755))
	// Another client (the server's own directory) adds a name.
	check(t, os.WriteFile(filepath.Join(srv.Dir, "own", "theirs"), []byte("x"), 0o644))
	time.Sleep(300 * time.Millisecond)
	if b, err := os.ReadFile(m.path("own/theirs")); err != nil || string(b) != "x" {
		t.Fatalf("read the other client's file: %q, %v", b, err)
	}
	if err := os.Mkdir(m.path("own/theirs2"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A name found missing, then made by the other client, likewise.
	if _, err := os.Lstat(m.path("neg")); !os.IsNotExist(err) {
		t.Fatal(err)
	}
	check(t, os.WriteFile(filepath.Join(srv.Dir, "neg"), nil, 0o644))
	time.Sleep(300 * time.Millisecond)
	if _, err := os.Lstat(m.path("neg")); err != nil {
		t.Errorf("a name another client made after it was found missing: %v", err)
	}
	check(t, os.Mkdir(filepath.Join(srv.Dir, "own", "later"), 0o755))
	time.Sleep(300 * time.Millisecond)
	if err := os.Mkdir(m.path("own/later"), 0o755); !os.IsExist(err) {
		t.Errorf("mkdir of a name another client made: %v, want EEXIST", err)
	}
}

// TestNamesOtherClientNotLookedUp: a name another client made in a
// directory this mount made, never looked up here, is found by its first
// lookup once namesFresh has passed since this mount's last change there,
// with the directory's attributes still trusted (acdirmin 30 s): the Linux
// client, holding no negative entry for it, asks the server.
func TestNamesOtherClientNotLookedUp(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	m := mountGoNFS(t, srv, nil)
	check(t, os.Mkdir(m.path("own"), 0o755))
	check(t, os.WriteFile(m.path("own/mine"), nil, 0o644))
	check(t, os.WriteFile(filepath.Join(srv.Dir, "own", "theirs"), []byte("x"), 0o644))
	time.Sleep(m.fsys.namesFresh() + 100*time.Millisecond)
	if b, err := os.ReadFile(m.path("own/theirs")); err != nil || string(b) != "x" {
		t.Errorf("read the other client's file, never looked up here: %q, %v", b, err)
	}
	// A name found missing is a negative entry: kept while the directory's
	// attributes are (the next lookups ask nothing).
	if _, err := os.Lstat(m.path("own/absent")); !os.IsNotExist(err) {
		t.Fatal(err)
	}
	d := opDeltas(m)
	for range 3 {
		if _, err := os.Lstat(m.path("own/absent")); !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	if l := d(nfs3.ProcLookup); l != 0 {
		t.Errorf("3 lookups of a name found missing: %d LOOKUP, want 0", l)
	}
}

// TestNamesLookupCachePos: with lookupcache=pos, a name another client
// makes in a directory this mount made is found at once, attribute
// timeouts notwithstanding (with lookupcache=all it is found when the
// directory's attributes expire: TestNamesOtherClient).
func TestNamesLookupCachePos(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	o := DefaultOptions()
	o.LookupCache = LookupCachePositive
	o.AcDirMin, o.AcDirMax = time.Minute, time.Minute
	m := mountGoNFS(t, srv, &o)
	check(t, os.Mkdir(m.path("own"), 0o755))
	check(t, os.Mkdir(m.path("own/mine"), 0o755))
	check(t, os.WriteFile(filepath.Join(srv.Dir, "own", "theirs"), []byte("x"), 0o644))
	if b, err := os.ReadFile(m.path("own/theirs")); err != nil || string(b) != "x" {
		t.Fatalf("lookupcache=pos: read the other client's new file at once: %q, %v", b, err)
	}
}

// TestLookupCacheNone: with lookupcache=none a missing name is asked of the
// server each time (no negative entry, no names known).
func TestLookupCacheNone(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	o := DefaultOptions()
	o.LookupCache = LookupCacheNone
	m := mountGoNFS(t, srv, &o)
	check(t, os.Mkdir(m.path("own"), 0o755))
	d := opDeltas(m)
	for range 3 {
		if _, err := os.Lstat(m.path("own/missing")); !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	// Each path walk asks for "own" and for "missing".
	if l := d(nfs3.ProcLookup); l != 6 {
		t.Errorf("3 lstat of own/missing with lookupcache=none: %d LOOKUP, want 6", l)
	}
}

// TestNoCTOOpen: with nocto an open within the attribute timeout sends no
// GETATTR; with cto (the default) it does. (Without the callers'
// identities: root's opens revalidate with their ACCESS instead, see
// TestRootOpenOneCall.)
func TestNoCTOOpen(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	check(t, os.WriteFile(filepath.Join(srv.Dir, "f"), []byte("hello"), 0o644))
	for _, nocto := range []bool{false, true} {
		o := DefaultOptions()
		o.CallerIdentity = false
		o.NoCTO = nocto
		o.AcRegMin, o.AcRegMax = time.Minute, time.Minute
		m := mountGoNFS(t, srv, &o)
		if b, err := os.ReadFile(m.path("f")); err != nil || string(b) != "hello" {
			t.Fatalf("read: %q, %v", b, err)
		}
		time.Sleep(lookupFresh + 100*time.Millisecond) // past the LOOKUP's own revalidation
		d := opDeltas(m)
		for range 3 {
			if b, err := openRead(m.path("f")); err != nil || string(b) != "hello" {
				t.Fatalf("read: %q, %v", b, err)
			}
		}
		want := 3
		if nocto {
			want = 0
		}
		if g := d(nfs3.ProcGetattr); g != want {
			t.Errorf("nocto %v: 3 opens sent %d GETATTR, want %d", nocto, g, want)
		}
	}
}

// openRead opens path, reads it whole and closes it, with no stat:
// os.ReadFile's fstat after the first read's READ would ask for the atime
// that READ moved (as on the kernel client), which is not the open's doing.
func openRead(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// mountRootOpen is the start of the tests of root's opens: a file "f"
// holding "hello" on the server (path: its path there), mounted with
// attributes trusted for ac, and read once as root. The file is another
// user's, so that the rights root is granted (go-nfs grants all) do not
// show whether root is squashed (learnRootRights): root's opens ask.
func mountRootOpen(t *testing.T, ac time.Duration) (m *mounted, path string) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root: what is tested is root's opens (make check and CI run as root)")
	}
	srv := startGoNFS(t, backendDisk)
	path = filepath.Join(srv.Dir, "f")
	check(t, os.WriteFile(path, []byte("hello"), 0o644))
	check(t, os.Chown(path, 1000, 1000))
	o := DefaultOptions()
	o.AcRegMin, o.AcRegMax = ac, ac
	m = mountGoNFS(t, srv, &o)
	if b, err := os.ReadFile(m.path("f")); err != nil || string(b) != "hello" {
		t.Fatalf("read: %q, %v", b, err)
	}
	return m, path
}

// TestRootOpenOneCall: root's open asks the server once: a GETATTR (its
// close-to-open revalidation) where root's rights on the file are known
// from an earlier ACCESS (the file unchanged since), else the ACCESS that
// checks what a squashing server lets root do, whose attributes are that
// revalidation; a change made on the server between two opens is still
// seen by the second, whose rights are then asked again.
func TestRootOpenOneCall(t *testing.T) {
	m, path := mountRootOpen(t, time.Minute)
	time.Sleep(lookupFresh + 100*time.Millisecond) // past the LOOKUP's own revalidation
	d := opDeltas(m)
	for i, want := range []string{"hello", "HELLO"} {
		if i == 1 {
			check(t, os.WriteFile(path, []byte(want), 0o644))
			later := time.Now().Add(time.Hour)
			check(t, os.Chtimes(path, later, later))
		}
		if b, err := openRead(m.path("f")); err != nil || string(b) != want {
			t.Fatalf("open %d: read %q, %v; want %q", i+1, b, err, want)
		}
	}
	// The second open's revalidation shows the file changed (its ctime):
	// root's rights are asked again, as the Linux client drops its
	// access cache entry on a changed inode.
	if a, g := d(nfs3.ProcAccess), d(nfs3.ProcGetattr); a != 1 || g != 2 {
		t.Errorf("2 opens by root sent %d ACCESS and %d GETATTR, want 1 and 2 (a GETATTR each, and an ACCESS once it showed the file changed)", a, g)
	}
}

// TestRootOpenStaleAttrsOneCall: once the kernel's attributes of a file
// timed out, root's open still costs one call: the kernel's permission
// check asks for the attributes first, and the ACCESS that fetches them
// tells the open what root may do (the kernel client sends a GETATTR and
// an ACCESS). A change made on the server meanwhile is seen.
func TestRootOpenStaleAttrsOneCall(t *testing.T) {
	m, path := mountRootOpen(t, 200*time.Millisecond)
	for i, want := range []string{"hello", "HELLO"} {
		if i == 1 {
			check(t, os.WriteFile(path, []byte(want), 0o644))
			later := time.Now().Add(time.Hour)
			check(t, os.Chtimes(path, later, later))
		}
		time.Sleep(lookupFresh + 300*time.Millisecond) // the attributes and the LOOKUP's revalidation time out
		d := opDeltas(m)
		if b, err := openRead(m.path("f")); err != nil || string(b) != want {
			t.Fatalf("open %d: read %q, %v; want %q", i+1, b, err, want)
		}
		if a, g := d(nfs3.ProcAccess), d(nfs3.ProcGetattr); a != 1 || g != 0 {
			t.Errorf("open %d by root with stale attributes sent %d ACCESS and %d GETATTR, want 1 and 0", i+1, a, g)
		}
	}
}

// TestRootOpenRightsPerFile: root's rights learnt by an ACCESS of a file
// answer root's later opens of that file while its attributes are
// unchanged, as the Linux client's access cache does (one ACCESS per file;
// none right after the LOOKUP that found it again, one GETATTR otherwise);
// they say nothing of another file, whatever root's creations showed of
// the server (a file root made owned by uid 0), and go when the file
// changes.
func TestRootOpenRightsPerFile(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: what is tested is root's opens (make check and CI run as root)")
	}
	srv := startGoNFS(t, backendDisk)
	for _, name := range []string{"a", "b", "c"} {
		check(t, os.WriteFile(filepath.Join(srv.Dir, name), []byte(name), 0o644))
	}
	o := DefaultOptions()
	o.AcRegMin, o.AcRegMax = 500*time.Millisecond, 500*time.Millisecond
	m := mountGoNFS(t, srv, &o)
	check(t, os.Mkdir(m.path("made-by-root"), 0o700)) // owned by uid 0: root is not squashed
	d := opDeltas(m)
	for _, name := range []string{"a", "b", "c"} {
		if b, err := openRead(m.path(name)); err != nil || string(b) != name {
			t.Fatalf("%s: %q, %v", name, b, err)
		}
	}
	if a := d(nfs3.ProcAccess); a != 3 {
		t.Errorf("root's first opens of 3 files sent %d ACCESS, want 3 (one each)", a)
	}
	d = opDeltas(m)
	for _, name := range []string{"a", "b", "c"} {
		if b, err := openRead(m.path(name)); err != nil || string(b) != name {
			t.Fatalf("%s again: %q, %v", name, b, err)
		}
	}
	if a, g := d(nfs3.ProcAccess), d(nfs3.ProcGetattr); a != 0 || g > 3 {
		t.Errorf("root's second opens of 3 unchanged files sent %d ACCESS and %d GETATTR, want 0 and at most 3", a, g)
	}
	// Changed on the server: the kernel's permission check or the open's
	// revalidation sees it, and root's next open asks again.
	time.Sleep(lookupFresh + 100*time.Millisecond)
	check(t, os.WriteFile(filepath.Join(srv.Dir, "a"), []byte("A changed"), 0o644))
	later := time.Now().Add(time.Hour)
	check(t, os.Chtimes(filepath.Join(srv.Dir, "a"), later, later))
	for i := range 2 {
		if b, err := openRead(m.path("a")); err != nil || string(b) != "A changed" {
			t.Fatalf("a changed on the server, open %d: %q, %v", i+1, b, err)
		}
	}
	d = opDeltas(m)
	if b, err := openRead(m.path("a")); err != nil || string(b) != "A changed" {
		t.Fatalf("a changed on the server: %q, %v", b, err)
	}
	if a := d(nfs3.ProcAccess); a != 0 {
		t.Errorf("an open by root of a file asked since its change sent %d ACCESS, want 0", a)
	}
}

// TestRootSquashSwitched: the export is switched to root_squash after
// root's creation showed it unsquashed and root opened file a. Root's open
// of file b, never asked for, goes to the server, which refuses it
// (EACCES), as on the Linux client, whose access cache is per file; a,
// unchanged, still opens on the rights asked before (as the Linux client's
// cached ACCESS answers), until it changes.
func TestRootSquashSwitched(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: what is tested is root's opens (make check and CI run as root)")
	}
	srv := startGoNFS(t, backendDisk)
	for _, name := range []string{"a", "b"} {
		p := filepath.Join(srv.Dir, name)
		check(t, os.WriteFile(p, []byte(name), 0o600))
		check(t, os.Chown(p, 1000, 1000))
	}
	m, rec := mountRecorded(t, srv, nil, MountConfig{})
	check(t, os.Mkdir(m.path("made-by-root"), 0o700)) // owned by uid 0: not squashed
	if b, err := openRead(m.path("a")); err != nil || string(b) != "a" {
		t.Fatalf("root reads a: %q, %v", b, err)
	}
	if _, err := os.Lstat(m.path("b")); err != nil {
		t.Fatal(err)
	}
	// exportfs -o root_squash: root is nobody, refused ACCESS and READ of
	// another user's 0600 file.
	rec.mu.Lock()
	rec.refuse = func(c sentCall) bool {
		a, err := sunrpc.ParseAuthSys(c.cred)
		return (c.proc == nfs3.ProcAccess || c.proc == nfs3.ProcRead) && err == nil && a.UID == 0
	}
	rec.mu.Unlock()
	if f, err := os.Open(m.path("b")); !errors.Is(err, syscall.EACCES) {
		if err == nil {
			f.Close()
		}
		t.Errorf("root's open of b after the switch: %v, want EACCES", err)
	}
	if b, err := openRead(m.path("a")); err != nil || string(b) != "a" {
		t.Errorf("root reads a again (rights asked before, a unchanged): %q, %v", b, err)
	}
	time.Sleep(lookupFresh + 100*time.Millisecond)
	later := time.Now().Add(time.Hour)
	check(t, os.Chtimes(filepath.Join(srv.Dir, "a"), later, later))
	var err error
	for range 2 {
		_, err = openRead(m.path("a"))
	}
	if !errors.Is(err, syscall.EACCES) {
		t.Errorf("root reads a, changed since its rights were asked: %v, want EACCES", err)
	}
}

// TestLearnRootRights: which rights granted to root show it unsquashed.
func TestLearnRootRights(t *testing.T) {
	rw := uint32(nfs3.AccessRead | nfs3.AccessModify)
	rootCtx := sunrpc.WithCredential(context.Background(), mustAuthSys(t, 0))
	userCtx := sunrpc.WithCredential(context.Background(), mustAuthSys(t, 1000))
	for _, c := range []struct {
		name    string
		ctx     context.Context
		typ     nfs3.FileType
		uid     uint32
		mode    uint32
		granted uint32
		want    bool
	}{
		{"write, root's 0644", rootCtx, nfs3.TypeReg, 0, 0o644, rw, true},
		{"read only, root's 0644", rootCtx, nfs3.TypeReg, 0, 0o644, nfs3.AccessRead, false},
		{"write, root's 0664 (its group may)", rootCtx, nfs3.TypeReg, 0, 0o664, rw, false},
		{"write, root's 0646 (others may)", rootCtx, nfs3.TypeReg, 0, 0o646, rw, false},
		{"read, root's 0600", rootCtx, nfs3.TypeReg, 0, 0o600, nfs3.AccessRead, true},
		{"write, another's 0644 (the owner may)", rootCtx, nfs3.TypeReg, 1000, 0o644, rw, false},
		{"write, another's 0444", rootCtx, nfs3.TypeReg, 1000, 0o444, rw, true},
		{"read, another's 0000", rootCtx, nfs3.TypeReg, 1000, 0, nfs3.AccessRead, true},
		{"extend, root's 0444", rootCtx, nfs3.TypeReg, 0, 0o444, nfs3.AccessExtend, true},
		{"execute only, root's 0644", rootCtx, nfs3.TypeReg, 0, 0o644, nfs3.AccessExecute, false},
		{"a directory", rootCtx, nfs3.TypeDir, 0, 0o700, rw, false},
		{"another caller's ACCESS", userCtx, nfs3.TypeReg, 0, 0o644, rw, false},
	} {
		f := &FS{opts: DefaultOptions(), now: time.Now}
		f.learnRootRights(c.ctx, &nfs3.Attr{Type: c.typ, UID: c.uid, Mode: c.mode, FSID: 7}, c.granted)
		if got := f.squash.unsquashed(7, time.Now()); got != c.want {
			t.Errorf("%s: root known unsquashed %v, want %v", c.name, got, c.want)
		}
	}
}

// mustAuthSys returns an AUTH_SYS credential of uid.
func mustAuthSys(t *testing.T, uid uint32) sunrpc.OpaqueAuth {
	t.Helper()
	cred, err := (&sunrpc.AuthSys{MachineName: "test", UID: uid, GID: uid}).Credential()
	if err != nil {
		t.Fatal(err)
	}
	return cred
}

// TestEvents: the VFS event counters count the requests.
func TestEvents(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	m := mountGoNFS(t, srv, nil)
	before := m.fsys.Events()
	check(t, os.WriteFile(m.path("f"), []byte("hello"), 0o644))
	b, err := os.ReadFile(m.path("f"))
	check(t, err)
	_, err = os.ReadDir(m.path(""))
	check(t, err)
	check(t, os.Truncate(m.path("f"), 1))
	after := m.fsys.Events()
	for _, c := range []struct {
		name string
		i    int
	}{{"vfsopen", evOpen}, {"vfslookup", evLookup}, {"vfsupdatepage", evUpdatePage}, {"vfsreadpages", evReadPages},
		{"vfsgetdents", evGetdents}, {"vfssetattr", evSetattr}, {"setattrtrunc", evSetattrTrunc}, {"vfsflush", evFlush}, {"vfsrelease", evRelease}} {
		if after[c.i] <= before[c.i] {
			t.Errorf("%s: %d before, %d after", c.name, before[c.i], after[c.i])
		}
	}
	if io := m.fsys.IOBytes(); io.NormalWrite < 5 || io.NormalRead < uint64(len(b)) {
		t.Errorf("bytes: %+v", io)
	}
}

// TestRPCCatAfterListing: files read right after their directory was
// listed (a shell's glob, then cat) cost one READ each and no LOOKUP: the
// listing's entries answer the path walks. The directory's open costs one
// GETATTR (its close-to-open revalidation, as the kernel client's); each
// file's open revalidates too, with root's ACCESS here (the test runs as
// root), which brings the attributes: no GETATTR of its own.
func TestRPCCatAfterListing(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	check(t, os.Mkdir(filepath.Join(srv.Dir, "d"), 0o755))
	const n = 20
	for i := range n {
		check(t, os.WriteFile(filepath.Join(srv.Dir, "d", fmt.Sprintf("f%d", i)), []byte("content"), 0o644))
	}
	m := mountGoNFS(t, srv, nil)
	d := opDeltas(m)
	ents, err := os.ReadDir(m.path("d"))
	check(t, err)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(m.path("d"), e.Name()))
		if err != nil || string(b) != "content" {
			t.Fatalf("%s: %q, %v", e.Name(), b, err)
		}
	}
	if r, g, l := d(nfs3.ProcRead), d(nfs3.ProcGetattr), d(nfs3.ProcLookup); r != n || g != 1 || l > 1 {
		t.Errorf("cat of %d files after ls: %d READ, %d GETATTR, %d LOOKUP; want %d, 1, at most 1", n, r, g, l, n)
	}
}

// TestNoFlushForReaders: closing a file opened for reading sends the
// file system no FLUSH; closing one opened for writing does.
func TestNoFlushForReaders(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	m := mountGoNFS(t, srv, nil)
	check(t, os.WriteFile(m.path("f"), []byte("x"), 0o644))
	before := m.fsys.Events()
	for range 5 {
		_, err := os.ReadFile(m.path("f"))
		check(t, err)
	}
	mid := m.fsys.Events()
	check(t, os.WriteFile(m.path("f"), []byte("y"), 0o644))
	after := m.fsys.Events()
	if mid[evFlush] != before[evFlush] || after[evFlush] == mid[evFlush] {
		t.Errorf("FLUSH requests: %d for 5 reads, %d for a write; want 0, >0", mid[evFlush]-before[evFlush], after[evFlush]-mid[evFlush])
	}
}

// fuseRequests returns the FUSE requests m's file system answered, by kind.
func fuseRequests(m *mounted) map[string]uint64 {
	out := map[string]uint64{}
	for _, o := range m.fsys.FUSERequests() {
		out[o.Name] = o.Requests
	}
	return out
}

// TestRenameFlags: renameat2(2) with flags fails with EINVAL, as on the
// kernel's NFSv3 client, and only the mount's first try reaches the mount
// server: its ENOSYS makes the kernel answer the others itself (mv(1)
// tries RENAME_NOREPLACE before every rename, and each try would
// otherwise be a FUSE round trip). A plain rename then works, and the
// FUSE request counters see each kind once per request.
func TestRenameFlags(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	m := mountGoNFS(t, srv, nil)
	check(t, os.WriteFile(m.path("a"), []byte("data"), 0o644))
	check(t, os.WriteFile(m.path("c"), nil, 0o644))
	d := opDeltas(m)
	before := fuseRequests(m)
	for i := range 3 {
		if err := unix.Renameat2(unix.AT_FDCWD, m.path("a"), unix.AT_FDCWD, m.path(fmt.Sprintf("b%d", i)), unix.RENAME_NOREPLACE); err != syscall.EINVAL {
			t.Errorf("RENAME_NOREPLACE %d: %v, want EINVAL", i, err)
		}
		if err := unix.Renameat2(unix.AT_FDCWD, m.path("a"), unix.AT_FDCWD, m.path("c"), unix.RENAME_EXCHANGE); err != syscall.EINVAL {
			t.Errorf("RENAME_EXCHANGE %d: %v, want EINVAL", i, err)
		}
	}
	if got := fuseRequests(m)["RENAME2"] - before["RENAME2"]; got != 1 {
		t.Errorf("6 renameat2 calls with flags made %d RENAME2 requests, want 1", got)
	}
	check(t, os.Rename(m.path("a"), m.path("b")))
	after := fuseRequests(m)
	if got := after["RENAME"] - before["RENAME"]; got != 1 {
		t.Errorf("a rename made %d RENAME requests, want 1", got)
	}
	if r := d(nfs3.ProcRename); r != 1 {
		t.Errorf("%d RENAME calls, want 1", r)
	}
	if b, err := os.ReadFile(filepath.Join(srv.Dir, "b")); err != nil || string(b) != "data" {
		t.Errorf("renamed file at the server: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(srv.Dir, "c")); err != nil {
		t.Errorf("the exchange's other file: %v", err)
	}
	var total time.Duration
	for _, o := range m.fsys.FUSERequests() {
		total += o.Time
	}
	if after["LOOKUP"] == 0 || after["CREATE"] != 2 || total <= 0 {
		t.Errorf("FUSE requests %v (time %v): want LOOKUPs, 2 CREATEs and some time", after, total)
	}
}
