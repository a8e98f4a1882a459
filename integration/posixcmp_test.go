//go:build integration

package integration

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The POSIX comparison: a few hundred cases, each one system call (or a
// short sequence) made by a given user on a fresh directory of the
// root_squash export, run on the kernel's NFS/RDMA mount and on
// nfsrdma-mount's mount of the same export. Both must give the same errno
// and leave the same state (mode, owner, size, links, times as the server
// and as the client see them). The cases are combinations of operation ×
// actor (root, the file's owner, a member of its group, another user) ×
// mode bits of the file or of its directory, plus names of 255 and 256
// bytes and times outside NFSv3's 32 bits.

// pcActor is a user the cases run as.
type pcActor struct {
	name     string
	uid, gid uint32
	groups   []uint32
}

var (
	pcRoot   = pcActor{"root", 0, 0, nil}                          // nobody (65534) on the export
	pcOwner  = pcActor{"owner", 1001, 1001, []uint32{1001, 1004}}  // owns d and f; also in group 1004
	pcMember = pcActor{"member", 1002, 1002, []uint32{1002, 1001}} // in f's and d's group
	pcOther  = pcActor{"other", 1003, 1003, []uint32{1003}}        // owns g
	pcActors = []pcActor{pcRoot, pcOwner, pcMember, pcOther}
)

// asActor runs fn on a thread of its own with a's credentials (uid, gid,
// supplementary groups, set for that thread only by the raw system calls)
// and returns its result. The thread is never given back to the runtime: it
// ends with its goroutine, credentials and all.
func asActor(a pcActor, fn func() string) string {
	ch := make(chan string, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if a.uid != 0 {
			if err := setThreadCred(a); err != nil {
				ch <- "credential: " + err.Error()
				return
			}
		}
		ch <- fn()
	}()
	return <-ch
}

func setThreadCred(a pcActor) error {
	gs := slices.Clone(a.groups)
	if len(gs) == 0 {
		gs = []uint32{a.gid}
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_SETGROUPS, uintptr(len(gs)), uintptr(unsafe.Pointer(&gs[0])), 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	runtime.KeepAlive(gs)
	if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESGID, uintptr(a.gid), uintptr(a.gid), uintptr(a.gid)); e != 0 {
		return fmt.Errorf("setresgid: %w", e)
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, uintptr(a.uid), uintptr(a.uid), uintptr(a.uid)); e != 0 {
		return fmt.Errorf("setresuid: %w", e)
	}
	if u, _, _ := syscall.RawSyscall(syscall.SYS_GETEUID, 0, 0, 0); uint32(u) != a.uid {
		return fmt.Errorf("euid %d after setresuid(%d)", u, a.uid)
	}
	return nil
}

// en names err's errno ("ok" for nil).
func en(err error) string {
	if err == nil {
		return "ok"
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return unix.ErrnoName(e)
	}
	return err.Error()
}

// pcObj is an object made in the case's directory on the server, as root,
// before the case runs.
type pcObj struct {
	name     string
	dir      bool
	mode     uint32 // with setuid, setgid and sticky bits
	uid, gid int
}

// pcCase is one comparison.
type pcCase struct {
	name string
	who  pcActor
	dir  uint32  // mode of the case directory d (owned by 1001:1001)
	objs []pcObj // made in d
	// op runs as who, with d the case directory through the mount, and
	// describes what each step returned.
	op   func(d string) string
	look []string // names in d whose state is compared ("." is d)
}

// The objects of the cases: f (the owner's file), g (another user's), s
// (an empty directory of the owner's).
func pcF(mode uint32) pcObj { return pcObj{name: "f", mode: mode, uid: 1001, gid: 1001} }

var (
	pcG = pcObj{name: "g", mode: 0o644, uid: 1003, gid: 1003}
	pcS = pcObj{name: "s", dir: true, mode: 0o755, uid: 1001, gid: 1001}
)

// pcFixedTime is every object's mtime and atime when made.
var pcFixedTime = time.Unix(1_000_000_000, 0)

func fileOp(fn func(p string) string) func(d string) string {
	return func(d string) string { return fn(filepath.Join(d, "f")) }
}

func openOp(flag int, write bool) func(p string) string {
	return func(p string) string {
		f, err := os.OpenFile(p, flag, 0)
		if err != nil {
			return "open=" + en(err)
		}
		defer f.Close()
		var ioErr error
		if write {
			_, ioErr = f.Write([]byte("x"))
		} else if flag&(os.O_WRONLY|os.O_RDWR) == 0 {
			_, ioErr = f.Read(make([]byte, 1))
		}
		if errors.Is(ioErr, io.EOF) {
			ioErr = nil
		}
		return "open=ok io=" + en(ioErr) + " close=" + en(f.Close())
	}
}

func utimes(p string, sec int64) error {
	ts := []unix.Timespec{{Sec: sec}, {Sec: sec}}
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// posixCases generates the cases.
func posixCases() []pcCase {
	var cs []pcCase
	add := func(c pcCase) { cs = append(cs, c) }
	// Access by mode bits: the file's, in a directory all may search.
	accessOps := []struct {
		name string
		op   func(d string) string
		look []string
	}{
		{"read", fileOp(openOp(os.O_RDONLY, false)), []string{"f"}},
		{"write", fileOp(openOp(os.O_WRONLY, true)), []string{"f"}},
		{"open-trunc", fileOp(openOp(os.O_WRONLY|os.O_TRUNC, false)), []string{"f"}},
		{"truncate", fileOp(func(p string) string { return en(syscall.Truncate(p, 3)) }), []string{"f"}},
		{"utimes-now", fileOp(func(p string) string { return en(unix.UtimesNanoAt(unix.AT_FDCWD, p, nil, 0)) }), []string{"f"}},
		{"link", func(d string) string { return en(os.Link(filepath.Join(d, "f"), filepath.Join(d, "n"))) }, []string{"f", "n"}},
	}
	for _, o := range accessOps {
		for _, mode := range []uint32{0o000, 0o600, 0o060, 0o006, 0o644, 0o666, 0o444, 0o222} {
			for _, a := range pcActors {
				add(pcCase{name: fmt.Sprintf("%s/%04o/%s", o.name, mode, a.name), who: a, dir: 0o755,
					objs: []pcObj{pcF(mode)}, op: o.op, look: o.look})
			}
		}
	}
	// Ownership: what only the owner (or root) may do.
	ownerOps := []struct {
		name string
		f    pcObj
		op   func(p string) string
	}{
		{"chmod", pcF(0o644), func(p string) string { return en(os.Chmod(p, 0o640)) }},
		{"chmod-0", pcF(0o000), func(p string) string { return en(os.Chmod(p, 0o604)) }},
		{"chmod-suid", pcF(0o755), func(p string) string { return en(syscall.Chmod(p, 0o4755)) }},
		{"chmod-sgid-own-group", pcF(0o755), func(p string) string { return en(syscall.Chmod(p, 0o2755)) }},
		{"chmod-sgid-foreign-group", pcObj{name: "f", mode: 0o755, uid: 1001, gid: 1003},
			func(p string) string { return en(syscall.Chmod(p, 0o2755)) }},
		{"chmod-sticky-file", pcF(0o644), func(p string) string { return en(syscall.Chmod(p, 0o1644)) }},
		{"chown", pcF(0o644), func(p string) string { return en(os.Lchown(p, 1002, -1)) }},
		{"chown-same", pcF(0o644), func(p string) string { return en(os.Lchown(p, 1001, 1001)) }},
		{"chown-none", pcF(0o644), func(p string) string { return en(os.Lchown(p, -1, -1)) }},
		{"chgrp-member", pcF(0o644), func(p string) string { return en(os.Lchown(p, -1, 1004)) }},
		{"chgrp-foreign", pcF(0o644), func(p string) string { return en(os.Lchown(p, -1, 1003)) }},
		{"chown-suid", pcF(0o6755), func(p string) string { return en(os.Lchown(p, -1, 1004)) }},
		{"utimes-set", pcF(0o644), func(p string) string { return en(utimes(p, 1_500_000_000)) }},
		{"utimes-set-writable", pcF(0o666), func(p string) string { return en(utimes(p, 1_500_000_000)) }},
		{"utimes-now-writable", pcF(0o666), func(p string) string { return en(unix.UtimesNanoAt(unix.AT_FDCWD, p, nil, 0)) }},
		{"write-suid", pcF(0o6777), openOp(os.O_WRONLY, true)},
		{"truncate-suid", pcF(0o6777), func(p string) string { return en(syscall.Truncate(p, 0)) }},
	}
	for _, o := range ownerOps {
		for _, a := range pcActors {
			add(pcCase{name: fmt.Sprintf("%s/%s", o.name, a.name), who: a, dir: 0o755,
				objs: []pcObj{o.f}, op: fileOp(o.op), look: []string{"f"}})
		}
	}
	// The directory's mode bits: making, removing and renaming names.
	in := func(d string, n string) string { return filepath.Join(d, n) }
	dirOps := []struct {
		name string
		op   func(d string) string
		look []string
	}{
		{"create", func(d string) string {
			f, err := os.OpenFile(in(d, "n"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
			if err == nil {
				err = f.Close()
			}
			return en(err)
		}, []string{".", "n"}},
		{"mkdir", func(d string) string { return en(syscall.Mkdir(in(d, "n"), 0o2750)) }, []string{".", "n"}},
		{"mkfifo", func(d string) string { return en(syscall.Mkfifo(in(d, "n"), 0o640)) }, []string{".", "n"}},
		{"symlink", func(d string) string { return en(os.Symlink("f", in(d, "n"))) }, []string{".", "n"}},
		{"link", func(d string) string { return en(os.Link(in(d, "f"), in(d, "n"))) }, []string{".", "f", "n"}},
		{"unlink-own", func(d string) string { return en(syscall.Unlink(in(d, "f"))) }, []string{".", "f"}},
		{"unlink-other", func(d string) string { return en(syscall.Unlink(in(d, "g"))) }, []string{".", "g"}},
		{"rename", func(d string) string { return en(syscall.Rename(in(d, "f"), in(d, "n"))) }, []string{".", "f", "n"}},
		{"rename-other", func(d string) string { return en(syscall.Rename(in(d, "g"), in(d, "n"))) }, []string{".", "g", "n"}},
		{"rename-over-other", func(d string) string { return en(syscall.Rename(in(d, "f"), in(d, "g"))) }, []string{".", "f", "g"}},
		{"rmdir", func(d string) string { return en(syscall.Rmdir(in(d, "s"))) }, []string{".", "s"}},
		{"readdir", func(d string) string {
			ents, err := os.ReadDir(d)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			return en(err) + " " + strings.Join(names, ",")
		}, []string{"."}},
		{"lookup", func(d string) string {
			var st syscall.Stat_t
			return en(syscall.Lstat(in(d, "f"), &st))
		}, []string{"."}},
	}
	for _, o := range dirOps {
		for _, mode := range []uint32{0o755, 0o775, 0o777, 0o1777, 0o555, 0o700, 0o2777} {
			for _, a := range pcActors {
				add(pcCase{name: fmt.Sprintf("%s/d%04o/%s", o.name, mode, a.name), who: a, dir: mode,
					objs: []pcObj{pcF(0o644), pcG, pcS}, op: o.op, look: o.look})
			}
		}
	}
	// Names of 255 bytes (NAME_MAX: allowed) and 256 (ENAMETOOLONG).
	for _, n := range []int{255, 256} {
		long := strings.Repeat("x", n)
		longOps := []struct {
			name string
			op   func(d string) string
		}{
			{"create", func(d string) string {
				f, err := os.OpenFile(in(d, long), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
				if err == nil {
					err = f.Close()
				}
				return en(err)
			}},
			{"mkdir", func(d string) string { return en(syscall.Mkdir(in(d, long), 0o755)) }},
			{"mkfifo", func(d string) string { return en(syscall.Mkfifo(in(d, long), 0o644)) }},
			{"symlink", func(d string) string { return en(os.Symlink("f", in(d, long))) }},
			{"symlink-target", func(d string) string { return en(os.Symlink(long, in(d, "n"))) }},
			{"link", func(d string) string { return en(os.Link(in(d, "f"), in(d, long))) }},
			{"rename", func(d string) string { return en(syscall.Rename(in(d, "f"), in(d, long))) }},
			{"lookup", func(d string) string {
				var st syscall.Stat_t
				return en(syscall.Lstat(in(d, long), &st))
			}},
			{"unlink", func(d string) string { return en(syscall.Unlink(in(d, long))) }},
			{"inner", func(d string) string {
				var st syscall.Stat_t
				return en(syscall.Lstat(in(in(d, long), "f"), &st))
			}},
		}
		for _, o := range longOps {
			for _, a := range []pcActor{pcOwner, pcRoot} {
				add(pcCase{name: fmt.Sprintf("name%d-%s/%s", n, o.name, a.name), who: a, dir: 0o777,
					objs: []pcObj{pcF(0o644)}, op: o.op, look: []string{".", "f", long, "n"}})
			}
		}
	}
	// Times beyond NFSv3's unsigned 32-bit seconds.
	for _, sec := range []int64{0, 1<<31 - 1, 1 << 31, 1<<32 - 1, 1 << 32, 1<<32 + 5, -1} {
		add(pcCase{name: fmt.Sprintf("utimes-%d/owner", sec), who: pcOwner, dir: 0o755,
			objs: []pcObj{pcF(0o644)}, op: fileOp(func(p string) string { return en(utimes(p, sec)) }), look: []string{"f"}})
	}
	return cs
}

// pcSetup makes the case's directory and objects at dir on the server.
func pcSetup(c pcCase, dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	for _, o := range c.objs {
		p := filepath.Join(dir, o.name)
		var err error
		if o.dir {
			err = os.Mkdir(p, 0o700)
		} else {
			err = os.WriteFile(p, []byte("content\n"), 0o600)
		}
		if err == nil {
			err = os.Lchown(p, o.uid, o.gid) // before chmod: chown clears setuid and setgid
		}
		if err == nil {
			err = syscall.Chmod(p, o.mode)
		}
		if err == nil {
			err = os.Chtimes(p, pcFixedTime, pcFixedTime)
		}
		if err != nil {
			return err
		}
	}
	if err := os.Lchown(dir, 1001, 1001); err != nil {
		return err
	}
	return syscall.Chmod(dir, c.dir)
}

// pcStat describes name's state, or the errno of lstat.
func pcStat(p string, start time.Time) string {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return en(err)
	}
	mt := time.Unix(st.Mtim.Unix())
	var mtime string
	switch {
	case mt.Equal(pcFixedTime):
		mtime = "fixed"
	case !mt.Before(start.Add(-2*time.Second)) && mt.Before(time.Now().Add(2*time.Second)):
		mtime = "now"
	default:
		mtime = fmt.Sprint(st.Mtim.Sec)
	}
	size := fmt.Sprint(st.Size)
	if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		size = "-" // a directory's size is the server file system's business
	}
	return fmt.Sprintf("%07o %d:%d size %s nlink %d mtime %s", st.Mode, st.Uid, st.Gid, size, st.Nlink, mtime)
}

// pcRun runs c on the mount at mnt, in directory sub of the export (made
// on the server at srv), and describes the result and the state left.
func pcRun(c pcCase, srv, mnt string) string {
	if err := pcSetup(c, srv); err != nil {
		return "setup: " + err.Error()
	}
	start := time.Now()
	var b strings.Builder
	fmt.Fprintf(&b, "result: %s\n", asActor(c.who, func() string { return c.op(mnt) }))
	for _, n := range c.look {
		fmt.Fprintf(&b, "%.20s server: %s\n", n, pcStat(filepath.Join(srv, n), start))
		fmt.Fprintf(&b, "%.20s client: %s\n", n, pcStat(filepath.Join(mnt, n), start))
	}
	return b.String()
}

// posixKnownDiffs are the cases where nfsrdma-mount is known to differ from
// the kernel's mount, by pattern (path.Match on the case name), with the
// reason. A listed pattern that no longer differs fails the test: remove it.
var posixKnownDiffs = map[string]string{
	// None. Root's lstat of a name in a directory root may not search
	// (d0700, squashed to nobody) used to be answered from FUSE's entry
	// and attribute caches, since default_permissions lets root
	// (CAP_DAC_OVERRIDE) through locally; fusefs now gives the kernel
	// the names of such directories with no entry timeout on allow_other
	// mounts, and answers root's walks there by what the server says
	// (fusefs/private.go).
}

// TestPosixCompare runs the cases on the kernel's mount and on
// nfsrdma-mount's, over RDMA, of the bed's root_squash export, and fails
// for every case whose errno or resulting state differs.
func TestPosixCompare(t *testing.T) {
	bin := mountBinary(t)
	ours := mountNFSRDMA(t, bin)
	kernel := mountKernel(t)
	for _, m := range []string{ours, kernel} {
		// The other users must reach the mount points.
		if err := os.Chmod(filepath.Dir(m), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	top := fmt.Sprintf("posixcmp-%d", os.Getpid())
	for _, side := range []string{"k", "o"} {
		if err := os.MkdirAll(filepath.Join(exportDir, top, side), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	defer os.RemoveAll(filepath.Join(exportDir, top))
	defer watchMount(t, ours, 10*time.Minute)()

	cases := posixCases()
	differs := map[string]bool{}
	var diffs, known int
	seen := map[string]int{} // outcomes of the kernel's mount
	started := time.Now()
	for i, c := range cases {
		sub := fmt.Sprintf("c%03d", i)
		k := pcRun(c, filepath.Join(exportDir, top, "k", sub), filepath.Join(kernel, top, "k", sub))
		o := pcRun(c, filepath.Join(exportDir, top, "o", sub), filepath.Join(ours, top, "o", sub))
		if strings.HasPrefix(k, "setup:") || strings.HasPrefix(o, "setup:") || strings.Contains(k, "credential:") {
			t.Fatalf("%s: kernel %s; ours %s", c.name, k, o)
		}
		for _, e := range []string{"result: ok", "EACCES", "EPERM", "ENAMETOOLONG"} {
			if strings.Contains(k, e) {
				seen[e]++
			}
		}
		if c.name == "create/d0777/root" && !strings.Contains(k, "n server: 0100640 65534:65534") {
			t.Errorf("root's file on the kernel's mount is not nobody's (root_squash):\n%s", k)
		}
		if k == o {
			continue
		}
		differs[c.name] = true
		why := ""
		for pat, reason := range posixKnownDiffs {
			if ok, _ := path.Match(pat, c.name); ok {
				why = reason
			}
		}
		if why != "" {
			known++
			t.Logf("%s (%s) differs, known: %s\nkernel:\n%sours:\n%s", c.name, sub, why, k, o)
			continue
		}
		diffs++
		t.Errorf("%s (%s) differs:\nkernel:\n%sours:\n%s", c.name, sub, k, o)
	}
	// The cases mean something only if the kernel's mount both allows and
	// refuses, for each reason.
	for _, e := range []string{"result: ok", "EACCES", "EPERM", "ENAMETOOLONG"} {
		if seen[e] < 5 {
			t.Errorf("only %d cases gave %q on the kernel's mount: %v", seen[e], e, seen)
		}
	}
	t.Logf("the kernel's mount: %v", seen)
	for pat := range posixKnownDiffs {
		if !slices.ContainsFunc(slices.Collect(maps.Keys(differs)), func(n string) bool { ok, _ := path.Match(pat, n); return ok }) {
			t.Errorf("known difference %q no longer differs: remove it from posixKnownDiffs", pat)
		}
	}
	t.Logf("%d cases in %.1f s: %d same, %d differ (%d of them known)", len(cases), time.Since(started).Seconds(),
		len(cases)-diffs-known, diffs+known, known)
}
