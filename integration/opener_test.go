//go:build integration

package integration

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The open file's identity and the SETATTRs sent as made: each scenario
// runs the same program on the kernel's NFS/RDMA mount and on
// nfsrdma-mount's mount of the same export, and the outcomes (errnos, the
// bytes and modes at the server, read on the server's own directory, and
// as each mount shows them) must be equal.

// fdHelperEnv names the unix socket a second process of this binary, run
// as another user, receives a descriptor on (SCM_RIGHTS): see fdHelper.
const fdHelperEnv = "NFSRDMA_FD_HELPER"

func init() {
	if sock := os.Getenv(fdHelperEnv); sock != "" {
		os.Exit(fdHelper(sock))
	}
}

// fdHelper receives a descriptor and a message on the unix socket sock:
// "w:DATA" writes DATA at offset 0 through it, "r:" reads it from offset 0;
// then it closes the descriptor and prints what each call gave.
func fdHelper(sock string) int {
	c, err := net.Dial("unix", sock)
	if err != nil {
		fmt.Println("dial:", err)
		return 1
	}
	buf, oob := make([]byte, 256), make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := c.(*net.UnixConn).ReadMsgUnix(buf, oob)
	if err != nil {
		fmt.Println("recvmsg:", err)
		return 1
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		fmt.Println("no descriptor:", err)
		return 1
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		fmt.Println("no descriptor:", err)
		return 1
	}
	msg, fd := string(buf[:n]), fds[0]
	var out string
	switch {
	case strings.HasPrefix(msg, "w:"):
		_, err := unix.Pwrite(fd, []byte(msg[2:]), 0)
		out = "write " + en(err)
	case strings.HasPrefix(msg, "r:"):
		b := make([]byte, 256)
		m, err := unix.Pread(fd, b, 0)
		out = fmt.Sprintf("read %s %q", en(err), b[:max(m, 0)])
	}
	fmt.Printf("uid %d: %s, close %s\n", os.Getuid(), out, en(unix.Close(fd)))
	return 0
}

// passFD runs fdHelper as uid and gid and passes it fd with msg; it
// returns what the helper printed.
func passFD(fd int, uid uint32, msg string) string {
	dir, err := os.MkdirTemp("", "opener")
	if err != nil {
		return err.Error()
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o777); err != nil {
		return err.Error()
	}
	sock := filepath.Join(dir, "s")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return err.Error()
	}
	defer l.Close()
	if err := os.Chmod(sock, 0o777); err != nil {
		return err.Error()
	}
	exe, err := os.Executable()
	if err != nil {
		return err.Error()
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), fdHelperEnv+"="+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{uid}}}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return err.Error()
	}
	l.SetDeadline(time.Now().Add(30 * time.Second))
	c, err := l.AcceptUnix()
	if err == nil {
		_, _, err = c.WriteMsgUnix([]byte(msg), unix.UnixRights(fd), nil)
		c.Close()
	}
	werr := cmd.Wait()
	if err != nil || werr != nil {
		return fmt.Sprintf("passing the descriptor: %v; helper: %v: %s", err, werr, out.String())
	}
	return strings.TrimSpace(out.String())
}

