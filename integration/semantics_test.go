//go:build integration

package integration

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The two-client semantics suite: each scenario is a short program run by
// given local users on the kernel's NFS/RDMA mount and then, in a
// directory of its own, on nfsrdma-mount's mount of the same export, with
// a second, independent client of the export beside it where the scenario
// needs one: the kernel's own mount with nosharecache (its own caches), or
// the server's exported directory itself (local in the guest; its writes
// bypass NFS). What the program saw (bytes read, errnos, owners, modes
// with their set-user-ID and set-group-ID bits, times as nfs(5) defines
// them) is written as a transcript, and the two transcripts must be equal.
// Where a scenario is about when a change is seen, the times each mount
// took are compared too: ours may not take longer than the kernel's by
// more than the window the kernel's own behaviour shows for it (the
// attribute timeout for a name looked up, next to nothing for a listing,
// which the kernel revalidates when it opens the directory).
//
// A scenario is an entry of semScenarios (semantics_cases_test.go): its
// name (a subtest: -test.run 'TestSemantics/cto' runs one class), export
// and mount options, a setup made as root in its directory on the server,
// and its steps, each run by a user on "this" mount, on the "other"
// client or on the "server" (semRun.do), with what to compare logged
// (semRun.meta: a file as this mount, the other client and the server
// show it). The classes here: permissions the server decides (POSIX ACL
// entries that deny or grant beyond the mode, a default ACL, a caller's
// 17th group, which AUTH_SYS cannot carry, a mode changed on the other
// client), all_squash, names made by another client (and when they are
// seen), close-to-open after a listing, and times and metadata as the
// other client and the server see them. Locks, O_DIRECT, set-user-ID bits by
// tar and cp, unlinking or renaming open files, stale handles and
// root_squash switched live have scenarios of their own
// (coherence_test.go, opener_test.go, namespace_test.go).

// The users of the scenarios (only their credentials matter: the server
// takes them from AUTH_SYS, no name is looked up).
var (
	semRoot = pcActor{"root", 0, 0, nil}
	semU1   = pcActor{"u1001", 1001, 1001, []uint32{1001}}
	semU2   = pcActor{"u1002", 1002, 1002, []uint32{1002}}
	semU3   = pcActor{"u1003", 1003, 1003, []uint32{1003}}
	// semG17 is in 17 groups, 2001 to 2017; AUTH_SYS carries 16 of them
	// (RFC 5531: gids<16>), and the kernel client sends the first 16 of
	// its sorted list, so a right that only group 2017 grants is refused
	// by the server.
	semG17 = pcActor{"g17", 1005, 1005, semGroups(2001, 2017)}
	// semG16 is in 16 groups, 2001 to 2016: all of them reach the server.
	semG16 = pcActor{"g16", 1006, 1006, semGroups(2001, 2016)}
)

func semGroups(first, last uint32) []uint32 {
	var gs []uint32
	for g := first; g <= last; g++ {
		gs = append(gs, g)
	}
	return gs
}

// semFixed is the mtime and atime of every file a setup makes.
var semFixed = time.Unix(1_100_000_000, 0)

// semScenario is one entry of the suite.
type semScenario struct {
	name   string
	export string // the exported directory (its path on the server too)
	// opts are mount options given to both mounts under test and to the
	// other client.
	opts string
	// setup makes the scenario's objects in its directory on the server
	// (s.srv), as root; the directory is 0777 and root's.
	setup func(s *semRun) error
	// steps is the program: it writes its transcript with s.do and the
	// like, and may record how long something took with s.record.
	steps func(s *semRun)
	// kernelWant are lines the kernel's transcript must contain: what
	// makes the scenario test what it says.
	kernelWant []string
}

// semRun is a scenario being run on one of the mounts.
type semRun struct {
	t     *testing.T
	srv   string // the scenario's directory on the server
	mnt   string // through the mount under test ("this mount")
	other string // through the other client
	start time.Time
	mu    sync.Mutex
	out   strings.Builder
	took  map[string]semTook
}

