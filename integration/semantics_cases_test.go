//go:build integration

package integration

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The scenarios of TestSemantics (semantics_test.go).

// semAttrWindow is acdirmin and acdirmax of the scenarios about names
// another client makes: nfs(5) lets a client show a directory as it was
// for that long.
const semAttrWindow = time.Second

// semSeenBy is how long after another client made a name both mounts must
// show it, with acdirmin=acdirmax=1: the attribute window, and as much
// again and half for the round trips of a loaded bed.
const semSeenBy = 2500 * time.Millisecond

// semListSlack is how much longer than the kernel's mount ours may take
// to list a name another client made: the kernel opens a directory as it
// opens a file, close-to-open, asking the server for its attributes
// (nfs_lookup_verify_inode revalidates directories on LOOKUP_OPEN too), so
// its listing shows the name as soon as the server has it, whatever the
// attribute timeouts; the slack is for the round trips of a loaded bed.
const semListSlack = 500 * time.Millisecond

var semAcOpts = fmt.Sprintf("acdirmin=%d,acdirmax=%d", int(semAttrWindow/time.Second), int(semAttrWindow/time.Second))

func semScenarios() []semScenario {
	var ss []semScenario
	ss = append(ss, semPermScenarios()...)
	ss = append(ss, semSquashScenarios()...)
	ss = append(ss, semNameScenarios()...)
	ss = append(ss, semCTOScenarios()...)
	ss = append(ss, semMetaScenarios()...)
	ss = append(ss, semACLScenarios()...)
	return ss
}

func semReadOf(name string) func(d string) string {
	return func(d string) string { return semRead(filepath.Join(d, name)) }
}

func semWriteOf(name string, flag int, perm os.FileMode, data string) func(d string) string {
	return func(d string) string { return semWrite(filepath.Join(d, name), flag, perm, data) }
}

func semStatOf(name string) func(d string) string {
	return func(d string) string { return semStat(filepath.Join(d, name)) }
}

func semListOf(name string) func(d string) string {
	return func(d string) string { return semList(filepath.Join(d, name)) }
}

const (
	semCreate = os.O_CREATE | os.O_EXCL | os.O_WRONLY
	semAppend = os.O_WRONLY | os.O_APPEND
	semTrunc  = os.O_WRONLY | os.O_TRUNC
)