// openerRun is the opener scenario in dir (through a mount) whose server
// directory is srv: root opens a file (on the root_squash export: as
// nobody, in a directory where nobody may create), uid 1002 writes it
// through root's descriptor and closes its copy, then reads it through
// another of root's descriptors; once with the credential switched on a
// thread (as setpriv, runuser or a privilege-dropping daemon), once in a
// process of its own that receives the descriptor over a unix socket.
func openerRun(dir, srv string) string {
	var b strings.Builder
	u := pcActor{"u1002", 1002, 1002, []uint32{1002}}
	for _, how := range []string{"thread", "scm_rights"} {
		p := filepath.Join(dir, how)
		data := "written by uid 1002 through root's descriptor (" + how + ")\n"
		fd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR, 0o644)
		if err != nil {
			fmt.Fprintf(&b, "%s: root's open %s\n", how, en(err))
			continue
		}
		switch how {
		case "thread":
			fmt.Fprintf(&b, "%s: %s\n", how, asActor(u, func() string {
				d, err := unix.Dup(fd)
				if err != nil {
					return "dup " + en(err)
				}
				_, werr := unix.Pwrite(d, []byte(data), 0)
				return fmt.Sprintf("write %s, close %s", en(werr), en(unix.Close(d)))
			}))
		default:
			fmt.Fprintf(&b, "%s: %s\n", how, passFD(fd, u.uid, "w:"+data))
		}
		fmt.Fprintf(&b, "%s: root's close %s\n", how, en(unix.Close(fd)))
		got, err := os.ReadFile(filepath.Join(srv, how))
		fmt.Fprintf(&b, "%s: at the server %s %q (want it: %v)\n", how, en(err), got, string(got) == data)
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(srv, how), &st); err == nil {
			fmt.Fprintf(&b, "%s: at the server owner %d mode %o\n", how, st.Uid, st.Mode&0o7777)
		}
		rfd, err := unix.Open(p, unix.O_RDONLY, 0)
		if err != nil {
			fmt.Fprintf(&b, "%s: root's open for reading %s\n", how, en(err))
			continue
		}
		switch how {
		case "thread":
			fmt.Fprintf(&b, "%s: %s\n", how, asActor(u, func() string {
				buf := make([]byte, 256)
				n, err := unix.Pread(rfd, buf, 0)
				return fmt.Sprintf("read %s %q", en(err), buf[:max(n, 0)])
			}))
		default:
			fmt.Fprintf(&b, "%s: %s\n", how, passFD(rfd, u.uid, "r:"))
		}
		unix.Close(rfd)
	}
	return b.String()
}

