//go:build integration

package integration

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// kernelACLCalls returns the NFSACL calls the kernel's mount at dir sent,
// as /proc/self/mountstats shows them: its per-op statistics are NFS's
// alone (nor does nfsstat -c count NFSACL), but the NFSACL client sends
// on the mount's transport, whose "xprt:" line counts every call sent
// (sends, the sixth number after the transport's name), so the NFSACL
// calls are the sends that are no NFS operation's transmission. ok is false when the
// mount's section has no transport line.
func kernelACLCalls(t *testing.T, dir string) (n int, ok bool) {
	t.Helper()
	f, err := os.Open("/proc/self/mountstats")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in, perOp := false, false
	sends, ops := -1, 0
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "device ") {
			in = strings.Contains(line, " mounted on "+dir+" ")
			perOp = false
			continue
		}
		if !in {
			continue
		}
		fs := strings.Fields(line)
		switch {
		case len(fs) >= 8 && fs[0] == "xprt:":
			sends, _ = strconv.Atoi(fs[7])
		case len(fs) >= 1 && fs[0] == "per-op":
			perOp = true
		case perOp && len(fs) >= 3 && strings.HasSuffix(fs[0], ":"):
			k, _ := strconv.Atoi(fs[2]) // its transmissions, as sends counts them
			ops += k
		}
	}
	if sends < 0 {
		return 0, false
	}
	return sends - ops, true
}

// TestACLListingCalls: ls -l of a directory, three times in a row, costs
// nfsrdma-mount no more GETACLs than the kernel's mount: one per object
// the first time, none while the attributes are trusted. The counts of
// both are logged.
func TestACLListingCalls(t *testing.T) {
	bin := mountBinary(t)
	bed := &semBed{t: t, bin: bin, mounts: map[string]string{}}
	kernel := bed.mount("kernel", exportDir, "")
	ours := bed.mount("ours", exportDir, "")
	top := filepath.Join(exportDir, fmt.Sprintf("acl-ls-%d", os.Getpid()))
	t.Cleanup(func() { os.RemoveAll(top) })
	const files = 8
	for i := range files {
		p := filepath.Join(top, fmt.Sprintf("f%d", i))
		if err := os.MkdirAll(top, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			run(t, "setfacl", "-m", "u:1002:r--", p)
		}
	}
	if err := os.Mkdir(filepath.Join(top, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "setfacl", "-d", "-m", "u:1002:rwx", filepath.Join(top, "d"))
	counts := map[string][]int{}
	for _, m := range []struct{ kind, dir string }{{"kernel", kernel}, {"ours", ours}} {
		dir := filepath.Join(m.dir, filepath.Base(top))
		for range 3 {
			before, found := kernelACLCalls(t, m.dir)
			if m.kind == "ours" {
				before, found = ourOpCalls(t, bin, m.dir, "NFSACL/GETACL"), true
			}
			out, err := exec.Command("ls", "-l", dir).CombinedOutput()
			if err != nil {
				t.Fatalf("%s: ls -l: %v: %s", m.kind, err, out)
			}
			if n := strings.Count(string(out), "+ "); n != files/2+1 {
				t.Errorf("%s: ls -l shows %d names with ACLs, want %d:\n%s", m.kind, n, files/2+1, out)
			}
			after, _ := kernelACLCalls(t, m.dir)
			if m.kind == "ours" {
				after = ourOpCalls(t, bin, m.dir, "NFSACL/GETACL")
			}
			if !found {
				counts[m.kind] = append(counts[m.kind], -1)
				continue
			}
			counts[m.kind] = append(counts[m.kind], after-before)
		}
	}
	// The names and the directory itself (ls looks at its argument too).
	const objects = files + 2
	t.Logf("NFSACL calls of three ls -l of %d objects: kernel %v, ours %v (-1: the kernel's mountstats shows no transport)", objects, counts["kernel"], counts["ours"])
	for i, n := range counts["ours"] {
		k := counts["kernel"][i]
		if k >= 0 && n > k {
			t.Errorf("ls -l #%d: %d GETACLs, the kernel's mount %d", i+1, n, k)
		}
		if n > objects || (i > 0 && n != 0) {
			t.Errorf("ls -l #%d: %d GETACLs for %d objects (want at most one each, none again while the attributes are trusted)", i+1, n, objects)
		}
	}
	if out, err := exec.Command("nfsstat", "-c").CombinedOutput(); err == nil {
		t.Logf("nfsstat -c:\n%s", out)
	}
}