// (a) Permissions the server decides: a POSIX ACL's deny entry, which the
// mode bits do not show (the kernel client asks the server with ACCESS),
// and a group beyond the 16 AUTH_SYS carries.
func semPermScenarios() []semScenario {
	return []semScenario{{
		name:   "perm/acl-deny",
		export: exportDir,
		setup: semFiles(semFileSpec{name: "f", uid: 1001, gid: 1001, mode: 0o644, content: "secret\n", acl: "u:1002:---"},
			semFileSpec{name: "g", uid: 1001, gid: 1001, mode: 0o666, content: "shared\n", acl: "u:1002:r--"}),
		steps: func(s *semRun) {
			s.do("this", semU2, "stat f", semStatOf("f"))
			s.do("this", semU2, "read f", semReadOf("f"))
			s.do("this", semU1, "read f", semReadOf("f"))
			// The owner's read put the data in the page cache: the user
			// with the deny entry is still refused.
			s.do("this", semU2, "read f after the owner's", semReadOf("f"))
			s.do("this", semU3, "read f", semReadOf("f"))
			s.do("this", semU2, "append f", semWriteOf("f", semAppend, 0, "x"))
			// g's ACL gives 1002 read only, under a mode that lets
			// everyone write.
			s.do("this", semU2, "read g", semReadOf("g"))
			s.do("this", semU2, "append g", semWriteOf("g", semAppend, 0, "x"))
			s.do("this", semU3, "append g", semWriteOf("g", semAppend, 0, "y\n"))
			s.do("this", semU2, "read g after 1003's write", semReadOf("g"))
		},
		kernelWant: []string{
			"this u1002 read f: open=EACCES",
			"this u1001 read f: open=ok read=ok",
			"this u1002 read f after the owner's: open=EACCES",
			"this u1002 append g: open=EACCES",
		},
	}, {
		// An ACL entry that grants what the mode bits (the group
		// class's are the mask) do not give the user's class.
		name:   "perm/acl-grant",
		export: exportDir,
		setup: semFiles(semFileSpec{name: "f", uid: 1001, gid: 1001, mode: 0o600, content: "granted\n", acl: "u:1002:rw-"},
			semFileSpec{name: "x", uid: 1001, gid: 1001, mode: 0o700, content: "#!/bin/sh\necho ran\n", acl: "u:1002:r-x"}),
		steps: func(s *semRun) {
			s.do("this", semU2, "stat f", semStatOf("f"))
			s.do("this", semU2, "read f", semReadOf("f"))
			s.do("this", semU2, "append f", semWriteOf("f", semAppend, 0, "by 1002\n"))
			s.do("this", semU3, "read f", semReadOf("f"))
			s.do("this", semU2, "access x X_OK", func(d string) string { return en(unix.Access(filepath.Join(d, "x"), unix.X_OK)) })
			s.do("this", semU3, "access x X_OK", func(d string) string { return en(unix.Access(filepath.Join(d, "x"), unix.X_OK)) })
			s.do("this", semU1, "read f", semReadOf("f"))
		},
		kernelWant: []string{
			"this u1002 read f: open=ok read=ok",
			"this u1002 append f: open=ok write=ok close=ok",
			"this u1003 read f: open=EACCES",
		},
	}, {
		// A default ACL on the directory: the server gives the new
		// file its entries, and the mode the creator's umask would
		// not have given.
		name:   "perm/acl-default-inherited",
		export: exportDir,
		setup: func(s *semRun) error {
			d := filepath.Join(s.srv, "d")
			if err := os.Mkdir(d, 0o777); err != nil {
				return err
			}
			if out, err := exec.Command("setfacl", "-d", "-m", "u::rwx,g::rwx,o::rx,u:1002:rw-", d).CombinedOutput(); err != nil {
				return fmt.Errorf("setfacl -d: %v: %s", err, out)
			}
			return nil
		},
		steps: func(s *semRun) {
			s.do("this", semU1, "create d/f with umask 022", func(d string) string {
				// umask is per process: this thread gets a file
				// system context of its own (it ends with it).
				if err := unix.Unshare(unix.CLONE_FS); err != nil {
					return "unshare: " + en(err)
				}
				unix.Umask(0o022)
				return semWrite(filepath.Join(d, "d", "f"), semCreate, 0o666, "inherits\n")
			})
			s.do("this", semU1, "stat d/f", semStatOf("d/f"))
			s.do("server", semRoot, "getfacl d/f", func(d string) string {
				out, err := exec.Command("getfacl", "-cp", filepath.Join(d, "d", "f")).CombinedOutput()
				return en(err) + " " + strings.Join(strings.Fields(string(out)), " ")
			})
			s.do("this", semU2, "append d/f", semWriteOf("d/f", semAppend, 0, "by 1002\n"))
			s.do("this", semU3, "append d/f", semWriteOf("d/f", semAppend, 0, "by 1003\n"))
			s.do("this", semU1, "read d/f", semReadOf("d/f"))
		},
		kernelWant: []string{"this u1002 append d/f: open=ok write=ok close=ok"},
	}, {
		name:   "perm/acl-deny-set-later",
		export: exportDir,
		setup:  semFiles(semFileSpec{name: "f", uid: 1001, gid: 1001, mode: 0o644, content: "secret\n"}),
		steps: func(s *semRun) {
			s.do("this", semU2, "read f", semReadOf("f"))
			time.Sleep(20 * time.Millisecond) // a ctime of its own
			s.do("server", semRoot, "setfacl -m u:1002:--- f", func(d string) string {
				out, err := exec.Command("setfacl", "-m", "u:1002:---", filepath.Join(d, "f")).CombinedOutput()
				return en(err) + strings.TrimSpace(string(out))
			})
			// Close-to-open: the open asks the server for f's
			// attributes, its ctime changed, so the rights cached
			// for 1002 are asked again.
			s.do("this", semU2, "read f", semReadOf("f"))
			s.do("this", semU1, "read f", semReadOf("f"))
		},
		kernelWant: []string{
			"this u1002 read f: open=ok read=ok",
			"this u1002 read f: open=EACCES",
		},
	}, {
		// The owner takes the others' read right away on the other
		// client: this mount's next open by another user asks the
		// server for the file's attributes (close-to-open) and is
		// refused, whether or not a listing brought them before.
		name:   "perm/mode-changed-elsewhere",
		export: exportDir,
		setup:  semFiles(semFileSpec{name: "f", uid: 1001, gid: 1001, mode: 0o644, content: "was public\n"}),
		steps: func(s *semRun) {
			s.do("this", semU2, "read f", semReadOf("f"))
			s.do("other", semU1, "chmod f 0600", semChmod("f", 0o600))
			s.do("this", semU2, "read f", semReadOf("f"))
			s.do("other", semU1, "chmod f 0644", semChmod("f", 0o644))
			s.do("this", semU2, "read f", semReadOf("f"))
			s.do("this", semU2, "ls -l", func(d string) string { return semLsL(d) })
			s.do("other", semU1, "chmod f 0600", semChmod("f", 0o600))
			s.do("this", semU2, "read f after ls -l", semReadOf("f"))
		},
		kernelWant: []string{
			"this u1002 read f: open=EACCES",
			"this u1002 read f after ls -l: open=EACCES",
		},
	}, {
		name:   "perm/17th-group",
		export: exportDir,
		setup: func(s *semRun) error {
			if err := semFiles(semFileSpec{name: "f16", uid: 1001, gid: 2016, mode: 0o640, content: "group 2016\n"},
				semFileSpec{name: "f17", uid: 1001, gid: 2017, mode: 0o640, content: "group 2017\n"})(s); err != nil {
				return err
			}
			d := filepath.Join(s.srv, "d17")
			if err := os.Mkdir(d, 0o770); err != nil {
				return err
			}
			if err := os.Chown(d, 1001, 2017); err != nil {
				return err
			}
			return semFile(filepath.Join(d, "x"), 1001, 2017, 0o644, "in d17\n")
		},
		steps: func(s *semRun) {
			s.do("this", semG16, "read f16", semReadOf("f16"))
			s.do("this", semG17, "read f16", semReadOf("f16"))
			s.do("this", semG17, "stat f17", semStatOf("f17"))
			s.do("this", semG17, "read f17", semReadOf("f17"))
			s.do("this", semG17, "list d17", semListOf("d17"))
			s.do("this", semG17, "read d17/x", semReadOf("d17/x"))
			s.do("this", semG17, "create d17/n", semWriteOf("d17/n", semCreate, 0o644, "n\n"))
			s.do("this", semU1, "read f17", semReadOf("f17")) // the owner: in the cache now
			s.do("this", semG17, "read f17 after the owner's", semReadOf("f17"))
		},
		kernelWant: []string{
			"this g16 read f16: open=ok read=ok",
			"this g17 read f16: open=ok read=ok",
			"this g17 read f17: open=EACCES",
			"this g17 list d17: EACCES",
			"this g17 read f17 after the owner's: open=EACCES",
		},
	}}
}