// semTook is a time recorded by a scenario, and how much longer than the
// kernel's mount ours may take.
type semTook struct{ d, window time.Duration }

// log adds a line to the transcript.
func (s *semRun) log(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(&s.out, format+"\n", args...)
}

// dir returns the view where ("this", "other" or "server") of the
// scenario's directory.
func (s *semRun) dir(where string) string {
	switch where {
	case "this":
		return s.mnt
	case "other":
		return s.other
	case "server":
		return s.srv
	}
	panic("no view " + where)
}

// do runs fn as a on the view where ("this", "other" or "server") of the
// scenario's directory and logs what it returns.
func (s *semRun) do(where string, a pcActor, label string, fn func(d string) string) string {
	r := asActor(a, func() string { return fn(s.dir(where)) })
	s.log("%s %s %s: %s", where, a.name, label, r)
	return r
}

// record notes how long something took on this mount, for the comparison
// with the kernel's mount (logged, not in the transcript): ours may take
// window longer.
func (s *semRun) record(label string, d, window time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.took[label] = semTook{d, window}
}

// The operations of the scenarios, each describing its outcome.

// semRead opens p read-only and reads it to the end.
func semRead(p string) string {
	f, err := os.Open(p)
	if err != nil {
		return "open=" + en(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return "open=ok read=" + en(err)
	}
	return fmt.Sprintf("open=ok read=ok %q", b)
}

// semWrite opens p with flag (and perm when creating), writes data and
// closes it.
func semWrite(p string, flag int, perm os.FileMode, data string) string {
	f, err := os.OpenFile(p, flag, perm)
	if err != nil {
		return "open=" + en(err)
	}
	_, werr := f.Write([]byte(data))
	cerr := f.Close()
	return "open=ok write=" + en(werr) + " close=" + en(cerr)
}

// semStat describes p's type, mode, owner, size and links, or lstat's
// errno.
func semStat(p string) string {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return en(err)
	}
	size := fmt.Sprint(st.Size)
	if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		size = "-"
	}
	return fmt.Sprintf("%07o %d:%d size %s nlink %d", st.Mode, st.Uid, st.Gid, size, st.Nlink)
}

// semList lists dir's names, sorted.
func semList(dir string) string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return en(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return "[" + strings.Join(names, " ") + "]"
}

// semLsL is what ls -l does: the listing, then an lstat of each name.
func semLsL(dir string) string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return en(err)
	}
	var b strings.Builder
	for i, e := range ents {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(e.Name() + " " + semStat(filepath.Join(dir, e.Name())))
	}
	return b.String()
}

func semChmod(name string, mode uint32) func(d string) string {
	return func(d string) string { return en(syscall.Chmod(filepath.Join(d, name), mode)) }
}

func semChown(name string, uid, gid int) func(d string) string {
	return func(d string) string { return en(os.Lchown(filepath.Join(d, name), uid, gid)) }
}

// semTimes are a file's times.
type semTimes struct{ atime, mtime, ctime unix.Timespec }

// semLook returns p's stat, through an open (close-to-open: the client
// asks the server) when open is set and the open is allowed.
func semLook(p string, open bool) (st unix.Stat_t, how string, err error) {
	if open {
		fd, oerr := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
		if oerr == nil {
			err = unix.Fstat(fd, &st)
			unix.Close(fd)
			return st, "", err
		}
		how = " (open=" + en(oerr) + ", lstat)"
	}
	return st, how, unix.Lstat(p, &st)
}

