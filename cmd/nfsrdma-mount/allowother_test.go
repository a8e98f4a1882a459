package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nfsrdma/nfsrdma/fusefs/fusefstest"
)

// TestUserAllowOther: fuse.conf's user_allow_other as fusermount reads it.
func TestUserAllowOther(t *testing.T) {
	for _, tc := range []struct {
		conf string
		want bool
	}{
		{"user_allow_other\n", true},
		{"# mount_max = 1000\n  user_allow_other  \n", true},
		{"user_allow_other # let users share\n", true},
		{"mount_max = 1000", false},
		{"#user_allow_other\n", false},
		{"# user_allow_other\n", false},
		{"user_allow_others\n", false},
		{"", false},
	} {
		path := filepath.Join(t.TempDir(), "fuse.conf")
		if err := os.WriteFile(path, []byte(tc.conf), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := userAllowOther(path); err != nil || got != tc.want {
			t.Errorf("%q: %v, %v; want %v", tc.conf, got, err, tc.want)
		}
	}
}

// TestAllowOtherDecision: root's mounts are shared unless noallow_other; a
// user's are private unless allow_other, which needs user_allow_other.
func TestAllowOtherDecision(t *testing.T) {
	dir := t.TempDir()
	with := filepath.Join(dir, "with")
	without := filepath.Join(dir, "without")
	os.WriteFile(with, []byte("user_allow_other\n"), 0o644)
	os.WriteFile(without, []byte("# user_allow_other\n"), 0o644)
	saved := fuseConf
	t.Cleanup(func() { fuseConf = saved })
	for _, tc := range []struct {
		opts, conf string
		euid       int
		want       bool
		err        string // in the refusal; "": none
	}{
		{opts: "", euid: 0, want: true},
		{opts: "noallow_other", euid: 0, want: false},
		{opts: "allow_other", euid: 0, conf: without, want: true},
		{opts: "", euid: 1001, want: false},
		{opts: "noallow_other", euid: 1001, want: false},
		{opts: "allow_other", euid: 1001, conf: with, want: true},
		{opts: "noallow_other,allow_other", euid: 1001, conf: with, want: true},
		{opts: "allow_other,noallow_other", euid: 1001, conf: without, want: false},
		{opts: "allow_other", euid: 1001, conf: without, err: "has the line user_allow_other, and it has none"},
		{opts: "allow_other", euid: 1001, conf: filepath.Join(dir, "missing"), err: "and there is no " + filepath.Join(dir, "missing")},
	} {
		o, err := parseOptions(tc.opts, false)
		if err != nil {
			t.Fatal(err)
		}
		fuseConf = tc.conf
		got, err := allowOther(o, tc.euid)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "user_allow_other") {
				t.Errorf("%q as %d: %v, %v; want a refusal saying %q", tc.opts, tc.euid, got, err, tc.err)
			}
		case err != nil || got != tc.want:
			t.Errorf("%q as %d: %v, %v; want %v", tc.opts, tc.euid, got, err, tc.want)
		}
	}
}

// TestNoAllowOther: a root mount is open to other users (as mount.nfs's
// are); with noallow_other another user's stat in it gets EACCES from the
// kernel, and the mount still serves root.
func TestNoAllowOther(t *testing.T) {
	requireFUSE(t)
	srv := fusefstest.Start(t, fusefstest.Disk)
	if err := os.WriteFile(filepath.Join(srv.Dir, "shared"), []byte("for all"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A path the other user can walk (t.TempDir's parents are 0700).
	base, err := os.MkdirTemp("", "noallowother-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	for _, tc := range []struct {
		opt    string
		shared bool
	}{{"", true}, {"noallow_other", false}} {
		dir := filepath.Join(base, "mnt"+tc.opt)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		opts := tcpOpts(srv)
		if tc.opt != "" {
			opts += "," + tc.opt
		}
		if code, _, errs := cli("nfsrdma-mount", "-o", opts, "127.0.0.1:/", dir); code != 0 {
			t.Fatalf("mount -o %s: exit %d: %s", opts, code, errs)
		}
		t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
		cmd := exec.Command("/bin/cat", filepath.Join(dir, "shared"))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if tc.shared {
			if err != nil || string(out) != "for all" {
				t.Errorf("%s: another user reading a 0644 file: %q, %v", opts, out, err)
			}
		} else if err == nil || !strings.Contains(string(out), "Permission denied") {
			t.Errorf("%s: another user read the root-only mount: %q, %v; want Permission denied", opts, out, err)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "shared")); err != nil || string(b) != "for all" {
			t.Errorf("%s: root reading: %q, %v", opts, b, err)
		}
		if code, _, errs := cli("nfsrdma-mount", "-u", dir); code != 0 {
			t.Fatalf("unmount: %s", errs)
		}
	}
}