// (b) all_squash: every caller is uid and gid 1500 on the server, so each
// user may write and chmod what any user made, which the mode bits and
// owner the client sees (1500's) do not tell.
func semSquashScenarios() []semScenario {
	return []semScenario{{
		name:   "squash/create-reopen-chmod",
		export: "/export-squash",
		steps: func(s *semRun) {
			s.do("this", semU1, "create f", semWriteOf("f", semCreate, 0o644, "one\n"))
			s.do("this", semU1, "stat f", semStatOf("f"))
			s.do("this", semU1, "append f", semWriteOf("f", semAppend, 0, "two\n"))
			s.do("this", semU1, "chmod f 0600", semChmod("f", 0o600))
			s.do("this", semU1, "read f", semReadOf("f"))
			s.do("this", semU2, "read f", semReadOf("f"))
			s.do("this", semU2, "append f", semWriteOf("f", semAppend, 0, "three\n"))
			s.do("this", semU2, "chmod f 0640", semChmod("f", 0o640))
			s.do("this", semU2, "chmod f 04755", semChmod("f", 0o4755))
			s.do("this", semU2, "stat f", semStatOf("f"))
			s.do("this", semU1, "append f", semWriteOf("f", semAppend, 0, "four\n"))
			s.meta("f", false)
			s.do("this", semU2, "chmod f 02750", semChmod("f", 0o2750))
			s.do("this", semU2, "create g", semWriteOf("g", semCreate, 0o600, "g\n"))
			s.do("this", semU1, "read g", semReadOf("g"))
			s.do("this", semU1, "truncate g", func(d string) string { return en(syscall.Truncate(filepath.Join(d, "g"), 1)) })
			s.do("this", semRoot, "append g", semWriteOf("g", semAppend, 0, "root\n"))
			s.do("other", semU3, "read g", semReadOf("g"))
			s.do("this", semU1, "chown g 1001", semChown("g", 1001, -1))
			s.meta("f", false)
			s.meta("g", false)
		},
		kernelWant: []string{
			"this u1001 stat f: 0100644 1500:1500",
			"this u1001 append f: open=ok write=ok close=ok",
			"this u1001 chmod f 0600: ok",
			"this u1002 read f: open=ok read=ok",
			"this u1002 chmod f 0640: ok",
			"this u1001 read g: open=ok read=ok",
		},
	}}
}

// (c) Names another client makes, and when this mount shows them: with
// acdirmin=acdirmax=1 on both mounts, nfs(5) lets a mount show a
// directory as it was for a second; both must show the new name within
// semSeenBy, and ours not later than the kernel's by more than the window
// the kernel's behaviour shows (the attribute window for a lookup, about
// nothing for a listing: see semListSlack). With the default timeouts
// (acdirmin 30 s), a listing shows the new name at once on the kernel's
// mount (close-to-open of the directory), and so does a lookup after it.
func semNameScenarios() []semScenario {
	// poll is how the name is looked for through this mount.
	type poll struct {
		name   string
		look   func(d string) bool // d is the scenario's directory
		window time.Duration
	}
	polls := []poll{
		{"stat", func(d string) bool { return syscall.Access(filepath.Join(d, "d", "n"), unix.F_OK) == nil }, semAttrWindow},
		{"open", func(d string) bool {
			f, err := os.Open(filepath.Join(d, "d", "n"))
			if err == nil {
				f.Close()
			}
			return err == nil
		}, semAttrWindow},
		{"list", func(d string) bool {
			ents, _ := os.ReadDir(filepath.Join(d, "d"))
			return slices.ContainsFunc(ents, func(e os.DirEntry) bool { return e.Name() == "n" })
		}, semListSlack},
	}
	var ss []semScenario
	for _, p := range polls {
		for _, maker := range []string{"other", "server"} {
			ss = append(ss, semScenario{
				name:   fmt.Sprintf("names/%s-creates-in-dir-made-here/%s", maker, p.name),
				export: exportDir,
				opts:   semAcOpts,
				steps: func(s *semRun) {
					s.do("this", semU1, "mkdir d", func(d string) string { return en(syscall.Mkdir(filepath.Join(d, "d"), 0o777)) })
					s.do("this", semU1, "list d", func(d string) string { return semList(filepath.Join(d, "d")) })
					s.do("this", semU1, "stat d/n", semStatOf("d/n"))
					time.Sleep(20 * time.Millisecond) // d's mtime moves on
					if maker == "other" {
						s.do("other", semU2, "create d/n", semWriteOf("d/n", semCreate, 0o644, "made elsewhere\n"))
					} else {
						s.do("server", semRoot, "create d/n", func(d string) string {
							p := filepath.Join(d, "d", "n")
							r := semWrite(p, semCreate, 0o644, "made elsewhere\n")
							return r + " chown=" + en(os.Lchown(p, 1002, 1002))
						})
					}
					made := time.Now()
					seen := s.waitFor(semU1, p.name+" d/n", made, p.look, p.window)
					s.log("this u1001 %s d/n seen within %v: %v", p.name, semSeenBy, seen)
					time.Sleep(time.Until(made.Add(semSeenBy)))
					s.do("this", semU1, "stat d/n", semStatOf("d/n"))
					s.do("this", semU1, "read d/n", semReadOf("d/n"))
					s.do("this", semU1, "list d", semListOf("d"))
				},
				kernelWant: []string{
					"seen within 2.5s: true",
					"this u1001 read d/n: open=ok read=ok \"made elsewhere\\n\"",
				},
			})
		}
	}
	ss = append(ss, semScenario{
		name:   "names/other-creates-while-this-lists",
		export: exportDir,
		opts:   semAcOpts,
		setup: func(s *semRun) error {
			return os.Mkdir(filepath.Join(s.srv, "d"), 0o777)
		},
		steps: semConcurrentNames,
		kernelWant: []string{
			"stat: every name seen within 2.5s: true",
			"listing: every name seen within 2.5s: true",
			"errors: none",
		},
	})
	// The default attribute timeouts: a listing after the other client
	// made a name shows it, and a lookup after the listing finds it,
	// though the name was looked up (and found missing) before.
	for _, here := range []bool{true, false} {
		name := "names/other-creates-then-this-lists/dir-made-on-server"
		if here {
			name = "names/other-creates-then-this-lists/dir-made-here"
		}
		ss = append(ss, semScenario{
			name:   name,
			export: exportDir,
			setup: func(s *semRun) error {
				if here {
					return nil
				}
				if err := os.Mkdir(filepath.Join(s.srv, "d"), 0o777); err != nil {
					return err
				}
				return semFile(filepath.Join(s.srv, "d", "a"), 1001, 1001, 0o644, "a\n")
			},
			steps: func(s *semRun) {
				if here {
					s.do("this", semU1, "mkdir d", func(d string) string { return en(syscall.Mkdir(filepath.Join(d, "d"), 0o777)) })
					s.do("this", semU1, "create d/a", semWriteOf("d/a", semCreate, 0o644, "a\n"))
				}
				s.do("this", semU1, "list d", semListOf("d"))
				s.do("this", semU1, "stat d/n", semStatOf("d/n"))
				time.Sleep(20 * time.Millisecond) // d's mtime moves on
				s.do("other", semU2, "create d/n", semWriteOf("d/n", semCreate, 0o644, "made elsewhere\n"))
				s.do("this", semU1, "list d", semListOf("d"))
				s.do("this", semU1, "stat d/n", semStatOf("d/n"))
				s.do("this", semU1, "read d/n", semReadOf("d/n"))
				s.do("other", semU2, "unlink d/a", func(d string) string { return en(os.Remove(filepath.Join(d, "d", "a"))) })
				s.do("this", semU1, "list d", semListOf("d"))
				s.do("this", semU1, "read d/a", semReadOf("d/a"))
			},
			kernelWant: []string{
				"this u1001 list d: [a n]",
				"this u1001 stat d/n: 0100644 1002:1002",
				"this u1001 list d: [n]",
			},
		})
	}
	return ss
}

