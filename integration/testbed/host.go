package testbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrNotRoot is returned when a step needs root (debootstrap, chroot, apt).
var ErrNotRoot = errors.New("testbed: building the guest needs root (debootstrap, chroot and apt-get); run as root, e.g. with sudo")

func isRoot() bool { return os.Geteuid() == 0 }

// MissingHostPackages returns the host packages that are not installed.
func MissingHostPackages(pkgs []string) []string {
	var missing []string
	for _, p := range pkgs {
		out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", p).Output()
		if err != nil || !strings.Contains(string(out), "install ok installed") {
			missing = append(missing, p)
		}
	}
	return missing
}

// EnsureHostPackages installs the missing host packages with apt-get.
func EnsureHostPackages(ctx context.Context, log io.Writer) error {
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		return fmt.Errorf("testbed: this host has no dpkg: the test bed needs a Debian or Ubuntu host with %s", strings.Join(HostPackages, ", "))
	}
	missing := MissingHostPackages(HostPackages)
	if len(missing) == 0 {
		return nil
	}
	if !isRoot() {
		return fmt.Errorf("testbed: host packages missing: %s; install them as root: apt-get install %s", strings.Join(missing, " "), strings.Join(missing, " "))
	}
	fmt.Fprintf(log, "  installing host packages: %s\n", strings.Join(missing, " "))
	var out bytes.Buffer
	upd := exec.CommandContext(ctx, "apt-get", "update", "-q")
	upd.Stdout, upd.Stderr = &out, &out
	if err := upd.Run(); err != nil {
		return fmt.Errorf("testbed: apt-get update failed: %v\n%s", err, tail(out.String(), 20))
	}
	out.Reset()
	args := append([]string{"install", "-y", "-q", "--no-install-recommends"}, missing...)
	inst := exec.CommandContext(ctx, "apt-get", args...)
	inst.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	inst.Stdout, inst.Stderr = &out, &out
	if err := inst.Run(); err != nil {
		return fmt.Errorf("testbed: apt-get install %s failed: %v\n%s\nthe test bed needs these Debian packages; check the apt sources", strings.Join(missing, " "), err, tail(out.String(), 20))
	}
	if still := MissingHostPackages(missing); len(still) > 0 {
		return fmt.Errorf("testbed: host packages still missing after apt-get install: %s", strings.Join(still, " "))
	}
	return nil
}

// checkFreeSpace fails when dir's file system has less than need bytes free.
func checkFreeSpace(dir string, need uint64) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return fmt.Errorf("testbed: statfs %s: %w", dir, err)
	}
	free := st.Bavail * uint64(st.Bsize)
	if free < need {
		return fmt.Errorf("testbed: only %d MiB free in %s; the guest build needs %d MiB: free some space or set XDG_CACHE_HOME to a bigger disk", free>>20, dir, need>>20)
	}
	return nil
}

// mountsUnder lists the mount points at or below dir, deepest first.
func mountsUnder(dir string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	dir = filepath.Clean(dir)
	var ms []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			ms = append(ms, mp)
		}
	}
	// Deepest (latest mounted) first.
	for i, j := 0, len(ms)-1; i < j; i, j = i+1, j-1 {
		ms[i], ms[j] = ms[j], ms[i]
	}
	return ms
}

func unescapeMount(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// unmountAll detaches every mount under dir.
func unmountAll(dir string) error {
	for _, m := range mountsUnder(dir) {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			return fmt.Errorf("testbed: unmount %s: %w", m, err)
		}
	}
	if left := mountsUnder(dir); len(left) > 0 {
		return fmt.Errorf("testbed: still mounted under %s: %s", dir, strings.Join(left, ", "))
	}
	return nil
}

// removeTree removes dir after making sure nothing is mounted below it, so
// a bind mount of the host's /dev or /sys is never walked into.
func removeTree(dir string) error {
	if err := unmountAll(dir); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
