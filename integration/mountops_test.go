//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nfsrdma-mount as mount(8), fstab, umount(8) and the nfs-common tools
// expect it, against knfsd over Soft-RoCE.

// mountStats is the part of "nfsrdma-mount stats -json" the tests read.
type mountStats struct {
	MountPoint string   `json:"mount_point"`
	PID        int      `json:"pid"`
	Options    []string `json:"options"`
	Transports []struct {
		Proto string `json:"proto"`
		RDMA  *struct {
			Calls uint64
			Sends uint64
		} `json:"rdma"`
	} `json:"transports"`
}

func statsOf(t *testing.T, bin, dir string) mountStats {
	t.Helper()
	code, out := runCmd(t, bin, "stats", "-json", dir)
	if code != 0 {
		t.Fatalf("stats -json %s: exit %d: %s", dir, code, out)
	}
	var s mountStats
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("stats -json: %v\n%s", err, out)
	}
	return s
}

// mountCount counts the mounts at dir.
func mountCount(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			n++
		}
	}
	return n
}

// mountOptsOf returns the per-mount and superblock options of the mount on
// top at dir.
func mountOptsOf(t *testing.T, dir string) (vfs, super string) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == dir {
			vfs = "," + f[5] + ","
			if i := strings.Index(line, " - "); i >= 0 {
				if g := strings.Fields(line[i+3:]); len(g) > 2 {
					super = "," + g[2] + ","
				}
			}
		}
	}
	return vfs, super
}

// helperLinks installs the binary under mount(8)'s and umount(8)'s helper
// names for the test.
func helperLinks(t *testing.T, bin string, names ...string) {
	t.Helper()
	for _, n := range names {
		p := filepath.Join("/sbin", n)
		os.Remove(p)
		if err := os.Symlink(bin, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(p) })
	}
}

// cleanupMount unmounts whatever is left at dir when the test ends.
func cleanupMount(t *testing.T, bin, dir string) {
	t.Cleanup(func() {
		for i := 0; i < 4 && mountCount(t, dir) > 0; i++ {
			exec.Command(bin, "-u", "-l", dir).Run()
		}
	})
}

// TestMountOpsStatsTools: "nfsrdma-mount stats" of an RDMA mount with
// nconnect=2 is read by nfs-common's mountstats (-f) and, through a private
// /proc/self/mountstats, by nfsiostat; both connections carry calls.
func TestMountOpsStatsTools(t *testing.T) {
	bin := mountBinary(t)
	dir := t.TempDir()
	if code, out := runCmd(t, bin, "-o", "vers=3,proto=rdma,port=20049,nconnect=2", exportSpec, dir); code != 0 {
		t.Fatalf("mount nconnect=2: exit %d: %s", code, out)
	}
	cleanupMount(t, bin, dir)
	name := filepath.Join(dir, fmt.Sprintf("mountops-%d", os.Getpid()))
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	if err := os.WriteFile(name, data, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(name)
	if b, err := os.ReadFile(name); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("read back: %d bytes, %v", len(b), err)
	}
	s := statsOf(t, bin, dir)
	if len(s.Transports) != 2 {
		t.Fatalf("%d transports, want 2 (nconnect=2)", len(s.Transports))
	}
	for i, x := range s.Transports {
		if x.RDMA == nil || x.RDMA.Calls < 3 {
			t.Errorf("transport %d carried too few calls: %+v", i, x.RDMA)
		} else {
			t.Logf("transport %d: %d calls, %d sends", i, x.RDMA.Calls, x.RDMA.Sends)
		}
	}
	code, text := runCmd(t, bin, "stats", dir)
	if code != 0 {
		t.Fatalf("stats: %s", text)
	}
	file := filepath.Join(t.TempDir(), "mountstats")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := runCmd(t, "mountstats", "-f", file, dir)
	t.Logf("mountstats -f:\n%s", out)
	if code != 0 || !strings.Contains(out, "Stats for "+exportSpec+" mounted on "+dir) || !strings.Contains(out, "WRITE:") || !strings.Contains(out, "RPC statistics") {
		t.Errorf("mountstats -f: exit %d", code)
	}
	if code, out := runCmd(t, "mountstats", "iostat", "-f", file, dir); code != 0 || !strings.Contains(out, "write:") {
		t.Errorf("mountstats iostat -f: exit %d\n%s", code, out)
	}
	if code, out := runCmd(t, "mountstats", "-x", "-f", file, dir); code != 0 || !strings.Contains(out, "RDMA") && !strings.Contains(out, "rdma") {
		t.Errorf("mountstats -x (transport) -f: exit %d\n%s", code, out)
	}
	// nfsiostat reads /proc/self/mountstats only: give it ours in a mount
	// namespace of its own.
	code, out = runCmd(t, "unshare", "-m", "sh", "-c", `mount --bind "$1" /proc/$$/mountstats && exec nfsiostat "$2"`, "sh", file, dir)
	t.Logf("nfsiostat:\n%s", out)
	if code != 0 || !strings.Contains(out, exportSpec+" mounted on "+dir) || !strings.Contains(out, "write:") {
		t.Errorf("nfsiostat: exit %d", code)
	}
	if code, out := runCmd(t, bin, "-u", dir); code != 0 {
		t.Fatalf("unmount: %s", out)
	}
}

