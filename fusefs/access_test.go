package fusefs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// shAs runs sh -c script as uid (its gid the same), with $0... the
// args, and returns its combined output and error.
func shAs(uid uint32, script string, args ...string) (string, error) {
	cmd := exec.Command("sh", append([]string{"-c", script}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// callUID returns the uid of a recorded call's AUTH_SYS credential (^0:
// none).
func callUID(c sentCall) uint32 {
	a, err := sunrpc.ParseAuthSys(c.cred)
	if err != nil {
		return ^uint32(0)
	}
	return a.UID
}

// accessMount mounts a fresh disk server for other users (allow_other),
// with the mount's parent directory open to them.
func accessMount(t *testing.T, o *Options) (*mounted, *recorder, string) {
	t.Helper()
	srv := startGoNFS(t, backendDisk)
	check(t, os.Chmod(srv.Dir, 0o755))
	m, rec := mountRecorded(t, srv, o, MountConfig{AllowOther: true})
	check(t, os.Chmod(filepath.Dir(m.dir), 0o755))
	return m, rec, srv.Dir
}

// TestAccessServerDenies: a user the server refuses (here: every right,
// as a POSIX ACL entry u:1002:--- on a 0644 file does) cannot open the
// file for reading, though another user's read left its pages in the
// kernel's cache and the mode bits let others read; nor list a directory
// it may not read; access(2) says the same. A refused open asks again
// (its revalidation); other answers are kept.
func TestAccessServerDenies(t *testing.T) {
	m, rec, dir := accessMount(t, nil)
	check(t, os.WriteFile(filepath.Join(dir, "f"), []byte("secret"), 0o644))
	check(t, os.Mkdir(filepath.Join(dir, "d"), 0o755))
	check(t, os.Chmod(filepath.Join(dir, "d"), 0o755))
	check(t, os.WriteFile(filepath.Join(dir, "d", "name"), nil, 0o644))
	rec.mu.Lock()
	rec.grant = func(c sentCall) uint32 {
		if callUID(c) == 1002 {
			return 0
		}
		return ^uint32(0)
	}
	rec.mu.Unlock()
	if out, err := shAs(1001, `cat "$0" && ls "$1"`, m.path("f"), m.path("d")); err != nil || !strings.Contains(out, "secret") {
		t.Fatalf("uid 1001 reads and lists: %v: %s", err, out)
	}
	from := rec.mark()
	for i := range 3 {
		out, err := shAs(1002, `cat "$0"`, m.path("f"))
		if err == nil || !strings.Contains(out, "Permission denied") {
			t.Errorf("uid 1002's read %d of a file the server refuses it, cached by uid 1001's: %v: %q; want EACCES", i, err, out)
		}
		out, err = shAs(1002, `ls "$0"`, m.path("d"))
		if err == nil || strings.Contains(out, "name") {
			t.Errorf("uid 1002's listing %d of a directory the server refuses it, listed by uid 1001: %v: %q; want EACCES", i, err, out)
		}
		out, err = shAs(1002, `test -r "$0"`, m.path("f"))
		if err == nil {
			t.Errorf("uid 1002's access(R_OK) %d of a file the server refuses it: allowed", i)
		}
	}
	var n int
	for _, c := range rec.since(from, nfs3.ProcAccess) {
		if callUID(c) == 1002 {
			n++
		}
	}
	// The directory's answer is kept (listings, and access(2) of the
	// file after the first open's); each refused open asks again, as
	// the revalidation the kernel client makes before its check.
	if n != 4 {
		t.Errorf("uid 1002's 3 opens, listings and access(2) sent %d ACCESS calls, want 4 (one per open, one for the directory)", n)
	}
	if out, err := shAs(1001, `cat "$0"`, m.path("f")); err != nil || out != "secret" {
		t.Errorf("uid 1001 reads again: %v: %q", err, out)
	}
}

// TestAccessSquashedOwner: on an export that squashes everyone
// (all_squash: every file is the anonymous user's, and every caller is
// that user there), the maker of a file may reopen it for writing and
// chmod it, as the server lets it, though the mode bits (0644, owned by
// uid 1500) give uid 1001 no write and no ownership.
func TestAccessSquashedOwner(t *testing.T) {
	m, _, dir := accessMount(t, nil)
	check(t, os.Mkdir(filepath.Join(dir, "sq"), 0o777))
	check(t, os.Chmod(filepath.Join(dir, "sq"), 0o777))
	check(t, os.Chown(filepath.Join(dir, "sq"), 1500, 1500))
	f := filepath.Join(dir, "sq", "f")
	check(t, os.WriteFile(f, []byte("x"), 0o644))
	check(t, os.Chown(f, 1500, 1500))
	if out, err := shAs(1001, `echo more >> "$0"`, m.path("sq/f")); err != nil {
		t.Errorf("uid 1001 reopening for writing a file the server lets it write (owned by the anonymous uid): %v: %s", err, out)
	}
	if out, err := shAs(1001, `chmod 600 "$0"`, m.path("sq/f")); err != nil {
		t.Errorf("uid 1001's chmod of a file the server lets it chmod: %v: %s", err, out)
	}
	if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the server's file after the chmod: %v, %v", fi, err)
	}
}

// TestAccessPrivateWalk: on a mount other users may enter, a user the
// server refuses search of a directory (0700, another user's) does not
// walk through the names its owner's walk left in the kernel's caches.
func TestAccessPrivateWalk(t *testing.T) {
	m, rec, dir := accessMount(t, nil)
	d := filepath.Join(dir, "priv")
	check(t, os.Mkdir(d, 0o700))
	check(t, os.Chmod(d, 0o700))
	check(t, os.WriteFile(filepath.Join(d, "f"), []byte("x"), 0o644))
	check(t, os.Chown(d, 1001, 1001))
	rec.mu.Lock()
	rec.refuse = func(c sentCall) bool { return c.proc == nfs3.ProcLookup && callUID(c) == 1002 }
	rec.grant = func(c sentCall) uint32 {
		if callUID(c) == 1002 {
			return ^uint32(nfs3.AccessLookup | nfs3.AccessRead)
		}
		return ^uint32(0)
	}
	rec.mu.Unlock()
	if out, err := shAs(1001, `cat "$0"`, m.path("priv/f")); err != nil {
		t.Fatalf("the owner reads: %v: %s", err, out)
	}
	for i := range 3 {
		if out, err := shAs(1002, `cat "$0"`, m.path("priv/f")); err == nil || !strings.Contains(out, "Permission denied") {
			t.Errorf("uid 1002's walk %d through the owner's 0700 directory: %v: %q; want EACCES", i, err, out)
		}
		if _, err := shAs(1002, `cd "$0"`, m.path("priv")); err == nil {
			t.Errorf("uid 1002's chdir %d into the owner's 0700 directory: allowed", i)
		}
	}
}

// TestRPCAccessCat: cat of 100 small files costs one ACCESS per file for
// each user (LOOKUP, ACCESS and READ: as the kernel client), none more
// while the files' attributes hold, and ls -l one ACCESS of the directory.
func TestRPCAccessCat(t *testing.T) {
	m, rec, dir := accessMount(t, nil)
	const files = 100
	check(t, os.Mkdir(filepath.Join(dir, "d"), 0o755))
	check(t, os.Chmod(filepath.Join(dir, "d"), 0o755))
	var args []string
	for i := range files {
		p := filepath.Join(dir, "d", "f"+strconv.Itoa(i))
		check(t, os.WriteFile(p, []byte("x"), 0o644))
		args = append(args, m.path("d/f"+strconv.Itoa(i)))
	}
	count := func(what string, uid uint32, script string, args ...string) map[uint32]int {
		t.Helper()
		from := rec.mark()
		if out, err := shAs(uid, script, args...); err != nil {
			t.Fatalf("%s: %v: %s", what, err, out)
		}
		got := map[uint32]int{}
		for _, p := range []uint32{nfs3.ProcAccess, nfs3.ProcLookup, nfs3.ProcGetattr, nfs3.ProcRead, nfs3.ProcReaddirplus} {
			got[p] = len(rec.since(from, p))
		}
		t.Logf("%s: ACCESS %d LOOKUP %d GETATTR %d READ %d READDIRPLUS %d", what, got[nfs3.ProcAccess], got[nfs3.ProcLookup], got[nfs3.ProcGetattr], got[nfs3.ProcRead], got[nfs3.ProcReaddirplus])
		return got
	}
	cat := `for f; do cat "$f" >/dev/null || exit 1; done`
	got := count("uid 1001's cat of 100 files", 1001, cat, append([]string{"sh"}, args...)...)
	if got[nfs3.ProcAccess] != files || got[nfs3.ProcGetattr] != 0 {
		t.Errorf("uid 1001's first cat of %d files: %d ACCESS and %d GETATTR, want %d and 0 (the LOOKUP's or listing's attributes are the revalidation)", files, got[nfs3.ProcAccess], got[nfs3.ProcGetattr], files)
	}
	got = count("uid 1001's cat again", 1001, cat, append([]string{"sh"}, args...)...)
	if got[nfs3.ProcAccess] != 0 {
		t.Errorf("uid 1001's second cat of %d files: %d ACCESS, want 0", files, got[nfs3.ProcAccess])
	}
	got = count("uid 1002's cat", 1002, cat, append([]string{"sh"}, args...)...)
	if got[nfs3.ProcAccess] != files || got[nfs3.ProcGetattr] != 0 {
		t.Errorf("uid 1002's cat of %d files: %d ACCESS and %d GETATTR, want %d and 0 (the ACCESS is the close-to-open revalidation)", files, got[nfs3.ProcAccess], got[nfs3.ProcGetattr], files)
	}
	// The server changes a file's mode: its rights are asked again at
	// the next open (whose revalidation shows the change).
	check(t, os.Chmod(filepath.Join(dir, "d", "f0"), 0o640))
	got = count("uid 1002's cat after the server's chmod", 1002, `cat "$0" >/dev/null`, args[0])
	if got[nfs3.ProcAccess] != 1 {
		t.Errorf("uid 1002's open of a file whose mode changed on the server: %d ACCESS, want 1", got[nfs3.ProcAccess])
	}
	got = count("uid 1003's ls -l", 1003, `ls -l "$0" >/dev/null`, m.path("d"))
	if got[nfs3.ProcAccess] != 1 {
		t.Errorf("uid 1003's ls -l: %d ACCESS, want 1 (the directory's)", got[nfs3.ProcAccess])
	}
}

// TestAccessExecTruncate: execve(2) of a file is decided by the server's
// EXECUTE right (the kernel's exec open carries __FMODE_EXEC), and
// truncate(2) by path by its MODIFY right, though the mode bits allow
// both.
func TestAccessExecTruncate(t *testing.T) {
	m, rec, dir := accessMount(t, nil)
	bin, err := os.ReadFile("/bin/true")
	check(t, err)
	check(t, os.WriteFile(filepath.Join(dir, "prog"), bin, 0o777))
	check(t, os.Chmod(filepath.Join(dir, "prog"), 0o777))
	check(t, os.WriteFile(filepath.Join(dir, "f"), []byte("data"), 0o666))
	check(t, os.Chmod(filepath.Join(dir, "f"), 0o666))
	if out, err := shAs(1002, `"$0"`, m.path("prog")); err != nil {
		t.Fatalf("uid 1002 runs the program before the server refuses it: %v: %s", err, out)
	}
	rec.mu.Lock()
	rec.grant = func(c sentCall) uint32 {
		if callUID(c) == 1001 {
			return ^uint32(nfs3.AccessExecute | nfs3.AccessModify | nfs3.AccessExtend)
		}
		return ^uint32(0)
	}
	rec.mu.Unlock()
	if out, err := shAs(1001, `"$0"`, m.path("prog")); err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("uid 1001 runs a program the server does not let it execute: %v: %q; want EACCES", err, out)
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("python3, for truncate(2) by path: ", err)
	}
	if out, err := shAs(1001, `python3 -c 'import os, sys; os.truncate(sys.argv[1], 0)' "$0"`, m.path("f")); err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("uid 1001's truncate(2) of a file the server does not let it write: %v: %s; want EACCES", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "data" {
		t.Errorf("the server's file after a refused truncate: %q, %v", b, err)
	}
	if out, err := shAs(1002, `"$0" && python3 -c 'import os, sys; os.truncate(sys.argv[1], 1)' "$1"`, m.path("prog"), m.path("f")); err != nil {
		t.Errorf("uid 1002, whom the server lets, runs and truncates: %v: %s", err, out)
	}
}

// TestAccessHardlinkProtected: with fs.protected_hardlinks, a user that
// does not own a file may link to it only if the server lets it read and
// write it: EPERM otherwise, as the kernel client's ACCESS makes it.
func TestAccessHardlinkProtected(t *testing.T) {
	if b, err := os.ReadFile(protectedHardlinks); err != nil || strings.TrimSpace(string(b)) != "1" {
		t.Skipf("fs.protected_hardlinks is not 1 here: %q, %v", b, err)
	}
	m, rec, dir := accessMount(t, nil)
	check(t, os.Mkdir(filepath.Join(dir, "d"), 0o777))
	check(t, os.Chmod(filepath.Join(dir, "d"), 0o777))
	for _, f := range []string{"a", "b"} {
		check(t, os.WriteFile(filepath.Join(dir, "d", f), []byte("x"), 0o666))
		check(t, os.Chmod(filepath.Join(dir, "d", f), 0o666))
		check(t, os.Chown(filepath.Join(dir, "d", f), 1001, 1001))
	}
	rec.mu.Lock()
	rec.grant = func(c sentCall) uint32 {
		if callUID(c) == 1002 {
			return ^uint32(nfs3.AccessModify | nfs3.AccessExtend)
		}
		return ^uint32(0)
	}
	rec.mu.Unlock()
	if out, err := shAs(1002, `ln "$0" "$1"`, m.path("d/a"), m.path("d/la")); err == nil || !strings.Contains(out, "Operation not permitted") {
		t.Errorf("uid 1002 links to a file the server does not let it write: %v: %q; want EPERM", err, out)
	}
	// (go-nfs's LINK itself fails: only this mount's check is looked at.)
	if out, _ := shAs(1003, `ln "$0" "$1"`, m.path("d/b"), m.path("d/lb")); strings.Contains(out, "Operation not permitted") {
		t.Errorf("uid 1003 links to a file the server lets it read and write: %q; want no EPERM", out)
	}
}

// TestAccessRefusalRevalidated: an open refused before is asked again,
// not refused from the cache, as the kernel client's open revalidates
// the file first: another client's chmod that lets the user in since is
// seen at once.
func TestAccessRefusalRevalidated(t *testing.T) {
	m, rec, dir := accessMount(t, nil)
	check(t, os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644))
	var refuse atomic.Bool
	refuse.Store(true)
	rec.mu.Lock()
	rec.grant = func(c sentCall) uint32 {
		if callUID(c) == 1002 && refuse.Load() {
			return 0
		}
		return ^uint32(0)
	}
	rec.mu.Unlock()
	if _, err := shAs(1002, `cat "$0"`, m.path("f")); err == nil {
		t.Fatal("uid 1002 read a file the server refuses it")
	}
	refuse.Store(false)
	if out, err := shAs(1002, `cat "$0"`, m.path("f")); err != nil {
		t.Errorf("uid 1002's open after the server lets it in: %v: %s; want it read", err, out)
	}
}