// waitFor polls look, as a, on this mount every 50 ms until it is true or
// semSeenBy has passed since made, and records how long after made it
// became true, for ours to be within window of the kernel's.
func (s *semRun) waitFor(a pcActor, label string, made time.Time, look func(d string) bool, window time.Duration) bool {
	r := asActor(a, func() string {
		for {
			if look(s.mnt) {
				return "yes"
			}
			if time.Since(made) > semSeenBy {
				return "no"
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	if r == "yes" {
		s.record(label, time.Since(made), window)
	} else {
		s.record(label, semSeenBy+time.Since(made), window) // longer than any that was seen
	}
	return r == "yes"
}

// semConcurrentNames: the other client makes 30 files, one every 30 ms,
// while this mount lists the directory and looks each made name up; every
// name must be seen by both within semSeenBy of its making, no lookup
// may fail but with ENOENT, no listing may hold a name never made.
func semConcurrentNames(s *semRun) {
	const n = 30
	s.do("this", semU1, "list d", semListOf("d"))
	var mu sync.Mutex
	made := map[string]time.Time{}
	done := make(chan string, 1)
	go func() {
		done <- asActor(semU2, func() string {
			for i := range n {
				name := fmt.Sprintf("n%02d", i)
				if err := os.WriteFile(filepath.Join(s.other, "d", name), []byte(name), 0o644); err != nil {
					return name + ": " + en(err)
				}
				mu.Lock()
				made[name] = time.Now()
				mu.Unlock()
				time.Sleep(30 * time.Millisecond)
			}
			return "ok"
		})
	}()
	var errs []string
	statSeen, listSeen := map[string]time.Duration{}, map[string]time.Duration{}
	var result string
	asActor(semU1, func() string {
		var finished time.Time
		for {
			ents, err := os.ReadDir(filepath.Join(s.mnt, "d"))
			if err != nil {
				errs = append(errs, "readdir: "+en(err))
			}
			now := time.Now()
			mu.Lock()
			snapshot := maps.Clone(made)
			mu.Unlock()
			seenNow := map[string]bool{}
			for _, e := range ents {
				t, ok := snapshot[e.Name()]
				if seenNow[e.Name()] {
					errs = append(errs, "listed twice: "+e.Name())
				}
				seenNow[e.Name()] = true
				if !ok {
					// Made, but its making not yet recorded: a name
					// the loop is about to make is fine.
					if !strings.HasPrefix(e.Name(), "n") {
						errs = append(errs, "listed, never made: "+e.Name())
					}
					continue
				}
				if _, ok := listSeen[e.Name()]; !ok {
					listSeen[e.Name()] = max(now.Sub(t), 0)
				}
			}
			for name, t := range snapshot {
				if _, ok := statSeen[name]; ok {
					continue
				}
				var st syscall.Stat_t
				err := syscall.Lstat(filepath.Join(s.mnt, "d", name), &st)
				switch {
				case err == nil:
					statSeen[name] = time.Since(t)
				case err != syscall.ENOENT:
					errs = append(errs, name+": "+en(err))
				}
			}
			if finished.IsZero() {
				select {
				case result = <-done:
					finished = time.Now()
				default:
				}
			}
			if !finished.IsZero() && (len(statSeen) == n && len(listSeen) == n || time.Since(finished) > semSeenBy) {
				return ""
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	s.log("other u1002 create n00..n%02d: %s", n-1, result)
	within := func(seen map[string]time.Duration) (bool, time.Duration) {
		var worst time.Duration
		for _, d := range seen {
			worst = max(worst, d)
		}
		return len(seen) == n && worst <= semSeenBy, worst
	}
	ok, worst := within(statSeen)
	s.log("stat: every name seen within %v: %v (%d seen)", semSeenBy, ok, len(statSeen))
	s.record("stat: slowest name", worst, semAttrWindow)
	ok, worst = within(listSeen)
	s.log("listing: every name seen within %v: %v (%d seen)", semSeenBy, ok, len(listSeen))
	s.record("listing: slowest name", worst, semListSlack)
	if len(errs) == 0 {
		s.log("errors: none")
	} else {
		slices.Sort(errs)
		s.log("errors: %s", strings.Join(slices.Compact(errs), "; "))
	}
	time.Sleep(semAttrWindow + 200*time.Millisecond)
	s.do("this", semU1, "list d", semListOf("d"))
	s.do("this", semU1, "read d/n29", semReadOf("d/n29"))
}

// (d) Close-to-open after a listing: ls -l on this mount (a READDIRPLUS
// that brings every file's attributes), then the other client or the
// server changes a file, then this mount opens it: the open asks the
// server (nfs(5) cto), so it reads the new bytes.
func semCTOScenarios() []semScenario {
	const old = "old content, v1\n"
	setup := semFiles(semFileSpec{name: "f", uid: 1001, gid: 1001, mode: 0o666, content: old},
		semFileSpec{name: "g", uid: 1001, gid: 1001, mode: 0o644, content: "another file\n"})
	type change struct {
		name   string
		where  string
		do     func(d string) string
		expect string
	}
	changes := []change{
		{"other-rewrites-same-size", "other", semWriteOf("f", semTrunc, 0, "new content, v2\n"), "new content, v2\n"},
		{"other-rewrites-longer", "other", semWriteOf("f", semTrunc, 0, "new content, v2, longer than the old\n"), "new content, v2, longer than the old\n"},
		{"other-renames-over", "other", func(d string) string {
			r := semWrite(filepath.Join(d, "f.new"), semCreate, 0o666, "replaced, v2\n")
			return r + " rename=" + en(os.Rename(filepath.Join(d, "f.new"), filepath.Join(d, "f")))
		}, "replaced, v2\n"},
		{"server-writes-in-place", "server", func(d string) string {
			return semWrite(filepath.Join(d, "f"), os.O_WRONLY, 0, "NEW")
		}, "NEW content, v1\n"},
	}
	var ss []semScenario
	// Without the listing: what the open alone must do, to tell a
	// failure of the listing's from one of the open's.
	for _, before := range []string{"read", "read-stat"} {
		c := changes[0]
		ss = append(ss, semScenario{
			name:   fmt.Sprintf("cto/%s-then-%s", before, c.name),
			export: exportDir,
			setup:  setup,
			steps: func(s *semRun) {
				s.do("this", semU1, "read f", semReadOf("f"))
				if before == "read-stat" {
					s.do("this", semU1, "stat f", semStatOf("f"))
				}
				s.do(c.where, semU2, "change f", c.do)
				s.do("this", semU1, "read f", semReadOf("f"))
			},
			kernelWant: []string{fmt.Sprintf("this u1001 read f: open=ok read=ok %q", c.expect)},
		})
	}
	for _, c := range changes {
		for _, cached := range []bool{true, false} {
			name := "cto/ls-l-then-" + c.name
			if !cached {
				name += "/not-read-before"
			}
			ss = append(ss, semScenario{
				name:   name,
				export: exportDir,
				setup:  setup,
				steps: func(s *semRun) {
					if cached {
						s.do("this", semU1, "read f", semReadOf("f"))
					}
					s.do("this", semU1, "ls -l", func(d string) string { return semLsL(d) })
					a := semU2
					if c.where == "server" {
						a = semRoot
					}
					s.do(c.where, a, "change f", c.do)
					s.do("this", semU1, "read f", semReadOf("f"))
					s.do("this", semU1, "stat f", semStatOf("f"))
				},
				kernelWant: []string{fmt.Sprintf("this u1001 read f: open=ok read=ok %q", c.expect)},
			})
		}
	}
	return ss
}

// (e) Times and metadata: what this mount shows after its own utimes,
// chmod, chown, truncations and writes equals what the server has, and
// the other client sees it after its open.
func semMetaScenarios() []semScenario {
	ins := insecureExportDir // no_root_squash: root acts as root
	return []semScenario{{
		name:   "meta/utimes",
		export: ins,
		setup:  semFiles(semFileSpec{name: "f", uid: 1001, gid: 1001, mode: 0o644, content: "times\n"}),
		steps: func(s *semRun) {
			s.do("this", semU1, "utimes f", func(d string) string {
				ts := []unix.Timespec{{Sec: 1_200_000_000, Nsec: 123_456_789}, {Sec: 1_300_000_000, Nsec: 987_654_321}}
				return en(unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(d, "f"), ts, 0))
			})
			s.meta("f", true)
			s.do("this", semU1, "utimes f now", func(d string) string {
				return en(unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(d, "f"), nil, 0))
			})
			s.meta("f", true)
			s.do("this", semU1, "utimes f mtime only", func(d string) string {
				ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Sec: 1_400_000_000, Nsec: 5}}
				return en(unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(d, "f"), ts, 0))
			})
			s.meta("f", false)
		},
		kernelWant: []string{"f server: 0100644 1001:1001 size 6 nlink 1 mtime 1300000000.987654321 ctime new atime 1200000000.123456789"},
	}, {
		name:   "meta/chmod-sbits",
		export: ins,
		setup: semFiles(semFileSpec{name: "f", uid: 1001, gid: 1001, mode: 0o755, content: "#!/bin/sh\n"},
			semFileSpec{name: "g", uid: 1001, gid: 1003, mode: 0o755, content: "#!/bin/sh\n"}),
		steps: func(s *semRun) {
			s.do("this", semU1, "chmod f 04755", semChmod("f", 0o4755))
			s.meta("f", false)
			s.do("this", semU1, "chmod f 02755", semChmod("f", 0o2755))
			s.meta("f", false)
			s.do("this", semRoot, "chmod f 06755", semChmod("f", 0o6755))
			s.meta("f", false)
			// Not in g's group: the kernel's chmod drops set-group-ID
			// (the server's, whose answer the client shows).
			s.do("this", semU1, "chmod g 02755", semChmod("g", 0o2755))
			s.meta("g", false)
			s.do("this", semRoot, "chmod g 06777", semChmod("g", 0o6777))
			// A write by another user than root clears them.
			s.do("this", semU2, "append g", semWriteOf("g", semAppend, 0, "echo\n"))
			s.meta("g", false)
		},
		kernelWant: []string{"f server: 0104755 1001:1001", "f server: 0106755 1001:1001"},
	}, {
		name:   "meta/chown-by-root",
		export: ins,
		setup: semFiles(semFileSpec{name: "f", uid: 1001, gid: 1001, mode: 0o6755, content: "#!/bin/sh\n"},
			semFileSpec{name: "g", uid: 1001, gid: 1001, mode: 0o2775, content: "#!/bin/sh\n"}),
		steps: func(s *semRun) {
			s.do("other", semRoot, "read f", semReadOf("f")) // the other client caches f
			s.do("this", semRoot, "chown f 1002:1003", semChown("f", 1002, 1003))
			s.meta("f", false)
			s.do("this", semRoot, "chown g -1:1003", semChown("g", -1, 1003))
			s.meta("g", false)
			s.do("this", semRoot, "chown g 0:0", semChown("g", 0, 0))
			s.do("this", semRoot, "chmod g 06755", semChmod("g", 0o6755))
			s.do("this", semRoot, "chown g 0:0 again", semChown("g", 0, 0))
			s.meta("g", false)
			s.do("this", semU2, "read f", semReadOf("f"))
		},
		kernelWant: []string{"this root chown f 1002:1003: ok", "f server: 0100755 1002:1003"},
	}, {
		name:   "meta/truncate",
		export: ins,
		setup: semFiles(semFileSpec{name: "f", uid: 1001, gid: 1001, mode: 0o644, content: "0123456789\n"},
			semFileSpec{name: "g", uid: 1001, gid: 1001, mode: 0o644, content: "0123456789\n"},
			semFileSpec{name: "h", uid: 1001, gid: 1001, mode: 0o644, content: "0123456789\n"}),
		steps: func(s *semRun) {
			s.do("other", semU1, "read f", semReadOf("f"))
			s.do("this", semU1, "ftruncate f 4", func(d string) string {
				f, err := os.OpenFile(filepath.Join(d, "f"), os.O_RDWR, 0)
				if err != nil {
					return "open=" + en(err)
				}
				terr := f.Truncate(4)
				fi, serr := f.Stat()
				size := int64(-1)
				if serr == nil {
					size = fi.Size()
				}
				return fmt.Sprintf("truncate=%s fstat size %d close=%s", en(terr), size, en(f.Close()))
			})
			s.meta("f", false)
			s.do("other", semU1, "read f", semReadOf("f"))
			s.do("other", semU1, "read g", semReadOf("g"))
			s.do("this", semU1, "open g O_TRUNC", func(d string) string {
				f, err := os.OpenFile(filepath.Join(d, "g"), semTrunc, 0)
				if err != nil {
					return "open=" + en(err)
				}
				fi, serr := f.Stat()
				size := int64(-1)
				if serr == nil {
					size = fi.Size()
				}
				return fmt.Sprintf("fstat size %d close=%s", size, en(f.Close()))
			})
			s.meta("g", false)
			s.do("other", semU1, "read g", semReadOf("g"))
			s.do("this", semU1, "truncate h 20", func(d string) string { return en(syscall.Truncate(filepath.Join(d, "h"), 20)) })
			s.meta("h", false)
			s.do("other", semU1, "read h", semReadOf("h"))
		},
		kernelWant: []string{"fstat size 4", "f server: 0100644 1001:1001 size 4 nlink 1 mtime new ctime new"},
	}, {
		// A stat by the writer while its writes may not have reached
		// the server yet: the size and mtime are the written file's
		// (the kernel client writes its dirty pages back before it
		// answers a stat of the file).
		name:   "meta/stat-while-writing",
		export: ins,
		setup:  semFiles(semFileSpec{name: "f", uid: 1001, gid: 1001, mode: 0o644, content: "0123456789\n"}),
		steps: func(s *semRun) {
			s.do("this", semU1, "write f, stat before close", func(d string) string {
				p := filepath.Join(d, "f")
				f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					return "open=" + en(err)
				}
				defer f.Close()
				if _, err := f.Write([]byte("more\n")); err != nil {
					return "write=" + en(err)
				}
				var st unix.Stat_t
				if err := unix.Lstat(p, &st); err != nil {
					return "lstat=" + en(err)
				}
				mt := time.Unix(st.Mtim.Unix())
				return fmt.Sprintf("size %d mtime moved %v close=%s", st.Size, !mt.Equal(semFixed), en(f.Close()))
			})
			s.meta("f", false)
		},
		kernelWant: []string{"write f, stat before close: size 16 mtime moved true close=ok"},
	}, {
		// The other client changes the file's mode, owner, times and
		// size after this mount listed it (ls -l: the attributes are
		// cached): an open asks the server, so what the open file
		// shows is the server's.
		name:   "meta/other-changes-seen-at-open",
		export: ins,
		setup:  semFiles(semFileSpec{name: "f", uid: 1001, gid: 1001, mode: 0o644, content: "0123456789\n"}),
		steps: func(s *semRun) {
			s.do("this", semU1, "ls -l", func(d string) string { return semLsL(d) })
			s.do("other", semRoot, "chown f 1002:1001", semChown("f", 1002, 1001))
			s.do("other", semRoot, "chmod f 0640", semChmod("f", 0o640))
			s.do("other", semRoot, "truncate f 3", func(d string) string { return en(syscall.Truncate(filepath.Join(d, "f"), 3)) })
			s.do("other", semRoot, "utimes f", func(d string) string {
				ts := []unix.Timespec{{Sec: 1_200_000_000, Nsec: 1}, {Sec: 1_300_000_000, Nsec: 2}}
				return en(unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(d, "f"), ts, 0))
			})
			s.do("this", semU1, "open+fstat f", func(d string) string {
				f, err := os.Open(filepath.Join(d, "f"))
				if err != nil {
					return "open=" + en(err)
				}
				defer f.Close()
				var st unix.Stat_t
				if err := unix.Fstat(int(f.Fd()), &st); err != nil {
					return "fstat=" + en(err)
				}
				return fmt.Sprintf("%07o %d:%d size %d mtime %d.%09d", st.Mode, st.Uid, st.Gid, st.Size, st.Mtim.Sec, st.Mtim.Nsec)
			})
			s.meta("f", false)
		},
		kernelWant: []string{"this u1001 open+fstat f: 0100640 1002:1001 size 3 mtime 1300000000.000000002"},
	}, {
		name:   "meta/write-seen-by-other-after-close",
		export: ins,
		setup:  semFiles(semFileSpec{name: "f", uid: 1001, gid: 1001, mode: 0o644, content: "0123456789\n"}),
		steps: func(s *semRun) {
			s.do("other", semU1, "read f", semReadOf("f"))
			s.do("this", semU1, "write f", semWriteOf("f", os.O_WRONLY, 0, "ab"))
			s.meta("f", false)
			s.do("other", semU1, "read f", semReadOf("f"))
			s.do("this", semU1, "append f", semWriteOf("f", semAppend, 0, "tail\n"))
			s.do("other", semU1, "read f", semReadOf("f"))
			s.meta("f", false)
			s.do("this", semU1, "chmod f 0640", semChmod("f", 0o640))
			s.meta("f", false)
		},
		kernelWant: []string{"other u1001 read f: open=ok read=ok \"ab23456789\\ntail\\n\""},
	}}
}

// semTool runs a command-line tool (getfacl, setfacl, ls) as a, in the
// view where of the scenario's directory, names relative to it, and logs
// its exit status and output (spaces squeezed). The tool runs with a's
// credential set in its own process (a thread's credential, which
// semRun.do sets, would not let it set another).
func (s *semRun) tool(where string, a pcActor, args ...string) string {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = s.dir(where)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: a.uid, Gid: a.gid, Groups: a.groups}}
	out, err := cmd.CombinedOutput()
	status := "ok"
	if err != nil {
		status = err.Error()
	}
	r := status + " " + strings.Join(strings.Fields(string(out)), " ")
	s.log("%s %s %s: %s", where, a.name, strings.Join(args, " "), r)
	return r
}