// meta logs name's state as this mount, the other client (which opens it,
// so that close-to-open makes it ask the server) and the server show it:
// the server's times as "fixed" (the setup's), "new" (made since the
// scenario started) or their value, the clients' relative to the server's.
func (s *semRun) meta(name string, atime bool) {
	sst, _, serr := semLook(filepath.Join(s.srv, name), false)
	if serr != nil {
		s.log("%s server: %s", name, en(serr))
	}
	class := func(ts unix.Timespec) string {
		t := time.Unix(ts.Unix())
		switch {
		case t.Equal(semFixed):
			return "fixed"
		case !t.Before(s.start.Add(-time.Second)) && t.Before(time.Now().Add(time.Second)):
			return "new"
		}
		return fmt.Sprintf("%d.%09d", ts.Sec, ts.Nsec)
	}
	rel := func(ts, srv unix.Timespec) string {
		switch {
		case ts == srv:
			return "=server"
		case ts.Sec == srv.Sec && ts.Nsec/1000 == srv.Nsec/1000:
			return "=server(µs)"
		}
		return fmt.Sprintf("%d.%09d(server %d.%09d)", ts.Sec, ts.Nsec, srv.Sec, srv.Nsec)
	}
	line := func(st unix.Stat_t) string {
		size := fmt.Sprint(st.Size)
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			size = "-"
		}
		return fmt.Sprintf("%07o %d:%d size %s nlink %d", st.Mode, st.Uid, st.Gid, size, st.Nlink)
	}
	if serr == nil {
		at := ""
		if atime {
			at = " atime " + class(sst.Atim)
		}
		s.log("%s server: %s mtime %s ctime %s%s", name, line(sst), class(sst.Mtim), class(sst.Ctim), at)
	}
	for _, where := range []string{"this", "other"} {
		st, how, err := semLook(filepath.Join(s.dir(where), name), where == "other")
		if err != nil {
			s.log("%s %s: %s%s", name, where, en(err), how)
			continue
		}
		if serr != nil {
			s.log("%s %s: %s%s", name, where, line(st), how)
			continue
		}
		at := ""
		if atime {
			at = " atime " + rel(st.Atim, sst.Atim)
		}
		s.log("%s %s: %s mtime %s ctime %s%s%s", name, where, line(st), rel(st.Mtim, sst.Mtim), rel(st.Ctim, sst.Ctim), at, how)
	}
}

// semFile makes a regular file on the server with the given owner, mode
// (set-ID bits included) and content, its times semFixed.
func semFile(p string, uid, gid int, mode uint32, content string) error {
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		return err
	}
	if err := os.Lchown(p, uid, gid); err != nil { // before chmod: chown clears set-ID bits
		return err
	}
	if err := syscall.Chmod(p, mode); err != nil {
		return err
	}
	return os.Chtimes(p, semFixed, semFixed)
}

// semFiles is a setup that makes files.
func semFiles(files ...semFileSpec) func(s *semRun) error {
	return func(s *semRun) error {
		for _, f := range files {
			if err := semFile(filepath.Join(s.srv, f.name), f.uid, f.gid, f.mode, f.content); err != nil {
				return err
			}
			if f.acl != "" {
				if out, err := exec.Command("setfacl", "-m", f.acl, filepath.Join(s.srv, f.name)).CombinedOutput(); err != nil {
					return fmt.Errorf("setfacl -m %s: %v: %s", f.acl, err, out)
				}
			}
		}
		return nil
	}
}

type semFileSpec struct {
	name     string
	uid, gid int
	mode     uint32
	content  string
	acl      string // setfacl -m's argument, if any
}

// semBed holds the mounts the scenarios run on, made as needed: per export
// and options, the kernel's mount, ours, and the other client (the
// kernel's, nosharecache). Every kernel mount has nosharecache, so that
// none shares another's superblock and caches.
type semBed struct {
	t      *testing.T
	bin    string
	mounts map[string]string
}

func (b *semBed) mount(kind, export, opts string) string {
	key := kind + " " + export + " " + opts
	if m, ok := b.mounts[key]; ok {
		return m
	}
	t := b.t
	spec := serverAddr.String() + ":" + export
	var m string
	if kind == "ours" && os.Getenv("NFSRDMA_SEM_OURS") != "kernel" {
		var o []string
		if opts != "" {
			o = strings.Split(opts, ",")
		}
		m = mountNFSRDMASpec(t, b.bin, spec, o...)
	} else {
		m = t.TempDir()
		o := "vers=3,proto=rdma,port=20049,nosharecache"
		if opts != "" {
			o += "," + opts
		}
		run(t, "mount", "-t", "nfs", "-o", o, spec, m)
		t.Cleanup(func() { exec.Command("umount", m).Run() })
	}
	// The other users must reach the mount point.
	if err := os.Chmod(filepath.Dir(m), 0o755); err != nil {
		t.Fatal(err)
	}
	b.mounts[key] = m
	return m
}

