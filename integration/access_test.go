//go:build integration

package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The server decides permissions (fusefs/access.go): each scenario runs
// through the kernel's NFS/RDMA mount and through nfsrdma-mount, and the
// outcomes (errnos, bytes read) must be the same.

// accessMounts mounts the export spec with the kernel's client and with
// nfsrdma-mount (bin), both open to other users, and returns the two
// mount points (kernel, ours).
func accessMounts(t *testing.T, bin, spec string) (string, string) {
	t.Helper()
	kernel := t.TempDir()
	run(t, "mount", "-t", "nfs", "-o", "vers=3,proto=rdma,port=20049,nosharecache", spec, kernel)
	t.Cleanup(func() { exec.Command("umount", kernel).Run() })
	ours := mountNFSRDMASpec(t, bin, spec)
	for _, m := range []string{ours, kernel} {
		if err := os.Chmod(filepath.Dir(m), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return kernel, ours
}

// readAs reads path as a, and says how it went.
func readAs(a pcActor, path string) string {
	return asActor(a, func() string {
		fd, err := unix.Open(path, unix.O_RDONLY, 0)
		if err != nil {
			return "open " + en(err)
		}
		defer unix.Close(fd)
		buf := make([]byte, 256)
		n, err := unix.Read(fd, buf)
		return fmt.Sprintf("open ok, read %s %q", en(err), buf[:max(n, 0)])
	})
}

// aclRun is the ACL scenario in dir (through a mount) whose server
// directory is srv: a file 0644 of uid 1001 with a POSIX ACL entry that
// denies uid 1002 everything (set on the server); uid 1001 reads it (its
// pages then cached by the mount), then uid 1002 reads it and tests
// access(R_OK).
func aclRun(t *testing.T, dir, srv string) string {
	p := filepath.Join(srv, "f")
	if err := os.WriteFile(p, []byte("readable by 1001 only\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 1001, 1001); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("setfacl", "-m", "u:1002:---", p).CombinedOutput(); err != nil {
		t.Fatalf("setfacl on the server's file: %v: %s", err, out)
	}
	var b strings.Builder
	u1001 := pcActor{"u1001", 1001, 1001, []uint32{1001}}
	u1002 := pcActor{"u1002", 1002, 1002, []uint32{1002}}
	f := filepath.Join(dir, "f")
	fmt.Fprintf(&b, "uid 1001: %s\n", readAs(u1001, f))
	fmt.Fprintf(&b, "uid 1002 after 1001: %s\n", readAs(u1002, f))
	fmt.Fprintf(&b, "uid 1002 access R_OK: %s\n", asActor(u1002, func() string { return en(unix.Access(f, unix.R_OK)) }))
	fmt.Fprintf(&b, "uid 1002 again: %s\n", readAs(u1002, f))
	fmt.Fprintf(&b, "uid 1001 again: %s\n", readAs(u1001, f))
	return b.String()
}

// groupsRun is the scenario of a user in 17 supplementary groups, in dir
// (through a mount) whose server directory is srv: a file 0640 of uid
// 1001 whose group is the 17th (in the sorted order the kernel keeps and
// sends the first 16 of, as AUTH_SYS carries 16); the user is in its
// group only through that 17th, which the server is not told of.
func groupsRun(t *testing.T, dir, srv string) string {
	p := filepath.Join(srv, "g")
	if err := os.WriteFile(p, []byte("group 2017's\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 1001, 2017); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o640); err != nil {
		t.Fatal(err)
	}
	var groups []uint32
	for g := uint32(2001); g <= 2017; g++ {
		groups = append(groups, g)
	}
	u := pcActor{"u1003-17groups", 1003, 1003, groups}
	var b strings.Builder
	g := filepath.Join(dir, "g")
	fmt.Fprintf(&b, "17 groups, the 17th grants: %s\n", readAs(u, g))
	fmt.Fprintf(&b, "17 groups, access R_OK: %s\n", asActor(u, func() string { return en(unix.Access(g, unix.R_OK)) }))
	fmt.Fprintf(&b, "17 groups, again: %s\n", readAs(u, g))
	return b.String()
}

// squashRun is the all_squash scenario in dir (through a mount of
// /export-squash, where every caller is uid 1500) whose server directory
// is srv: uid 1001 creates a file, closes it, reopens it for writing and
// chmods it; the server owns it as 1500, whom uid 1001 is there.
func squashRun(dir, srv string) string {
	u := pcActor{"u1001", 1001, 1001, []uint32{1001}}
	p := filepath.Join(dir, "made")
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", asActor(u, func() string {
		fd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
		if err != nil {
			return "create " + en(err)
		}
		_, werr := unix.Write(fd, []byte("one\n"))
		s := fmt.Sprintf("create ok, write %s, close %s", en(werr), en(unix.Close(fd)))
		fd, err = unix.Open(p, unix.O_WRONLY|unix.O_APPEND, 0)
		if err != nil {
			return s + ", reopen for writing " + en(err)
		}
		_, werr = unix.Write(fd, []byte("two\n"))
		s += fmt.Sprintf(", reopen for writing ok, write %s, close %s", en(werr), en(unix.Close(fd)))
		return s + ", chmod 600 " + en(unix.Chmod(p, 0o600))
	}))
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(srv, "made"), &st); err != nil {
		fmt.Fprintf(&b, "at the server: %s\n", en(err))
	} else {
		got, _ := os.ReadFile(filepath.Join(srv, "made"))
		fmt.Fprintf(&b, "at the server: owner %d mode %o %q\n", st.Uid, st.Mode&0o7777, got)
	}
	return b.String()
}