// TestMountOpsDeadMount: SIGKILL of the mount server with a file open: the
// application gets ENOTCONN; umount(8) and nfsrdma-mount -u remove the dead
// mount; a mount over a dead one clears it first; one mount at the end.
func TestMountOpsDeadMount(t *testing.T) {
	bin := mountBinary(t)
	helperLinks(t, bin, "umount.fuse.nfsrdma")
	dir := t.TempDir()
	cleanupMount(t, bin, dir)
	mount := func() {
		t.Helper()
		if code, out := runCmd(t, bin, "-o", "vers=3,proto=rdma,port=20049", exportSpec, dir); code != 0 {
			t.Fatalf("mount: exit %d: %s", code, out)
		}
		if n := mountCount(t, dir); n != 1 {
			t.Fatalf("%d mounts at %s after the mount, want 1", n, dir)
		}
	}
	kill := func() *os.File {
		t.Helper()
		pid := statsOf(t, bin, dir).PID
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("dead-%d", os.Getpid())))
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("server %d survived SIGKILL", pid)
			}
		}
		if _, err := f.Write([]byte("x")); !errors.Is(err, syscall.ENOTCONN) {
			t.Errorf("write to an open file of the dead mount: %v, want ENOTCONN", err)
		}
		if _, err := os.ReadDir(dir); !errors.Is(err, syscall.ENOTCONN) {
			t.Errorf("readdir of the dead mount: %v, want ENOTCONN", err)
		}
		return f
	}
	mount()
	f := kill()
	if code, out := runCmd(t, "umount", dir); code != 0 || mountCount(t, dir) != 0 {
		t.Errorf("umount(8) of the dead mount (file open): exit %d: %s; %d mounts left", code, out, mountCount(t, dir))
	}
	f.Close()
	os.Remove(filepath.Join(exportDir, filepath.Base(f.Name())))
	mount()
	f = kill()
	if code, out := runCmd(t, bin, "-u", dir); code != 0 || mountCount(t, dir) != 0 {
		t.Errorf("nfsrdma-mount -u of the dead mount (file open): exit %d: %s; %d mounts left", code, out, mountCount(t, dir))
	}
	f.Close()
	mount()
	f = kill()
	defer f.Close()
	mount() // over the dead one: cleared first
	name := filepath.Join(dir, fmt.Sprintf("after-%d", os.Getpid()))
	if err := os.WriteFile(name, []byte("alive"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(name)
	os.Remove(filepath.Join(exportDir, filepath.Base(f.Name())))
	if code, out := runCmd(t, bin, "-u", dir); code != 0 || mountCount(t, dir) != 0 {
		t.Fatalf("unmount: exit %d: %s; %d mounts left", code, out, mountCount(t, dir))
	}
}

// TestMountOpsFuseTypeAndRemount: the type /proc/mounts shows,
// fuse.nfsrdma, mounts with mount -t; mount -o remount changes ro/rw and
// noexec; umount(8) unmounts.
func TestMountOpsFuseTypeAndRemount(t *testing.T) {
	bin := mountBinary(t)
	helperLinks(t, bin, "mount.fuse.nfsrdma", "umount.fuse.nfsrdma")
	dir := t.TempDir()
	cleanupMount(t, bin, dir)
	if code, out := runCmd(t, "mount", "-t", "fuse.nfsrdma", "-o", "proto=rdma,port=20049,noexec", exportSpec, dir); code != 0 {
		t.Fatalf("mount -t fuse.nfsrdma: exit %d: %s", code, out)
	}
	if typ := mountType(t, dir); typ != "fuse.nfsrdma" {
		t.Fatalf("mounted as %q", typ)
	}
	if vfs, _ := mountOptsOf(t, dir); !strings.Contains(vfs, ",noexec,") || !strings.Contains(vfs, ",rw,") {
		t.Errorf("options %s", vfs)
	}
	name := filepath.Join(dir, fmt.Sprintf("remount-%d", os.Getpid()))
	if err := os.WriteFile(name, []byte("rw"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(filepath.Join(exportDir, filepath.Base(name)))
	if code, out := runCmd(t, "mount", "-o", "remount,ro,exec", dir); code != 0 {
		t.Fatalf("mount -o remount,ro: exit %d: %s", code, out)
	}
	if vfs, _ := mountOptsOf(t, dir); !strings.Contains(vfs, ",ro,") || strings.Contains(vfs, ",noexec,") {
		t.Errorf("after remount,ro,exec: %s", vfs)
	}
	if err := os.WriteFile(name, []byte("ro"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write after remount,ro: %v, want EROFS", err)
	}
	if code, out := runCmd(t, "mount", "-o", "remount,rw", dir); code != 0 {
		t.Fatalf("mount -o remount,rw: exit %d: %s", code, out)
	}
	if err := os.WriteFile(name, []byte("rw again"), 0o644); err != nil {
		t.Errorf("write after remount,rw: %v", err)
	}
	if code, out := runCmd(t, "umount", dir); code != 0 || mountType(t, dir) != "" {
		t.Fatalf("umount: exit %d: %s", code, out)
	}
	waitNoServer(t, bin)
}

// asUser runs a command as uid:gid with env (nil: an empty environment, no
// PATH, as mount(8) gives its helpers).
func asUser(t *testing.T, uid int, env []string, name string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		// Not run at all (execve refused: noexec).
		return -1, err.Error()
	}
	return 0, string(out)
}

// addUsers adds users 1001 and 1002 to the guest for the test.
func addUsers(t *testing.T) {
	t.Helper()
	for _, f := range []struct{ path, lines string }{
		{"/etc/passwd", "mountops1:x:1001:1001::/tmp:/bin/sh\nmountops2:x:1002:1002::/tmp:/bin/sh\n"},
		{"/etc/group", "mountops1:x:1001:\nmountops2:x:1002:\n"},
	} {
		old, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(old), "mountops1:") {
			if err := os.WriteFile(f.path, append(bytes.Clone(old), f.lines...), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.WriteFile(f.path, old, 0o644) })
		}
	}
}

// TestMountOpsUserFstab: an fstab "user" mount by uid 1001 through mount(8)
// (which runs the helper without PATH): fusermount is found, user implies
// noexec, nosuid and nodev, noatime is applied, the user's files are
// theirs; fusermount's own message reaches a user who may not mount.
func TestMountOpsUserFstab(t *testing.T) {
	bin := mountBinary(t)
	addUsers(t)
	helperLinks(t, bin, "mount.nfsrdma")
	// fusermount3 -u checks a user's unmount against /etc/mtab, which a
	// normal system links to /proc/self/mounts; the bed has none.
	if _, err := os.Lstat("/etc/mtab"); os.IsNotExist(err) {
		if err := os.Symlink("../proc/self/mounts", "/etc/mtab"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove("/etc/mtab") })
	}
	// fusermount3 opens /dev/fuse as the user: udev makes it 0666 on a
	// normal system; the bed has no udev.
	if fi, err := os.Stat("/dev/fuse"); err == nil && fi.Mode().Perm() != 0o666 {
		old := fi.Mode().Perm()
		if err := os.Chmod("/dev/fuse", 0o666); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod("/dev/fuse", old) })
	}
	// A directory the users can reach (t.TempDir's parent is 0700).
	base, err := os.MkdirTemp("/tmp", "mountops-user-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(base, 0o755)
	t.Cleanup(func() { os.RemoveAll(base) })
	dir := filepath.Join(base, "user-mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 1001, 1001); err != nil {
		t.Fatal(err)
	}
	cleanupMount(t, bin, dir)
	fstab, err := os.ReadFile("/etc/fstab")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.WriteFile("/etc/fstab", fstab, 0o644) })
	// The insecure export: a user's mount cannot bind a reserved port
	// (nfsrdma-mount is not set-user-ID root as mount.nfs is), which a
	// secure export requires.
	line := fmt.Sprintf("%s %s nfsrdma proto=tcp,port=2049,user,noauto,noatime,_netdev 0 0\n", insecureExportSpec, dir)
	if err := os.WriteFile("/etc/fstab", append(bytes.Clone(fstab), line...), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := asUser(t, 1001, nil, "/usr/bin/mount", dir)
	t.Logf("mount %s as uid 1001: exit %d: %s", dir, code, out)
	if code != 0 {
		t.Fatalf("user mount from fstab failed")
	}
	if typ := mountType(t, dir); typ != "fuse.nfsrdma" {
		t.Fatalf("mounted as %q", typ)
	}
	vfs, super := mountOptsOf(t, dir)
	t.Logf("options: %s - %s", vfs, super)
	for _, want := range []string{",noexec,", ",nosuid,", ",nodev,", ",noatime,"} {
		if !strings.Contains(vfs, want) {
			t.Errorf("the user mount lacks %s: %s", want, vfs)
		}
	}
	if !strings.Contains(super, ",user_id=1001,") {
		t.Errorf("not the user's mount: %s", super)
	}
	// The user writes a script; noexec refuses to run it.
	script := filepath.Join(dir, fmt.Sprintf("script-%d", os.Getpid()))
	defer os.Remove(filepath.Join(insecureExportDir, filepath.Base(script)))
	if code, out := asUser(t, 1001, nil, "/bin/sh", "-c", `printf '#!/bin/sh\necho ran\n' > "$0" && chmod 755 "$0"`, script); code != 0 {
		t.Fatalf("writing as uid 1001: %s", out)
	}
	if code, out := asUser(t, 1001, nil, script); code == 0 || !strings.Contains(out, "permission denied") {
		t.Errorf("a script on a noexec mount: exit %d: %s", code, out)
	} else {
		t.Logf("running a script on the noexec mount: %s", out)
	}
	if b, err := os.ReadFile(filepath.Join(insecureExportDir, filepath.Base(script))); err != nil || !strings.Contains(string(b), "echo ran") {
		t.Errorf("the user's script on the server: %q %v", b, err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(insecureExportDir, filepath.Base(script)), &st); err != nil || st.Uid != 1001 {
		t.Errorf("the user's script is owned by %d on the server (%v), want 1001", st.Uid, err)
	}
	if code, out := asUser(t, 1001, nil, bin, "-u", dir); code != 0 || mountType(t, dir) != "" {
		t.Fatalf("nfsrdma-mount -u as uid 1001: exit %d: %s", code, out)
	}

	// uid 1002 may not mount on uid 1001's directory: fusermount says why.
	code, out = asUser(t, 1002, nil, bin, "-o", "proto=tcp,port=2049", insecureExportSpec, dir)
	t.Logf("uid 1002 on uid 1001's directory: exit %d: %s", code, out)
	if code == 0 {
		t.Fatal("uid 1002 mounted on a directory it cannot write")
	}
	if !strings.Contains(out, "fusermount3: ") && !strings.Contains(out, "fusermount: ") {
		t.Errorf("fusermount's own message did not reach the user: %s", out)
	}
	if mountType(t, dir) != "" {
		t.Fatal("left mounted")
	}
}

// TestMountOpsVerbosePipe: "nfsrdma-mount -v ... | cat" returns once the
// mount is live, warns that the guest has no syslog, and the server goes on
// serving after the pipe is gone.
func TestMountOpsVerbosePipe(t *testing.T) {
	bin := mountBinary(t)
	dir := t.TempDir()
	cleanupMount(t, bin, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "sh", "-c", `"$0" -v -o vers=3,proto=rdma,port=20049 "$1" "$2" 2>&1 | cat`, bin, exportSpec, dir).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("nfsrdma-mount -v | cat did not return: %s", out)
	}
	if err != nil {
		t.Fatalf("nfsrdma-mount -v | cat: %v: %s", err, out)
	}
	t.Logf("nfsrdma-mount -v | cat:\n%.3000s", out)
	if _, err := os.Stat("/dev/log"); err != nil && !strings.Contains(string(out), "no system log") {
		t.Errorf("no warning that the background server's log goes nowhere")
	}
	for i := range 10 {
		name := filepath.Join(dir, fmt.Sprintf("pipe-%d-%d", os.Getpid(), i))
		if err := os.WriteFile(name, []byte("served"), 0o644); err != nil {
			t.Fatalf("after the pipe closed: %v", err)
		}
		os.Remove(name)
	}
	if code, out := runCmd(t, bin, "-u", dir); code != 0 {
		t.Fatalf("unmount: %s", out)
	}
	waitNoServer(t, bin)
}

// TestMountOpsVersion: --version names a version.
func TestMountOpsVersion(t *testing.T) {
	bin := mountBinary(t)
	code, out := runCmd(t, bin, "--version")
	if code != 0 || !strings.HasPrefix(out, "nfsrdma-mount ") || len(strings.Fields(out)) < 3 {
		t.Fatalf("--version: exit %d: %q", code, out)
	}
}
