//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func nowSeconds() float64 { return float64(time.Now().UnixNano()) / 1e9 }

// ourOpCalls returns the calls of NFS procedure op (READ, WRITE...) that
// nfsrdma-mount stats reports for the mount at dir.
func ourOpCalls(t *testing.T, bin, dir, op string) int {
	t.Helper()
	code, out := runCmd(t, bin, "stats", dir)
	if code != 0 {
		t.Fatalf("stats: exit %d: %s", code, out)
	}
	m := regexp.MustCompile(`(?m)^\s*` + op + `: calls (\d+)`).FindStringSubmatch(out)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// kernelOpCalls returns the operations of NFS procedure op the kernel's
// mount at dir sent, from /proc/self/mountstats.
func kernelOpCalls(t *testing.T, dir, op string) int {
	t.Helper()
	f, err := os.Open("/proc/self/mountstats")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "device ") {
			in = strings.Contains(line, " mounted on "+dir+" ")
			continue
		}
		if !in {
			continue
		}
		fs := strings.Fields(line)
		if len(fs) >= 2 && fs[0] == op+":" {
			n, _ := strconv.Atoi(fs[1])
			return n
		}
	}
	return 0
}

// fioIOPS runs one fio job and returns its read and write IOPS and I/Os.
func fioIOPS(t *testing.T, args ...string) (iops float64, ios int64) {
	t.Helper()
	cmd := exec.Command("fio", append(args, "--output-format=json")...)
	cmd.Dir = t.TempDir()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var res struct {
		Jobs []struct {
			Error int `json:"error"`
			Read  struct {
				IOPS     float64 `json:"iops"`
				TotalIOs int64   `json:"total_ios"`
			} `json:"read"`
			Write struct {
				IOPS     float64 `json:"iops"`
				TotalIOs int64   `json:"total_ios"`
			} `json:"write"`
		} `json:"jobs"`
	}
	// fio may print warnings before its JSON.
	out := stdout.Bytes()
	if i := bytes.IndexByte(out, '{'); i > 0 {
		out = out[i:]
	}
	if jerr := json.Unmarshal(out, &res); jerr != nil && err == nil {
		err = jerr
	}
	if err != nil || len(res.Jobs) != 1 || res.Jobs[0].Error != 0 {
		t.Fatalf("fio %s: %v\n%s\n%.2000s", strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	j := res.Jobs[0]
	return j.Read.IOPS + j.Write.IOPS, j.Read.TotalIOs + j.Write.TotalIOs
}

// TestFusefsRandReadAmplification: fio random reads of 4 KiB (direct I/O)
// on a 64 MiB file cost one READ each through nfsrdma-mount, as through the
// kernel's mount; the IOPS of both are logged side by side.
func TestFusefsRandReadAmplification(t *testing.T) {
	bin := mountBinary(t)
	name := fmt.Sprintf("randread-%d", os.Getpid())
	data := make([]byte, 64<<20)
	rand.Read(data)
	if err := os.WriteFile(filepath.Join(exportDir, name), data, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(filepath.Join(exportDir, name))
	ours := mountNFSRDMA(t, bin)
	kernel := mountKernel(t)
	for _, qd := range []int{1, 16} {
		for _, m := range []struct {
			what, dir string
			reads     func() int
		}{
			{"kernel", kernel, func() int { return kernelOpCalls(t, kernel, "READ") }},
			{"nfsrdma-mount", ours, func() int { return ourOpCalls(t, bin, ours, "READ") }},
		} {
			before := m.reads()
			iops, ios := fioIOPS(t, "--name=rr", "--filename="+filepath.Join(m.dir, name), "--rw=randread", "--bs=4k",
				"--ioengine=libaio", "--direct=1", fmt.Sprintf("--iodepth=%d", qd), "--runtime=8", "--time_based", "--size=64m")
			reads := m.reads() - before
			if m.what == "nfsrdma-mount" {
				t.Logf("nfsrdma-mount totals after qd%d:\n%s", qd, opLines(t, bin, ours))
			}
			t.Logf("randread 4k qd%d %s: %.0f IOPS, %d I/Os, %d READs (%.2f per I/O)", qd, m.what, iops, ios, reads, float64(reads)/float64(max(ios, 1)))
			if m.what == "nfsrdma-mount" && (ios == 0 || float64(reads) > 1.05*float64(ios)+4) {
				t.Errorf("qd%d: %d READs for %d random reads of 4 KiB", qd, reads, ios)
			}
		}
	}
}

// TestFusefsCloseToOpenWithKernel: a file written and closed through one
// mount is read fresh through the other, both ways, though each had the
// old content cached.
func TestFusefsCloseToOpenWithKernel(t *testing.T) {
	bin := mountBinary(t)
	ours := mountNFSRDMA(t, bin)
	kernel := mountKernel(t)
	name := fmt.Sprintf("cto-%d", os.Getpid())
	defer os.Remove(filepath.Join(exportDir, name))
	write := func(dir, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(dir string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	write(ours, "version 1 from ours")
	if got := read(kernel); got != "version 1 from ours" {
		t.Fatalf("kernel mount read %q after our close", got)
	}
	_ = read(ours) // cached in both now
	for i, step := range []struct{ from, to, content string }{
		{kernel, ours, "version 2 kernel!!"},  // same length as the next
		{ours, kernel, "version 3 ours!!!!!"}, // and a length change
		{kernel, ours, "v4 kernel, shorter"},
		{ours, kernel, "v5 ours, same len!"},
	} {
		write(step.from, step.content)
		if got := read(step.to); got != step.content {
			t.Fatalf("step %d: read %q after the other mount closed %q", i, got, step.content)
		}
	}
}

// TestFusefsIdentity: on the bed's root_squash export, through the kernel's
// mount and through nfsrdma-mount's, what two local users make is theirs on
// the server and what root makes is nobody's (65534): each caller's own
// AUTH_SYS credential. What either mount refuses, and with which errno, the
// other refuses the same way. (TestPosixCompare compares many more cases.)
func TestFusefsIdentity(t *testing.T) {
	bin := mountBinary(t)
	mounts := []struct{ what, dir string }{{"kernel", mountKernel(t)}, {"nfsrdma-mount", mountNFSRDMA(t, bin)}}
	top := fmt.Sprintf("ident-%d", os.Getpid())
	defer os.RemoveAll(filepath.Join(exportDir, top))
	const nobody = 65534
	refusals := map[string][]string{}
	for _, m := range mounts {
		// The other users must reach the mount point.
		if err := os.Chmod(filepath.Dir(m.dir), 0o755); err != nil {
			t.Fatal(err)
		}
		srv := filepath.Join(exportDir, top, m.what)
		if err := os.MkdirAll(srv, 0o777); err != nil {
			t.Fatal(err)
		}
		os.Chmod(srv, 0o777)
		dir := filepath.Join(m.dir, top, m.what)
		for _, a := range []pcActor{pcOwner, pcMember, pcRoot} {
			name := filepath.Join(dir, "by-"+a.name)
			res := asActor(a, func() string {
				err := os.WriteFile(name, []byte("hello\n"), 0o644)
				if err == nil {
					err = os.Mkdir(name+".d", 0o755)
				}
				return en(err)
			})
			if res != "ok" {
				t.Fatalf("%s: as %s (uid %d): %s", m.what, a.name, a.uid, res)
			}
			wantUID, wantGID := a.uid, a.gid
			if a.uid == 0 {
				wantUID, wantGID = nobody, nobody
			}
			for _, f := range []string{"by-" + a.name, "by-" + a.name + ".d"} {
				var st syscall.Stat_t
				if err := syscall.Stat(filepath.Join(srv, f), &st); err != nil {
					t.Fatal(err)
				}
				if st.Uid != wantUID || st.Gid != wantGID {
					t.Errorf("%s: %s made by %s (uid %d) is owned by %d:%d on the server, want %d:%d", m.what, f, a.name, a.uid, st.Uid, st.Gid, wantUID, wantGID)
				}
				// And as the client shows it.
				if err := syscall.Stat(filepath.Join(dir, f), &st); err != nil || st.Uid != wantUID || st.Gid != wantGID {
					t.Errorf("%s: %s shows as owned by %d:%d (%v), want %d:%d", m.what, f, st.Uid, st.Gid, err, wantUID, wantGID)
				}
			}
		}
		owners := filepath.Join(dir, "by-owner")
		groups := filepath.Join(dir, "group-readable") // 0640, group 1001, which the member is in
		if res := asActor(pcOwner, func() string {
			if err := os.WriteFile(groups, []byte("for the group\n"), 0o640); err != nil {
				return en(err)
			}
			return en(os.Chmod(owners, 0o600))
		}); res != "ok" {
			t.Fatalf("%s: the owner's chmod of its file: %s", m.what, res)
		}
		for _, step := range []struct {
			what string
			who  pcActor
			want string
			op   func() error
		}{
			{"member writes into the owner's 0755 directory", pcMember, "EACCES", func() error { return os.WriteFile(filepath.Join(owners+".d", "x"), nil, 0o644) }},
			{"root writes into the owner's 0755 directory", pcRoot, "EACCES", func() error { return os.WriteFile(filepath.Join(owners+".d", "x"), nil, 0o644) }},
			{"member reads the owner's 0600 file", pcMember, "EACCES", func() error { _, err := os.ReadFile(owners); return err }},
			{"root reads the owner's 0600 file", pcRoot, "EACCES", func() error { _, err := os.ReadFile(owners); return err }},
			{"owner reads its 0600 file", pcOwner, "ok", func() error { _, err := os.ReadFile(owners); return err }},
			// The server takes the caller's supplementary groups from the credential.
			{"member reads the owner's 0640 file by its group", pcMember, "ok", func() error { _, err := os.ReadFile(groups); return err }},
			{"other reads the owner's 0640 file", pcOther, "EACCES", func() error { _, err := os.ReadFile(groups); return err }},
			{"member chmods the owner's file", pcMember, "EPERM", func() error { return os.Chmod(owners, 0o666) }},
			{"root chmods the owner's file", pcRoot, "EPERM", func() error { return os.Chmod(owners, 0o666) }},
			{"root chowns the member's file", pcRoot, "EPERM", func() error { return os.Chown(filepath.Join(dir, "by-member"), 0, 0) }},
			{"owner chowns its file to the member", pcOwner, "EPERM", func() error { return os.Chown(owners, int(pcMember.uid), -1) }},
			{"owner removes root's file (0777 directory)", pcOwner, "ok", func() error { return os.Remove(filepath.Join(dir, "by-root")) }},
		} {
			got := asActor(step.who, func() string { return en(step.op()) })
			if got != step.want {
				t.Errorf("%s: %s: %s, want %s", m.what, step.what, got, step.want)
			}
			refusals[m.what] = append(refusals[m.what], step.what+": "+got)
		}
	}
	if !slices.Equal(refusals["kernel"], refusals["nfsrdma-mount"]) {
		t.Errorf("the mounts differ:\nkernel:        %q\nnfsrdma-mount: %q", refusals["kernel"], refusals["nfsrdma-mount"])
	}
}

// opLines returns the per-procedure lines of nfsrdma-mount stats.
func opLines(t *testing.T, bin, dir string) string {
	t.Helper()
	_, out := runCmd(t, bin, "stats", dir)
	var b strings.Builder
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, ": calls ") {
			if i := strings.Index(l, " sent "); i > 0 {
				j := strings.Index(l, " rtt_mean ")
				k := strings.Index(l, " hist")
				if j > 0 && k > j {
					l = l[:i] + l[j:k]
				}
			}
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// kernelOps returns the non-zero per-op counts of the kernel mount at dir.
func kernelOps(t *testing.T, dir string) map[string]int {
	t.Helper()
	ops := map[string]int{}
	for _, op := range []string{"GETATTR", "SETATTR", "LOOKUP", "ACCESS", "READ", "WRITE", "CREATE", "MKDIR", "REMOVE", "RMDIR", "READDIRPLUS", "COMMIT"} {
		if n := kernelOpCalls(t, dir, op); n > 0 {
			ops[op] = n
		}
	}
	return ops
}

// TestFusefsSmallFiles: tar -x of 500 files of 4 KiB, a cold cat and ls -lR
// of them and rm -rf, through both mounts, timed, with the RPCs each
// client sent. Each small file costs nfsrdma-mount one WRITE and no COMMIT.
func TestFusefsSmallFiles(t *testing.T) {
	bin := mountBinary(t)
	src := t.TempDir()
	const files = 500
	for i := range files {
		dir := filepath.Join(src, "tree", fmt.Sprintf("d%02d", i/50))
		os.MkdirAll(dir, 0o755)
		data := make([]byte, 4096)
		rand.Read(data)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d", i)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tarball := filepath.Join(t.TempDir(), "tree.tar")
	run(t, "tar", "-C", src, "-cf", tarball, "tree")
	ours := mountNFSRDMA(t, bin)
	kernel := mountKernel(t)
	for _, m := range []struct{ what, dir string }{{"kernel", kernel}, {"nfsrdma-mount", ours}} {
		top := filepath.Join(m.dir, fmt.Sprintf("small-%d-%s", os.Getpid(), strings.ReplaceAll(m.what, "-", "")))
		if err := os.Mkdir(top, 0o755); err != nil {
			t.Fatal(err)
		}
		steps := []struct {
			name string
			cmd  []string
		}{
			{"tar -x", []string{"tar", "--no-same-owner", "-C", top, "-xf", tarball}}, // root is nobody on the export
			{"ls -lR cold", []string{"sh", "-c", `ls -lR "$1" > /dev/null`, "sh", top}},
			{"cat cold", []string{"sh", "-c", `find "$1" -type f -exec cat {} + > /dev/null`, "sh", top}},
			{"rm -rf", []string{"rm", "-rf", top}},
		}
		for _, s := range steps {
			os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0)
			var before string
			var kbefore map[string]int
			if m.what == "kernel" {
				kbefore = kernelOps(t, m.dir)
			} else {
				before = opLines(t, bin, m.dir)
			}
			start := nowSeconds()
			run(t, s.cmd[0], s.cmd[1:]...)
			el := nowSeconds() - start
			if m.what == "kernel" {
				after := kernelOps(t, m.dir)
				var parts []string
				for op, n := range after {
					if d := n - kbefore[op]; d > 0 {
						parts = append(parts, fmt.Sprintf("%s %d", op, d))
					}
				}
				t.Logf("%s %s: %.2f s; RPCs: %s", m.what, s.name, el, strings.Join(parts, ", "))
			} else {
				after := opLines(t, bin, m.dir)
				t.Logf("%s %s: %.2f s; totals before:\n%safter:\n%s", m.what, s.name, el, before, after)
				if s.name == "tar -x" {
					w0, c0 := opCount(before, "WRITE"), opCount(before, "COMMIT")
					w1, c1 := opCount(after, "WRITE"), opCount(after, "COMMIT")
					if w1-w0 != files || c1-c0 != 0 {
						t.Errorf("tar -x of %d files of 4 KiB: %d WRITEs, %d COMMITs; want %d, 0", files, w1-w0, c1-c0, files)
					}
					// Every directory of the tree is made by this mount: it
					// knows their names, and the lookups before each mkdir
					// and create ask the server nothing.
					if l := opCount(after, "LOOKUP") - opCount(before, "LOOKUP"); l > 10 {
						t.Errorf("tar -x of %d files into directories the mount made: %d LOOKUPs, want none", files, l)
					}
				}
				if s.name == "rm -rf" {
					// rm opens every directory twice, the first time
					// to read one page: the second reads the replies
					// the first got (fusefs/dircache.go).
					const dirs = 2 + files/50 // top, tree, d00...
					if r := opCount(after, "READDIRPLUS") - opCount(before, "READDIRPLUS"); r > dirs+2 {
						t.Errorf("rm -rf of %d directories: %d READDIRPLUS calls, want one per directory", dirs, r)
					}
				}
			}
		}
	}
}

// fuseRequests returns the FUSE requests of kind op (SETATTR...) that
// nfsrdma-mount stats reports for the mount at dir.
func fuseRequests(t *testing.T, bin, dir, op string) int {
	t.Helper()
	code, out := runCmd(t, bin, "stats", dir)
	if code != 0 {
		t.Fatalf("stats: exit %d: %s", code, out)
	}
	m := regexp.MustCompile(`nfsrdma-fuse:.*\b` + op + ` (\d+) `).FindStringSubmatch(out)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestFusefsTarOwners: tar -x as root, on an export that does not squash
// root, of files whose owners, modes and times tar sets through the
// descriptor it wrote them with: by default each of tar's chmod, chown and
// utimes (a FUSE SETATTR request) is one SETATTR sent as tar made it, as
// the kernel client sends it; with defersetattr about one per file (merged
// at the close, fusefs/setattr.go). (The kernel's mount sends more: a
// SETATTR after each exclusive CREATE too.) What tar
// set is at the server when its close returns: tar --compare passes
// through the kernel's mount as through both of nfsrdma-mount's.
func TestFusefsTarOwners(t *testing.T) {
	bin := mountBinary(t)
	src := t.TempDir()
	const files = 100
	for i := range files {
		dir := filepath.Join(src, "t", fmt.Sprintf("d%d", i/25))
		os.MkdirAll(dir, 0o755)
		f := filepath.Join(dir, fmt.Sprintf("f%03d", i))
		if err := os.WriteFile(f, bytes.Repeat([]byte{byte('a' + i%26)}, 4096), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chmod(f, []os.FileMode{0o600, 0o644, 0o640, 0o755}[i%4])
		os.Chown(f, 1000+i%3, 1000+i%2)
		mt := time.Unix(1_000_000_000+int64(i), 0)
		os.Chtimes(f, mt, mt)
	}
	tarball := filepath.Join(t.TempDir(), "t.tar")
	run(t, "tar", "-C", src, "-cf", tarball, "t")
	kernel := t.TempDir()
	run(t, "mount", "-t", "nfs", "-o", "vers=3,proto=rdma,port=20049", insecureExportSpec, kernel)
	t.Cleanup(func() { exec.Command("umount", kernel).Run() })
	extract := func(m, top string) {
		if err := os.Mkdir(filepath.Join(m, top), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(filepath.Join(insecureExportDir, top)) })
		run(t, "tar", "-C", filepath.Join(m, top), "-xf", tarball)
	}
	type extraction struct{ mount, top string }
	top := fmt.Sprintf("tar-owners-%d-k", os.Getpid())
	before := kernelOpCalls(t, kernel, "SETATTR")
	extract(kernel, top)
	ksa := kernelOpCalls(t, kernel, "SETATTR") - before
	t.Logf("tar -x of %d files: the kernel's mount: %d SETATTR calls", files, ksa)
	if ksa < 2*files {
		t.Fatalf("tar -x of %d files: %d SETATTR calls through the kernel's mount: not the workload meant", files, ksa)
	}
	done := []extraction{{kernel, top}}
	for _, opt := range []string{"", "defersetattr"} {
		var opts []string
		if opt != "" {
			opts = append(opts, opt)
		}
		ours := mountNFSRDMASpec(t, bin, insecureExportSpec, opts...)
		top := fmt.Sprintf("tar-owners-%d-%s", os.Getpid(), cmp.Or(opt, "default"))
		before, fbefore := opLines(t, bin, ours), fuseRequests(t, bin, ours, "SETATTR")
		extract(ours, top)
		after, fsa := opLines(t, bin, ours), fuseRequests(t, bin, ours, "SETATTR")-fbefore
		done = append(done, extraction{ours, top})
		sa := opCount(after, "SETATTR") - opCount(before, "SETATTR")
		t.Logf("tar -x of %d files: nfsrdma-mount (%s): %d SETATTR calls for %d FUSE SETATTR requests", files, cmp.Or(opt, "default"), sa, fsa)
		switch {
		case fsa < 2*files:
			t.Errorf("tar -x of %d files (%s): %d FUSE SETATTR requests: not the workload meant", files, cmp.Or(opt, "default"), fsa)
		case opt == "" && sa != fsa:
			t.Errorf("tar -x of %d files by default: %d SETATTR calls for %d FUSE SETATTR requests, want one each", files, sa, fsa)
		case opt != "" && sa > files+3*5:
			t.Errorf("tar -x of %d files with %s: %d SETATTR calls, want one per file (and three per directory)", files, opt, sa)
		}
	}
	for _, e := range done {
		cmd := exec.Command("tar", "--compare", "-f", tarball)
		cmd.Dir = filepath.Join(e.mount, e.top)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("tar --compare through %s: %v\n%s", e.mount, err, out)
		}
	}
}

func opCount(lines, op string) int {
	m := regexp.MustCompile(`(?m)^\s*` + op + `: calls (\d+)`).FindStringSubmatch(lines)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
