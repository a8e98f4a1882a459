package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runMake runs make in the repository's root with args, and returns its
// combined output. GO=false: any build fails, so that a target that builds
// shows itself.
func runMake(t *testing.T, args ...string) (string, error) {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("no make under CI: the Makefile's install target must be tested there")
		}
		t.Skip("no make here: the Makefile's install target is not tested")
	}
	cmd := exec.Command("make", append([]string{"-C", "../..", "GO=false", "SETCAP="}, args...)...)
	// Not the flags and variables of a make that runs this test.
	for _, e := range os.Environ() {
		if k, _, _ := strings.Cut(e, "="); k != "MAKEFLAGS" && k != "MFLAGS" && k != "MAKELEVEL" {
			cmd.Env = append(cmd.Env, e)
		}
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// make install installs what make built and never builds (under sudo, Go
// is usually not in PATH, and a build leaves a root-owned _build behind).
func TestMakeInstallDoesNotBuild(t *testing.T) {
	build, dest := t.TempDir(), t.TempDir()
	out, err := runMake(t, "BUILD="+build, "DESTDIR="+dest, "install")
	if err == nil || !strings.Contains(out, "run make first as yourself") {
		t.Errorf("make install with nothing built: %v, want a failure saying to run make first:\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dest, "usr/local/bin/nfsrdma-mount")); err == nil {
		t.Errorf("make install with nothing built installed something")
	}

	bin := []byte("#!/bin/sh\necho built\n")
	if err := os.WriteFile(filepath.Join(build, "nfsrdma-mount"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err = runMake(t, "BUILD="+build, "DESTDIR="+dest, "install")
	if err != nil {
		t.Fatalf("make install of a built binary: %v\n%s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(dest, "usr/local/bin/nfsrdma-mount"))
	if err != nil || string(got) != string(bin) {
		t.Errorf("installed binary %q (%v), want the one built", got, err)
	}
	for _, h := range []string{"mount.nfsrdma", "mount.fuse.nfsrdma", "umount.nfsrdma", "umount.fuse.nfsrdma"} {
		if l, err := os.Readlink(filepath.Join(dest, "sbin", h)); err != nil || l != "/usr/local/bin/nfsrdma-mount" {
			t.Errorf("helper %s -> %q (%v)", h, l, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dest, "usr/local/share/man/man8/nfsrdma-mount.8")); err != nil {
		t.Errorf("man page: %v", err)
	}
	if !strings.Contains(out, "the package should run: setcap") {
		t.Errorf("no word of setcap for the package:\n%s", out)
	}
}
