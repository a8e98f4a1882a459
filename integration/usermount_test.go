//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The user for the user-mount tests (addUsers adds it).
const mountUser = 1001

// debianMemlockKiB is Debian's default RLIMIT_MEMLOCK for users (ulimit -l).
const debianMemlockKiB = 8192

// TestUserMountSecureRDMA: a user (uid 1001, not root) mounts the secure
// export /export over RDMA with the helper given cap_net_bind_service (as
// `make install` gives it) and ulimit -l at Debian's default 8192 KiB.
// The mount comes up, its pool sized to the limit (rsize and wsize lowered,
// a warning saying so), and the registered memory of its server stays
// within the limit under parallel direct I/O, every byte checked against
// the server's file. Without the capability the same mount is refused with
// a message naming the ordinary port; with a limit below the smallest pool
// it fails at once naming memlock, instead of retrying.
func TestUserMountSecureRDMA(t *testing.T) {
	bin := mountBinary(t)
	addUsers(t)
	userMountSystem(t)
	capBin, grant := capableHelper(t, bin)
	t.Logf("cap_net_bind_service by %s", grant.how)

	base, err := os.MkdirTemp("/tmp", "usermount-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(base, 0o755)
	t.Cleanup(func() { os.RemoveAll(base) })
	dir := filepath.Join(base, "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, mountUser, mountUser); err != nil {
		t.Fatal(err)
	}
	cleanupMount(t, bin, dir)
	opts := "proto=rdma,port=20049"

	// Without the capability: MOUNT from an ordinary port, refused by the
	// secure export, and the message says why and what to do.
	code, out := asUserLimited(t, debianMemlockKiB, nil, bin, "-o", opts+",retry=0", exportSpec, dir)
	t.Logf("without the capability: exit %d: %s", code, out)
	if code == 0 {
		t.Fatal("a user's mount of the secure export succeeded without a reserved port")
	}
	for _, want := range []string{"MNT3ERR_ACCES", "ordinary source port", "cap_net_bind_service", "insecure"} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal lacks %q", want)
		}
	}
	if mountType(t, dir) != "" {
		t.Fatal("left mounted")
	}

	// A limit below the smallest pool: refused at once, naming the fix.
	start := time.Now()
	code, out = asUserLimited(t, 1024, grant.wrap, capBin, "-o", opts, exportSpec, dir)
	took := time.Since(start)
	t.Logf("ulimit -l 1024: exit %d after %v: %s", code, took.Round(time.Millisecond), out)
	if code == 0 {
		t.Fatal("mounted with 1 MiB of locked memory")
	}
	for _, want := range []string{"RLIMIT_MEMLOCK", "1024 KiB", "/etc/security/limits.conf", "LimitMEMLOCK="} {
		if !strings.Contains(out, want) {
			t.Errorf("the memlock refusal lacks %q", want)
		}
	}
	if took > 20*time.Second {
		t.Errorf("the memlock refusal took %v: retried as an unreachable server", took)
	}

	// Debian's default limit: the mount comes up with its pool sized.
	code, out = asUserLimited(t, debianMemlockKiB, grant.wrap, capBin, "-o", opts, exportSpec, dir)
	t.Logf("ulimit -l %d: exit %d: %s", debianMemlockKiB, code, out)
	if code != 0 {
		t.Fatalf("the user's RDMA mount of the secure export failed")
	}
	if typ := mountType(t, dir); typ != "fuse.nfsrdma" {
		t.Fatalf("mounted as %q", typ)
	}
	if !strings.Contains(out, "locked-memory limit") {
		t.Errorf("no warning that the pool was sized to the limit: %s", out)
	}
	code, stats := asUser(t, mountUser, nil, bin, "stats", dir)
	if code != 0 {
		t.Fatalf("stats as the user: %s", stats)
	}
	pid := statsPid(t, stats)
	if m := regexp.MustCompile(`rsize=(\d+)`).FindStringSubmatch(stats); m == nil || m[1] == "1048576" {
		t.Errorf("rsize not lowered to fit the limit: %v", m)
	} else {
		t.Logf("rsize %s", m[1])
	}
	st := procStatus(t, pid)
	t.Logf("server %d: Uid %s CapEff %s", pid, st["Uid"], st["CapEff"])
	if !strings.HasPrefix(st["Uid"], strconv.Itoa(mountUser)+"\t") {
		t.Errorf("the server runs as %q, not the user", st["Uid"])
	}
	limits, _ := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if !regexp.MustCompile(`Max locked memory\s+` + strconv.Itoa(debianMemlockKiB<<10) + `\s`).Match(limits) {
		t.Errorf("the server's locked-memory limit is not %d KiB:\n%s", debianMemlockKiB, limits)
	}

	// Parallel direct writes and reads through the mount while the
	// server's pinned memory is sampled.
	var maxPin atomic.Int64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		for {
			if kb := pinnedKiB(pid); kb > maxPin.Load() {
				maxPin.Store(kb)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	// The data is made in a local directory of the user's, written
	// through the mount by parallel direct writers, read back by parallel
	// direct readers (1 MiB and 4 KiB) and compared there, and compared
	// with the server's file below.
	local := filepath.Join(base, "local")
	if err := os.Mkdir(local, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(local, mountUser, mountUser); err != nil {
		t.Fatal(err)
	}
	const writers, mib = 4, 8
	script := fmt.Sprintf(`set -e
for i in $(seq 1 %d); do dd if=/dev/urandom of="$1/src-$i" bs=1M count=%d status=none; done
pids=
for i in $(seq 1 %d); do dd if="$1/src-$i" of="$0/f-$i" bs=1M oflag=direct status=none & pids="$pids $!"; done
for p in $pids; do wait $p || exit 1; done
pids=
for i in $(seq 1 %d); do
  (dd if="$0/f-$i" bs=1M iflag=direct status=none | cmp - "$1/src-$i") & pids="$pids $!"
  (dd if="$0/f-$i" bs=4k iflag=direct status=none | cmp - "$1/src-$i") & pids="$pids $!"
done
for p in $pids; do wait $p || exit 1; done
`, writers, mib, writers, writers)
	code, out = asUser(t, mountUser, nil, "/bin/sh", "-c", script, dir, local)
	close(stop)
	sampler.Wait()
	if code != 0 {
		t.Fatalf("parallel I/O as the user: exit %d: %s", code, out)
	}
	for i := 1; i <= writers; i++ {
		src := fileSum(t, filepath.Join(local, fmt.Sprintf("src-%d", i)))
		via := fileSum(t, filepath.Join(exportDir, fmt.Sprintf("f-%d", i)))
		if src != via {
			t.Errorf("f-%d on the server differs from what the user wrote", i)
		}
	}
	t.Logf("the server's pinned memory peaked at %d KiB (limit %d KiB)", maxPin.Load(), debianMemlockKiB)
	if maxPin.Load() == 0 {
		t.Error("no pinned memory seen: the sampler measured nothing")
	}
	if maxPin.Load() > debianMemlockKiB {
		t.Errorf("pinned %d KiB, over the limit", maxPin.Load())
	}
	if code, out := asUser(t, mountUser, nil, bin, "-u", dir); code != 0 || mountType(t, dir) != "" {
		t.Fatalf("nfsrdma-mount -u as the user: exit %d: %s", code, out)
	}
	for i := 1; i <= writers; i++ {
		os.Remove(filepath.Join(exportDir, fmt.Sprintf("f-%d", i)))
	}
}

// userMountSystem makes the guest what a normal system is for a user's
// FUSE and RDMA mount: /etc/mtab (for fusermount3 -u), /dev/fuse and the
// RDMA device nodes 0666 (udev and rdma-core's rules make them so; the bed
// has no udev).
func userMountSystem(t *testing.T) {
	t.Helper()
	if _, err := os.Lstat("/etc/mtab"); os.IsNotExist(err) {
		if err := os.Symlink("../proc/self/mounts", "/etc/mtab"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove("/etc/mtab") })
	}
	nodes, _ := filepath.Glob("/dev/infiniband/*")
	for _, n := range append(nodes, "/dev/fuse") {
		fi, err := os.Stat(n)
		if err != nil || fi.Mode()&os.ModeCharDevice == 0 || fi.Mode().Perm() == 0o666 {
			continue
		}
		old := fi.Mode().Perm()
		if err := os.Chmod(n, 0o666); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s was %o, made 0666 as udev would", n, old)
		t.Cleanup(func() { os.Chmod(n, old) })
	}
}

// capGrant is how the user's helper gets cap_net_bind_service.
type capGrant struct {
	how  string
	wrap []string // setpriv arguments that grant it, when the file has no capability
}

// capableHelper returns a copy of bin the user may run that has
// cap_net_bind_service: a file capability set with setcap(8), as `make
// install` does, or, where the guest has no setcap (libcap2-bin), the
// capability granted as an ambient one by setpriv(1) at each run.
func capableHelper(t *testing.T, bin string) (string, capGrant) {
	t.Helper()
	d, err := os.MkdirTemp("/tmp", "usermount-bin-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(d, 0o755)
	t.Cleanup(func() { os.RemoveAll(d) })
	cp := filepath.Join(d, "nfsrdma-mount")
	src, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(cp, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	for _, setcap := range []string{"/usr/sbin/setcap", "/sbin/setcap"} {
		if _, err := os.Stat(setcap); err != nil {
			continue
		}
		if out, err := exec.Command(setcap, "cap_net_bind_service+ep", cp).CombinedOutput(); err != nil {
			t.Fatalf("setcap: %v: %s", err, out)
		}
		return cp, capGrant{how: "a file capability (setcap cap_net_bind_service+ep)"}
	}
	return cp, capGrant{how: "setpriv --ambient-caps +net_bind_service (the guest has no setcap)",
		wrap: []string{"--inh-caps=+net_bind_service", "--ambient-caps=+net_bind_service"}}
}

// asUserLimited runs a command as mountUser with RLIMIT_MEMLOCK at kib KiB
// (soft and hard, as limits.conf sets them), an empty environment, and the
// setpriv arguments of extra (a capability). It returns the exit code and
// the combined output.
func asUserLimited(t *testing.T, kib int, extra []string, name string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	u := strconv.Itoa(mountUser)
	sp := append([]string{"--reuid=" + u, "--regid=" + u, "--clear-groups"}, extra...)
	sp = append(append(sp, "--", name), args...)
	cmd := exec.CommandContext(ctx, "/usr/bin/prlimit", append([]string{fmt.Sprintf("--memlock=%d", kib<<10), "--", "/usr/bin/setpriv"}, sp...)...)
	cmd.Env = []string{}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	return 0, string(out)
}

// statsPid is the server's pid in nfsrdma-mount stats' output.
func statsPid(t *testing.T, stats string) int {
	t.Helper()
	m := regexp.MustCompile(`pid:\s+(\d+)`).FindStringSubmatch(stats)
	if m == nil {
		t.Fatalf("no pid in stats:\n%s", stats)
	}
	pid, _ := strconv.Atoi(m[1])
	return pid
}

// procStatus reads /proc/PID/status into its fields.
func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// pinnedKiB is VmPin of /proc/PID/status: the memory the process's RDMA
// registrations pin, which the kernel counts against RLIMIT_MEMLOCK (0 when
// it cannot be read).
func pinnedKiB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	m := regexp.MustCompile(`VmPin:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n
}

// fileSum is the SHA-256 of a file, read directly (not through a mount).
func fileSum(t *testing.T, name string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}