// TestAccessServerDecides: the server's refusals (a POSIX ACL entry that
// denies a user a file others may read, a group the user is in only past
// the 16 that AUTH_SYS carries) and its grants (on an all_squash export,
// the maker of a file is its anonymous owner there, which the mode bits
// do not show) reach the caller at the same call, with the same errno, on
// nfsrdma-mount as on the kernel's mount; pages another user's read left
// in the cache are not served to the refused user.
func TestAccessServerDecides(t *testing.T) {
	bin := mountBinary(t)
	top := fmt.Sprintf("access-%d", os.Getpid())
	scenario := func(t *testing.T, export string, fn func(dir, srv string) string, wants ...string) {
		kernel, ours := accessMounts(t, bin, serverAddr.String()+":"+export)
		for _, side := range []string{"k", "o"} {
			d := filepath.Join(export, top, side)
			if err := os.MkdirAll(d, 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(filepath.Join(export, top), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(d, 0o777); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { os.RemoveAll(filepath.Join(export, top)) })
		k := fn(filepath.Join(kernel, top, "k"), filepath.Join(export, top, "k"))
		o := fn(filepath.Join(ours, top, "o"), filepath.Join(export, top, "o"))
		// The scenario means something only if the kernel's mount shows
		// the server's decision.
		for _, w := range wants {
			if !strings.Contains(k, w) {
				t.Errorf("the kernel's mount: no %q:\n%s", w, k)
			}
		}
		if k != o {
			t.Errorf("the mounts differ:\nkernel:\n%sours:\n%s", k, o)
		} else {
			t.Logf("both mounts:\n%s", k)
		}
	}
	t.Run("acl-deny", func(t *testing.T) {
		scenario(t, insecureExportDir, func(dir, srv string) string { return aclRun(t, dir, srv) },
			"uid 1001: open ok", "uid 1002 after 1001: open EACCES", "access R_OK: EACCES")
	})
	t.Run("17-groups", func(t *testing.T) {
		scenario(t, insecureExportDir, func(dir, srv string) string { return groupsRun(t, dir, srv) },
			"the 17th grants: open EACCES")
	})
	t.Run("all-squash", func(t *testing.T) {
		scenario(t, openerSquashDir, squashRun,
			"reopen for writing ok", "chmod 600 ok", "owner 1500 mode 600")
	})
}