// semKnownDiffs are the scenarios (path.Match patterns) where
// nfsrdma-mount is known to differ from the kernel's mount, with the
// reason: only differences within what nfs(5) leaves open belong here. A
// listed pattern that no longer differs fails the test.
var semKnownDiffs = map[string]string{}

// semOpenDefects are the scenarios (path.Match patterns) where
// nfsrdma-mount still differs from the kernel's mount by a defect not yet
// fixed: not a difference nfs(5) allows, but one nfsrdma-mount(8) lists
// under BUGS until it is fixed. They are reported like known differences
// (logged with the transcripts' diff), and a listed pattern that no longer
// differs fails the test, so that the list only shrinks.
var semOpenDefects = map[string]string{}

// TestSemantics runs every scenario on the kernel's mount and on ours, as
// a subtest of its own (-test.run 'TestSemantics/cto' runs a class), and
// fails each whose transcripts differ, or where ours took longer than the
// kernel's by more than the window recorded with the time.
//
// With NFSRDMA_SEM_OURS=kernel, "ours" is another kernel mount
// (nosharecache): the suite then checks itself, every scenario must give
// the same transcript twice.
func TestSemantics(t *testing.T) {
	bed := &semBed{t: t, bin: mountBinary(t), mounts: map[string]string{}}
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	top := fmt.Sprintf("sem-%d", os.Getpid())
	started := time.Now()
	differs := map[string]bool{}
	var ran []string
	var same, diffs, known int
	for i, sc := range semScenarios() {
		if !semSelected(sc.name) {
			continue
		}
		if _, err := os.Stat(filepath.Join(sc.export, top)); os.IsNotExist(err) {
			t.Cleanup(func() { os.RemoveAll(filepath.Join(sc.export, top)) })
		}
		if err := os.MkdirAll(filepath.Join(sc.export, top), 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(sc.export, top), 0o777); err != nil {
			t.Fatal(err)
		}
		// The mounts are the whole test's, made here (in the test's
		// own goroutine) as the scenarios need them.
		mounts := map[string]string{"other": bed.mount("other", sc.export, sc.opts)}
		for _, kind := range []string{"kernel", "ours"} {
			mounts[kind] = bed.mount(kind, sc.export, sc.opts)
		}
		t.Run(sc.name, func(t *testing.T) {
			ran = append(ran, sc.name)
			ctop := time.Now()
			var outs [2]*semRun
			for j, kind := range []string{"kernel", "ours"} {
				this := mounts[kind]
				sub := filepath.Join(top, fmt.Sprintf("%s-%02d", kind[:1], i))
				s := &semRun{t: t, srv: filepath.Join(sc.export, sub), mnt: filepath.Join(this, sub),
					other: filepath.Join(mounts["other"], sub), took: map[string]semTook{}}
				if err := os.Mkdir(s.srv, 0o777); err != nil {
					t.Fatal(err)
				}
				if sc.setup != nil {
					if err := sc.setup(s); err != nil {
						t.Fatalf("setup: %v", err)
					}
				}
				var stop func()
				if kind == "ours" {
					stop = watchMount(t, this, 2*time.Minute)
				}
				s.start = time.Now()
				sc.steps(s)
				if stop != nil {
					stop()
				}
				outs[j] = s
			}
			k, o := outs[0].out.String(), outs[1].out.String()
			if strings.Contains(k+o, "credential:") {
				t.Fatalf("a user's credentials could not be set:\nkernel:\n%sours:\n%s", k, o)
			}
			for _, w := range sc.kernelWant {
				if !strings.Contains(k, w) {
					t.Errorf("the kernel's transcript lacks %q: the scenario does not test what it says:\n%s", w, k)
				}
			}
			var slow []string
			for _, label := range slices.Sorted(maps.Keys(outs[0].took)) {
				kd, od, w := outs[0].took[label].d, outs[1].took[label].d, outs[0].took[label].window
				t.Logf("%s: kernel %v, ours %v", label, kd.Round(time.Millisecond), od.Round(time.Millisecond))
				if od > kd+w {
					slow = append(slow, fmt.Sprintf("%s: ours %v, the kernel's %v (window %v)", label,
						od.Round(time.Millisecond), kd.Round(time.Millisecond), w))
				}
			}
			took := time.Since(ctop).Round(100 * time.Millisecond)
			if k == o && len(slow) == 0 {
				same++
				t.Logf("same (%v):\n%s", took, k)
				return
			}
			differs[sc.name] = true
			why := ""
			for pat, reason := range semKnownDiffs {
				if ok, _ := path.Match(pat, sc.name); ok {
					why = reason
				}
			}
			for pat, reason := range semOpenDefects {
				if ok, _ := path.Match(pat, sc.name); ok {
					why = "open defect (nfsrdma-mount(8) BUGS): " + reason
				}
			}
			report := fmt.Sprintf("differs (%v):\n%s%s", took, semDiff(k, o), strings.Join(slow, "\n"))
			if why != "" {
				known++
				t.Logf("%s\nknown: %s", report, why)
				return
			}
			diffs++
			t.Error(report)
		})
	}
	if len(ran) == 0 {
		t.Fatal("no scenario selected")
	}
	for pat := range semListed() {
		if !slices.ContainsFunc(ran, func(n string) bool { ok, _ := path.Match(pat, n); return ok }) {
			continue // not run
		}
		if !slices.ContainsFunc(slices.Collect(maps.Keys(differs)), func(n string) bool { ok, _ := path.Match(pat, n); return ok }) {
			t.Errorf("known difference or open defect %q no longer differs: remove it from its list", pat)
		}
	}
	t.Logf("%d scenarios in %.1f s: %d same, %d differ (%d of them known)", len(ran),
		time.Since(started).Seconds(), same, diffs+known, known)
}