// TestOpenerIdentity: a descriptor root opened on the root_squash export,
// written and read by uid 1002 (on a thread whose credential was switched,
// and in another process that received it over a unix socket): the calls
// carry root's credential (nobody at the server, the file's owner), and the
// bytes at the server and those read back are the same on both mounts.
func TestOpenerIdentity(t *testing.T) {
	bin := mountBinary(t)
	ours := mountNFSRDMA(t, bin)
	kernel := mountKernel(t)
	for _, m := range []string{ours, kernel} {
		if err := os.Chmod(filepath.Dir(m), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	top := fmt.Sprintf("opener-%d", os.Getpid())
	for _, side := range []string{"k", "o"} {
		d := filepath.Join(exportDir, top, side)
		if err := os.MkdirAll(d, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o777); err != nil { // nobody may create
			t.Fatal(err)
		}
	}
	defer os.RemoveAll(filepath.Join(exportDir, top))
	defer watchMount(t, ours, 5*time.Minute)()
	k := openerRun(filepath.Join(kernel, top, "k"), filepath.Join(exportDir, top, "k"))
	o := openerRun(filepath.Join(ours, top, "o"), filepath.Join(exportDir, top, "o"))
	// The scenario means something only if the kernel's mount wrote and
	// read the bytes as nobody.
	for _, want := range []string{"thread: at the server ok", "scm_rights: at the server ok", "(want it: true)", "owner 65534", `read ok "written by uid 1002`} {
		if !strings.Contains(k, want) {
			t.Errorf("the kernel's mount: no %q:\n%s", want, k)
		}
	}
	if strings.Contains(k, "(want it: false)") {
		t.Errorf("the kernel's mount lost bytes:\n%s", k)
	}
	if k != o {
		t.Errorf("the mounts differ:\nkernel:\n%sours:\n%s", k, o)
	} else {
		t.Logf("both mounts:\n%s", k)
	}
}

// sbitTree makes, in dir, the tree whose modes and owners tar -xp and
// cp -a must keep: files with the set-user-ID and set-group-ID bits whose
// owner is not root, a sticky directory and a set-group-ID one. It returns
// the entries' names.
func sbitTree(t *testing.T, dir string) []string {
	t.Helper()
	ents := []struct {
		name     string
		dir      bool
		mode     uint32
		uid, gid int
	}{
		{"t", true, 0o755, 0, 0},
		{"t/f4755", false, 0o4755, 1001, 1001},
		{"t/f2755", false, 0o2755, 1002, 1002},
		{"t/f6755", false, 0o6755, 1001, 1002},
		{"t/f2745", false, 0o2745, 1003, 1001}, // set-group-ID without group execute
		{"t/f0640", false, 0o640, 1003, 1003},
		{"t/d1777", true, 0o1777, 1003, 1003},
		{"t/d1777/f4711", false, 0o4711, 1002, 1001},
		{"t/d2775", true, 0o2775, 1001, 1002},
	}
	var names []string
	for _, e := range ents {
		p := filepath.Join(dir, e.name)
		var err error
		if e.dir {
			err = os.Mkdir(p, 0o700)
		} else {
			err = os.WriteFile(p, []byte("#!/bin/sh\necho "+e.name+"\n"), 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, e.name)
	}
	// Owners first, then modes (a chown clears the bits), times last,
	// deepest first.
	for i := len(ents) - 1; i >= 0; i-- {
		e := ents[i]
		p := filepath.Join(dir, e.name)
		if err := os.Lchown(p, e.uid, e.gid); err != nil {
			t.Fatal(err)
		}
		if err := unix.Chmod(p, e.mode); err != nil {
			t.Fatal(err)
		}
		mt := time.Unix(1_000_000_000+int64(i), 0)
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	return names
}

// modesOf describes each of names under srv (read on the server) and under
// mnt (as the mount shows it): mode with its special bits, owner and group.
func modesOf(names []string, srv, mnt string) string {
	var b strings.Builder
	for _, n := range names {
		for _, side := range []struct{ what, dir string }{{"server", srv}, {"mount", mnt}} {
			var st unix.Stat_t
			if err := unix.Lstat(filepath.Join(side.dir, n), &st); err != nil {
				fmt.Fprintf(&b, "%s (%s): %s\n", n, side.what, en(err))
				continue
			}
			fmt.Fprintf(&b, "%s (%s): %04o %d:%d\n", n, side.what, st.Mode&0o7777, st.Uid, st.Gid)
		}
	}
	return b.String()
}

// TestOpenerSbitsKept: tar -xp and cp -a as root, on the export that does
// not squash root, of files with the set-user-ID and set-group-ID bits and
// other owners, a sticky and a set-group-ID directory: the modes and
// owners at the server (read on its own directory) and as the mount shows
// them are the originals, on the kernel's mount, on nfsrdma-mount's by
// default, and on nfsrdma-mount's with defersetattr (which must not merge
// such a mode with the owner change: knfsd would clear the bits).
func TestOpenerSbitsKept(t *testing.T) {
	bin := mountBinary(t)
	src := t.TempDir()
	names := sbitTree(t, src)
	want := modesOf(names, src, src)
	tarball := filepath.Join(t.TempDir(), "t.tar")
	run(t, "tar", "-C", src, "-cf", tarball, "t")
	top := fmt.Sprintf("opener-sbits-%d", os.Getpid())
	if err := os.Mkdir(filepath.Join(insecureExportDir, top), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Join(insecureExportDir, top)) })
	for i, name := range []string{"kernel", "ours", "ours,defersetattr"} {
		t.Run(name, func(t *testing.T) {
			var mnt string
			switch name {
			case "kernel":
				mnt = t.TempDir()
				run(t, "mount", "-t", "nfs", "-o", "vers=3,proto=rdma,port=20049", insecureExportSpec, mnt)
				t.Cleanup(func() { exec.Command("umount", mnt).Run() })
			case "ours":
				mnt = mountNFSRDMASpec(t, bin, insecureExportSpec)
			default:
				mnt = mountNFSRDMASpec(t, bin, insecureExportSpec, "defersetattr")
			}
			for _, how := range []string{"tar", "cp"} {
				sub := fmt.Sprintf("%d-%s", i, how)
				if err := os.Mkdir(filepath.Join(mnt, top, sub), 0o755); err != nil {
					t.Fatal(err)
				}
				if how == "tar" {
					run(t, "tar", "-C", filepath.Join(mnt, top, sub), "-xpf", tarball)
				} else {
					run(t, "cp", "-a", filepath.Join(src, "t"), filepath.Join(mnt, top, sub))
				}
				got := modesOf(names, filepath.Join(insecureExportDir, top, sub), filepath.Join(mnt, top, sub))
				if got != want {
					t.Errorf("%s through %s: modes and owners differ from the originals:\ngot:\n%swant:\n%s", how, name, got, want)
				}
			}
		})
	}
}

// openerSquashDir is the all_squash export (anonuid=anongid=1500): every
// user is 1500 at the server, which so refuses a file's owner the changes
// only the owner may make, where the client's local check lets them
// through.
const openerSquashDir = "/export-squash"

// refusedRun is the refused-change scenario in dir (through a mount of
// the all_squash export) whose server directory is srv: changes the local
// check lets through and the server refuses (the owner's fchmod and
// utimes of a file it has open for writing: the case a deferred SETATTR
// answered at once; its chmod by path), and changes the local check
// refuses (a chmod by another user than the owner, a chown to another
// user by the owner). Each must fail at its call with the same errno, and
// the mode and owner shown afterwards be the server's.
func refusedRun(dir, srv string) string {
	var b strings.Builder
	for _, n := range []string{"a", "o"} {
		p := filepath.Join(srv, n)
		if err := errors.Join(os.WriteFile(p, []byte("owned by 1001\n"), 0o666), os.Chmod(p, 0o666), os.Chown(p, 1001, 1001)); err != nil {
			return "setup: " + err.Error()
		}
	}
	owner := pcActor{"u1001", 1001, 1001, []uint32{1001}}
	fmt.Fprintf(&b, "owner, file open for writing: %s\n", asActor(owner, func() string {
		p := filepath.Join(dir, "a")
		fd, err := unix.Open(p, unix.O_WRONLY, 0)
		if err != nil {
			return "open " + en(err)
		}
		ts := []unix.Timespec{unix.NsecToTimespec(1e18), unix.NsecToTimespec(1e18)}
		return fmt.Sprintf("open ok, fchmod 600 %s, utimes %s, close %s",
			en(unix.Fchmod(fd, 0o600)), en(unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, 0)), en(unix.Close(fd)))
	}))
	fmt.Fprint(&b, modesOf([]string{"a"}, srv, dir))
	q := filepath.Join(dir, "o")
	fmt.Fprintf(&b, "uid 1002 chmod 600 of 1001's file: %s\n", asActor(pcActor{"u1002", 1002, 1002, []uint32{1002}}, func() string {
		return en(unix.Chmod(q, 0o600))
	}))
	fmt.Fprintf(&b, "uid 1001 chown of its file to 1002: %s\n", asActor(owner, func() string {
		return en(unix.Chown(q, 1002, 1001))
	}))
	fmt.Fprintf(&b, "uid 1001 chmod 600 of its file: %s\n", asActor(owner, func() string {
		return en(unix.Chmod(q, 0o600))
	}))
	fmt.Fprint(&b, modesOf([]string{"o"}, srv, dir))
	return b.String()
}

// TestOpenerRefusedSetattr: a chmod, chown or utimes the server refuses
// fails at that call, with the kernel mount's errno, and leaves the mode
// shown the server's; on nfsrdma-mount by default even from the file's
// owner that has it open for writing (which defersetattr answers at once).
func TestOpenerRefusedSetattr(t *testing.T) {
	bin := mountBinary(t)
	spec := serverAddr.String() + ":" + openerSquashDir
	kernel := t.TempDir()
	run(t, "mount", "-t", "nfs", "-o", "vers=3,proto=rdma,port=20049", spec, kernel)
	t.Cleanup(func() { exec.Command("umount", kernel).Run() })
	ours := mountNFSRDMASpec(t, bin, spec)
	for _, m := range []string{ours, kernel} {
		if err := os.Chmod(filepath.Dir(m), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	top := fmt.Sprintf("opener-refused-%d", os.Getpid())
	for _, side := range []string{"k", "o"} {
		if err := os.MkdirAll(filepath.Join(openerSquashDir, top, side), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Join(openerSquashDir, top)) })
	k := refusedRun(filepath.Join(kernel, top, "k"), filepath.Join(openerSquashDir, top, "k"))
	o := refusedRun(filepath.Join(ours, top, "o"), filepath.Join(openerSquashDir, top, "o"))
	for _, want := range []string{"open ok, fchmod 600 EPERM", "uid 1002 chmod 600 of 1001's file: EPERM", "chown of its file to 1002: EPERM", "uid 1001 chmod 600 of its file: EPERM", "a (mount): 0666 1001:1001"} {
		if !strings.Contains(k, want) {
			t.Errorf("the kernel's mount: no %q:\n%s", want, k)
		}
	}
	if k != o {
		t.Errorf("the mounts differ:\nkernel:\n%sours:\n%s", k, o)
	} else {
		t.Logf("both mounts:\n%s", k)
	}
}
