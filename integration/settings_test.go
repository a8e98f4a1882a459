//go:build integration

package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// matrixSettings are the nfsrdma-mount settings that `make bench`'s
// workload matrix measures (integration/bench: the defaults, and nconnect
// 2 and 4), each as extra -o options.
var matrixSettings = []struct {
	name  string
	opts  []string
	conns int
}{
	{"defaults", nil, 1},
	{"nconnect=2", []string{"nconnect=2"}, 2},
	{"nconnect=4", []string{"nconnect=4"}, 4},
}

// TestMountMatrixSettings: every setting the workload matrix measures
// keeps the data and the semantics, on the export and as the user the
// matrix uses (root, on the export that does not squash root):
//   - fio with crc32c verification in the matrix's shapes: direct 1 MiB
//     writes at depth 16 read back at 16, direct 4 KiB random writes at 64
//     read back at 64, buffered 1 MiB writes read back through the page
//     cache;
//   - a tree copied in with cp -a, compared with diff -r through the
//     kernel's mount and through nfsrdma-mount;
//   - go-fuse's POSIX suite on the nconnect mounts (TestPosix runs it
//     with the defaults);
//   - every connection of the mount carried calls, so that a setting
//     that fell back to one connection fails.
func TestMountMatrixSettings(t *testing.T) {
	bin := mountBinary(t)
	kernel := t.TempDir()
	run(t, "mount", "-t", "nfs", "-o", "vers=3,proto=rdma,port=20049", insecureExportSpec, kernel)
	t.Cleanup(func() { exec.Command("umount", kernel).Run() })
	src := t.TempDir()
	makeTree(t, src, 300)
	for _, s := range matrixSettings {
		t.Run(s.name, func(t *testing.T) {
			ours := mountNFSRDMASpec(t, bin, insecureExportSpec, s.opts...)
			top := fmt.Sprintf("settings-%s-%d", strings.ReplaceAll(s.name, "=", ""), os.Getpid())
			if err := os.Mkdir(filepath.Join(ours, top), 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(filepath.Join(insecureExportDir, top)) })
			dir := filepath.Join(ours, top)
			verify := []string{"--fallocate=none", "--verify=crc32c", "--verify_fatal=1", "--do_verify=1"}
			for _, job := range [][]string{
				{"--name=seq", "--rw=write", "--bs=1m", "--size=32m", "--ioengine=libaio", "--direct=1", "--iodepth=16"},
				{"--name=rand", "--rw=randwrite", "--bs=4k", "--size=4m", "--randrepeat=1", "--ioengine=libaio", "--direct=1", "--iodepth=64"},
				{"--name=buf", "--rw=write", "--bs=1m", "--size=16m", "--ioengine=psync", "--end_fsync=1"},
			} {
				args := slices.Concat(job, verify)
				runFio(t, slices.Concat(args, []string{"--directory=" + dir})...)
				// Passes that only read, at the same depth: through this
				// mount, then through the kernel's (what the server holds).
				runFio(t, slices.Concat(args, []string{"--directory=" + dir, "--verify_only=1"})...)
				runFio(t, slices.Concat(args, []string{"--directory=" + filepath.Join(kernel, top), "--verify_only=1"})...)
			}
			run(t, "cp", "-a", src, filepath.Join(dir, "tree"))
			want := treeListing(t, src)
			for _, m := range []string{filepath.Join(kernel, top), dir} {
				if code, out := runCmd(t, "diff", "-r", src, filepath.Join(m, "tree")); code != 0 {
					t.Fatalf("diff -r through %s: exit %d\n%.4000s", m, code, out)
				}
				if got := treeListing(t, filepath.Join(m, "tree")); got != want {
					t.Fatalf("cp -a: types, modes, owners, sizes or times through %s differ from the source:\n%s", m, lineDiff(want, got))
				}
			}
			if s.conns > 1 {
				runPosix(t, ours, insecureExportDir)
			}
			st := statsOf(t, bin, ours)
			if len(st.Transports) != s.conns {
				t.Fatalf("%d transports, want %d", len(st.Transports), s.conns)
			}
			for i, x := range st.Transports {
				if x.RDMA == nil || x.RDMA.Calls < 100 {
					t.Errorf("transport %d carried too few calls: %+v", i, x.RDMA)
				} else {
					t.Logf("transport %d: %d calls", i, x.RDMA.Calls)
				}
			}
		})
	}
}

// treeListing lists every entry under dir with its type, mode, owner,
// group, size and modification time, sorted; a symbolic link with its
// target instead of mode, size and time (cp -a sets a link's times, but
// not every server keeps them), a directory without its size (which
// depends on the file system).
func treeListing(t *testing.T, dir string) string {
	t.Helper()
	out, err := exec.Command("sh", "-c", `cd "$1" && find . -mindepth 1 \( -type l -printf '%P %y %U %G %l\n' \) -o \( -type d -printf '%P %y %m %U %G %T@\n' \) -o -printf '%P %y %m %U %G %s %T@\n' | sort`, "sh", dir).Output()
	if err != nil {
		t.Fatalf("listing %s: %v", dir, err)
	}
	return string(out)
}

// lineDiff returns the lines of a and b that the other lacks, at most 20
// of each.
func lineDiff(a, b string) string {
	in := func(s string) map[string]bool {
		m := make(map[string]bool)
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ma, mb := in(a), in(b)
	var d []string
	for _, side := range []struct {
		mark  string
		text  string
		other map[string]bool
	}{{"-", a, mb}, {"+", b, ma}} {
		n := 0
		for _, l := range strings.Split(side.text, "\n") {
			if l != "" && !side.other[l] && n < 20 {
				d = append(d, side.mark+" "+l)
				n++
			}
		}
	}
	return strings.Join(d, "\n")
}
