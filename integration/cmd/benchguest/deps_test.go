package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The bench binary does not link package testing: testing registers its
// -test.* flags in every program that imports it, and pulls its runtime
// into a binary that measures. Its helpers come from packages written for
// programs (verbs/rcpair), not from the test suites (verbs/verbstest).
func TestNoTestingPackage(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(goBin); err != nil {
			t.Fatalf("no go command in PATH or GOROOT (%v): the dependency check needs it", err)
		}
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "testing" {
			t.Fatalf("benchguest links package testing; see which of its packages imports it with go list -f '{{.ImportPath}} {{.Imports}}' -deps .")
		}
	}
}