// semListed is every pattern of semKnownDiffs and semOpenDefects.
func semListed() map[string]string {
	all := maps.Clone(semKnownDiffs)
	maps.Copy(all, semOpenDefects)
	return all
}

// semSelected reports whether -test.run may select the scenario name (a
// subtest of TestSemantics), so that only the mounts of the scenarios run
// are made. Like the testing package, it matches each slash-separated
// element of the pattern after the first with the name's element; when in
// doubt it says yes (the subtest itself is then filtered by testing).
func semSelected(name string) bool {
	f := flag.Lookup("test.run")
	if f == nil || f.Value.String() == "" {
		return true
	}
	elems := strings.Split(f.Value.String(), "/")
	parts := strings.Split(name, "/")
	for i, e := range elems[1:] {
		if i >= len(parts) {
			break
		}
		re, err := regexp.Compile(e)
		if err != nil || strings.ContainsAny(e, "|[") {
			return true // alternatives across elements: let testing decide
		}
		if !re.MatchString(parts[i]) {
			return false
		}
	}
	return true
}

// semDiff shows two transcripts line by line, marking the lines that
// differ.
func semDiff(k, o string) string {
	kl, ol := strings.Split(strings.TrimSuffix(k, "\n"), "\n"), strings.Split(strings.TrimSuffix(o, "\n"), "\n")
	var b strings.Builder
	for i := range max(len(kl), len(ol)) {
		var kx, ox string
		if i < len(kl) {
			kx = kl[i]
		}
		if i < len(ol) {
			ox = ol[i]
		}
		if kx == ox {
			fmt.Fprintf(&b, "    both:   %s\n", kx)
			continue
		}
		fmt.Fprintf(&b, "  - kernel: %s\n  + ours:   %s\n", kx, ox)
	}
	return b.String()
}