// semLsModes is what ls -l shows of dir's entries: each one's mode
// string (with its '+' for an ACL) and name.
func (s *semRun) lsModes(where string, a pcActor, dir string) {
	cmd := exec.Command("ls", "-la", dir)
	cmd.Dir = s.dir(where)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: a.uid, Gid: a.gid, Groups: a.groups}}
	out, err := cmd.CombinedOutput()
	var modes []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || f[len(f)-1] == ".." {
			continue
		}
		modes = append(modes, f[0]+" "+f[len(f)-1])
	}
	s.log("%s %s ls -la %s: %s %s", where, a.name, dir, en(err), strings.Join(modes, "; "))
}

// (f) POSIX ACLs through the mount: getfacl and ls -l read the server's
// ACLs (GETACL), setfacl sets them (SETACL) as the owner and is refused
// to others, an access ACL's change reaches another client's user, and a
// default ACL set through the mount is inherited.
func semACLScenarios() []semScenario {
	return []semScenario{{
		name:   "acl/getfacl",
		export: exportDir,
		setup: func(s *semRun) error {
			if err := semFiles(semFileSpec{name: "f", uid: 1001, gid: 1001, mode: 0o640, content: "acl\n", acl: "u:1002:r--,g:1003:rw-"},
				semFileSpec{name: "g", uid: 1001, gid: 1001, mode: 0o644, content: "plain\n"})(s); err != nil {
				return err
			}
			d := filepath.Join(s.srv, "d")
			if err := os.Mkdir(d, 0o755); err != nil {
				return err
			}
			if err := os.Chown(d, 1001, 1001); err != nil {
				return err
			}
			if out, err := exec.Command("setfacl", "-d", "-m", "u:1002:rwx", d).CombinedOutput(); err != nil {
				return fmt.Errorf("setfacl -d: %v: %s", err, out)
			}
			return nil
		},
		steps: func(s *semRun) {
			s.lsModes("this", semU2, ".")
			s.tool("this", semU2, "getfacl", "-c", "f", "g", "d")
			s.tool("this", semU2, "getfacl", "-c", "-a", "d")
			// The other namespaces: NFSv3 has none.
			s.do("this", semU1, "setfattr user.x f", func(d string) string {
				return en(unix.Setxattr(filepath.Join(d, "f"), "user.x", []byte("1"), 0))
			})
			s.do("this", semU1, "getfattr user.x f", func(d string) string {
				_, err := unix.Getxattr(filepath.Join(d, "f"), "user.x", make([]byte, 64))
				return en(err)
			})
			s.do("this", semU1, "listxattr f g d", func(d string) string {
				var r []string
				for _, n := range []string{"f", "g", "d"} {
					buf := make([]byte, 256)
					k, err := unix.Listxattr(filepath.Join(d, n), buf)
					r = append(r, n+" "+en(err)+" "+strings.ReplaceAll(string(buf[:max(k, 0)]), "\x00", ","))
				}
				return strings.Join(r, "; ")
			})
			// Changed on the server: the next ls -l after the
			// attribute timeout shows it.
			time.Sleep(20 * time.Millisecond)
			s.do("server", semRoot, "setfacl -b f", func(d string) string {
				out, err := exec.Command("setfacl", "-b", filepath.Join(d, "f")).CombinedOutput()
				return en(err) + strings.TrimSpace(string(out))
			})
			s.do("this", semU1, "stat f (open)", func(d string) string {
				_, _, err := semLook(filepath.Join(d, "f"), true)
				return en(err)
			})
			s.lsModes("this", semU2, ".")
		},
		kernelWant: []string{
			"-rw-rw----+ f",
			"user:1002:r--",
			"default:user:1002:rwx",
			"setfattr user.x f: ENOTSUP",
			"f ok system.posix_acl_access,;",
		},
	}, {
		name:   "acl/setfacl",
		export: exportDir,
		setup:  semFiles(semFileSpec{name: "f", uid: 1001, gid: 1001, mode: 0o640, content: "for 1002\n"}),
		steps: func(s *semRun) {
			s.do("this", semU2, "read f", semReadOf("f"))
			s.tool("this", semU1, "setfacl", "-m", "u:1002:r--", "f")
			s.tool("this", semU1, "getfacl", "-c", "f")
			s.do("this", semU1, "stat f", semStatOf("f"))
			s.do("other", semU2, "read f", semReadOf("f"))
			s.do("this", semU2, "read f", semReadOf("f"))
			s.lsModes("this", semU1, ".")
			// Not the owner: refused by the server.
			s.tool("this", semU2, "setfacl", "-m", "u:1003:rw-", "f")
			s.tool("this", semU3, "setfacl", "-b", "f")
			s.tool("other", semU1, "getfacl", "-c", "f")
			// A chmod through the mount changes the ACL's mask.
			s.do("this", semU1, "chmod f 0600", semChmod("f", 0o600))
			s.tool("this", semU1, "getfacl", "-c", "f")
			s.do("other", semU2, "read f", semReadOf("f"))
			// The ACL removed.
			s.tool("this", semU1, "setfacl", "-b", "f")
			s.tool("this", semU1, "getfacl", "-c", "f")
			s.do("this", semU2, "read f", semReadOf("f"))
			// An ACL the mode says all of: only the mode changes.
			s.tool("this", semU1, "setfacl", "-m", "g::rw-,o::r--", "f")
			s.do("this", semU1, "stat f", semStatOf("f"))
			s.do("other", semU1, "stat f", semStatOf("f"))
			s.lsModes("this", semU1, ".")
			s.do("server", semRoot, "getfacl f", func(d string) string {
				out, err := exec.Command("getfacl", "-cp", filepath.Join(d, "f")).CombinedOutput()
				return en(err) + " " + strings.Join(strings.Fields(string(out)), " ")
			})
		},
		kernelWant: []string{
			"this u1002 read f: open=EACCES",
			"other u1002 read f: open=ok read=ok",
			"this u1002 setfacl -m u:1003:rw- f: exit status 1 setfacl: f: Operation not permitted",
			"-rw-r-----+ f",
			"-rw-rw-r-- f",
		},
	}, {
		name:   "acl/setfacl-default",
		export: exportDir,
		setup: func(s *semRun) error {
			d := filepath.Join(s.srv, "d")
			if err := os.Mkdir(d, 0o777); err != nil {
				return err
			}
			return os.Chown(d, 1001, 1001)
		},
		steps: func(s *semRun) {
			create := func(name string) func(d string) string {
				return func(d string) string {
					if err := unix.Unshare(unix.CLONE_FS); err != nil {
						return "unshare: " + en(err)
					}
					unix.Umask(0o022)
					return semWrite(filepath.Join(d, "d", name), semCreate, 0o666, "made by 1001\n")
				}
			}
			s.tool("this", semU1, "setfacl", "-d", "-m", "u::rwx,g::rwx,o::rx,u:1002:rw-", "d")
			s.tool("this", semU1, "getfacl", "-c", "d")
			s.do("this", semU1, "create d/f with umask 022", create("f"))
			s.do("this", semU1, "stat d/f", semStatOf("d/f"))
			s.tool("this", semU1, "getfacl", "-c", "d/f")
			s.do("other", semU2, "append d/f", semWriteOf("d/f", semAppend, 0, "by 1002\n"))
			s.do("server", semRoot, "getfacl d/f", func(d string) string {
				out, err := exec.Command("getfacl", "-cp", filepath.Join(d, "d", "f")).CombinedOutput()
				return en(err) + " " + strings.Join(strings.Fields(string(out)), " ")
			})
			s.tool("this", semU2, "setfacl", "-k", "d")
			s.tool("this", semU1, "setfacl", "-k", "d")
			s.tool("this", semU1, "getfacl", "-c", "d")
			// No default ACL any more: the umask applies.
			s.do("this", semU1, "create d/g with umask 022", create("g"))
			s.do("this", semU1, "stat d/g", semStatOf("d/g"))
			s.lsModes("this", semU1, "d")
		},
		kernelWant: []string{
			"default:user:1002:rw-",
			"other u1002 append d/f: open=ok write=ok close=ok",
			"-rw-rw-r--+ f",
			"-rw-r--r-- g",
		},
	}}
}
