//go:build integration

package integration

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The namespace scenarios: what an open descriptor, a name and root's
// rights become when the file or the export changes under them. Each runs
// the same program on the kernel's NFS/RDMA mount and on nfsrdma-mount's
// of the same export, and wants the same outcome.

// ext4ExportDir is exported insecure,no_root_squash from an ext4 file
// system on a loop device, which gives a new file the inode number of one
// just removed.
const ext4ExportDir = "/export-ext4"

// nsMountKernel mounts spec (host:path) with the kernel's NFS/RDMA client,
// with a superblock of its own (nosharecache), and unmounts it when the
// test ends.
func nsMountKernel(t *testing.T, spec string) string {
	t.Helper()
	dir := t.TempDir()
	run(t, "mount", "-t", "nfs", "-o", "vers=3,proto=rdma,port=20049,nosharecache", spec, dir)
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	return dir
}

// nsMounts mounts the export at path exp of the server with both clients:
// the kernel's first.
func nsMounts(t *testing.T, exp string, opts ...string) []struct{ label, dir string } {
	t.Helper()
	bin := mountBinary(t)
	spec := serverAddr.String() + ":" + exp
	return []struct{ label, dir string }{
		{"kernel", nsMountKernel(t, spec)},
		{"nfsrdma", mountNFSRDMASpec(t, bin, spec, opts...)},
	}
}

// nsTop makes a fresh directory, mode 0755, in the export directory exp on
// the server, removed when the test ends; it returns its name.
func nsTop(t *testing.T, exp, what string) string {
	t.Helper()
	name := fmt.Sprintf("ns-%s-%d", what, time.Now().UnixNano())
	if err := os.Mkdir(filepath.Join(exp, name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(exp, name), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Join(exp, name)) })
	return name
}

// nsRemovedOpen is Connectathon's special tests op_unlk and op_ren in dir
// (through a mount): 100 bytes written through a descriptor before or after
// the file is unlinked (or another renamed over it), then fstat and a read
// from the start, with the cached pages kept or dropped, close, and
// whether the .nfs file is gone 5 s after the close. The link count fstat
// gives after the removal comes apart (see TestNamespaceOpenFileRemoved).
func nsRemovedOpen(dir string, rename, writeBefore, drop bool) (string, uint64) {
	var out strings.Builder
	nlink := ^uint64(0)
	target, other := filepath.Join(dir, "target"), filepath.Join(dir, "other")
	if err := os.WriteFile(target, nil, 0o644); err != nil {
		return "setup: " + err.Error(), nlink
	}
	if rename {
		if err := os.WriteFile(other, []byte("the other file"), 0o644); err != nil {
			return "setup: " + err.Error(), nlink
		}
	}
	f, err := os.OpenFile(target, os.O_RDWR, 0)
	if err != nil {
		return "open: " + en(err), nlink
	}
	data := bytes.Repeat([]byte("0123456789"), 10)
	write := func() {
		n, err := f.Write(data)
		fmt.Fprintf(&out, "write: %d %s\n", n, en(err))
	}
	if writeBefore {
		write()
	}
	if rename {
		fmt.Fprintf(&out, "rename over it: %s\n", en(os.Rename(other, target)))
	} else {
		fmt.Fprintf(&out, "unlink: %s\n", en(os.Remove(target)))
	}
	if !writeBefore {
		write()
	}
	var st unix.Stat_t
	err = unix.Fstat(int(f.Fd()), &st)
	fmt.Fprintf(&out, "fstat: %s size %d\n", en(err), st.Size)
	nlink = st.Nlink
	if drop {
		unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	}
	buf := make([]byte, 2*len(data))
	n, err := f.ReadAt(buf, 0)
	if errors.Is(err, io.EOF) && n == len(data) {
		err = nil
	}
	fmt.Fprintf(&out, "read: %d bytes, the written ones %v, %s\n", n, bytes.Equal(buf[:n], data), en(err))
	err = unix.Fstat(int(f.Fd()), &st)
	fmt.Fprintf(&out, "fstat after: %s size %d\n", en(err), st.Size)
	fmt.Fprintf(&out, "close: %s\n", en(f.Close()))
	if rename {
		got, err := os.ReadFile(target)
		fmt.Fprintf(&out, "the file renamed over it: %q %s\n", got, en(err))
	}
	left := -1
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ents, _ := os.ReadDir(dir)
		left = 0
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".nfs") {
				left++
			}
		}
		if left == 0 || time.Now().After(deadline) {
			break
		}
	}
	fmt.Fprintf(&out, ".nfs files left 5 s after the close: %d\n", left)
	return out.String(), nlink
}

// TestNamespaceOpenFileRemoved: an open file unlinked, or renamed over,
// through the mount lives on under a .nfs name until its last close: fstat
// shows what was written and a read returns it, whether the write came
// before or after the removal and whether the pages are still cached, as
// on the kernel's mount (Connectathon special op_unlk, op_ren).
//
// One known difference: fstat's link count after the removal. The kernel's
// mount counts the link of the .nfs name (1); nfsrdma-mount hides it (0,
// as a local file system shows an unlinked open file). It is logged, not
// compared.
func TestNamespaceOpenFileRemoved(t *testing.T) {
	mounts := nsMounts(t, insecureExportDir)
	top := nsTop(t, insecureExportDir, "removed")
	for _, rename := range []bool{false, true} {
		for _, writeBefore := range []bool{false, true} {
			for _, drop := range []bool{false, true} {
				name := map[bool]string{false: "unlink", true: "rename"}[rename] +
					map[bool]string{false: "-then-write", true: "-after-write"}[writeBefore] +
					map[bool]string{false: "", true: "-dropped"}[drop]
				outs := make([]string, len(mounts))
				nlinks := make([]uint64, len(mounts))
				for i, m := range mounts {
					sub := filepath.Join(top, m.label+"-"+name)
					if err := os.Mkdir(filepath.Join(insecureExportDir, sub), 0o755); err != nil {
						t.Fatal(err)
					}
					outs[i], nlinks[i] = nsRemovedOpen(filepath.Join(m.dir, sub), rename, writeBefore, drop)
				}
				t.Logf("%s: nlink after the removal: kernel %d, nfsrdma %d (known to differ: nfsrdma-mount hides the .nfs link)", name, nlinks[0], nlinks[1])
				if !strings.Contains(outs[0], "read: 100 bytes, the written ones true") {
					t.Errorf("%s: the kernel's mount did not read back what was written (the scenario means nothing):\n%s", name, outs[0])
				}
				if outs[0] != outs[1] {
					t.Errorf("%s differs:\nkernel:\n%snfsrdma:\n%s", name, outs[0], outs[1])
				} else {
					t.Logf("%s, both mounts:\n%s", name, outs[0])
				}
			}
		}
	}
}

// nsIno returns the inode number of path on the server.
func nsIno(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// nsReplaceSameIno replaces the file at path on the server by a new file
// with data and the old one's inode number. ext4 (with its journal) gives a
// new file the lowest free inode number of its group, which need not be the
// one just freed (an earlier removal may have freed a lower one), and the
// removed inode is freed only when knfsd's open-file cache lets it go. So
// it makes new files beside path and keeps them (each takes the lowest free
// number, filling the gaps) until one gets the old number, then renames
// that one over the name and removes the others. It fails the test, rather
// than going on with a different file, if that does not happen within 500
// files or 10 seconds.
func nsReplaceSameIno(t *testing.T, path string, data []byte) {
	t.Helper()
	old := nsIno(t, path)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	var fillers []string
	defer func() {
		for _, p := range fillers {
			os.Remove(p)
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	var got []uint64
	for i := 0; i < 500 && time.Now().Before(deadline); i++ {
		p := fmt.Sprintf("%s.new%d", path, i)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		ino := nsIno(t, p)
		if ino == old {
			if err := os.Rename(p, path); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: the new file has the removed one's inode %d (other new files first: %v)", path, old, got)
			return
		}
		fillers = append(fillers, p)
		got = append(got, ino)
		if ino > old {
			// Every lower number is taken and the old one was not free
			// yet: the server still holds the removed file open.
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Fatalf("%s: no new file got the removed one's inode %d (they got %v): %s does not give freed inode numbers again, the scenario needs it", path, old, got, ext4ExportDir)
}

// TestNamespaceStaleSameIno: a file open on the mount (read, so its pages
// are cached) is replaced on the server of /export-ext4 (removed and made
// again under its name) by a file with the same inode number, then
// written through the old descriptor and closed. On the kernel's mount
// the old handle is stale for good: the write fails (at close, written
// back), and the new file is untouched; nfsrdma-mount must give the same.
func TestNamespaceStaleSameIno(t *testing.T) {
	mounts := nsMounts(t, ext4ExportDir)
	top := nsTop(t, ext4ExportDir, "stale")
	oldData := []byte("the old file, open on the mount\n")
	newData := []byte("the new file, made on the server with the same inode number\n")
	outs := make([]string, len(mounts))
	for i, m := range mounts {
		var out strings.Builder
		name := filepath.Join(top, "f-"+m.label)
		srvPath := filepath.Join(ext4ExportDir, name)
		if err := os.WriteFile(srvPath, oldData, 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(filepath.Join(m.dir, name), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 200)
		n, err := f.ReadAt(buf, 0)
		if !bytes.Equal(buf[:n], oldData) {
			t.Fatalf("%s: reading the old file: %q, %v", m.label, buf[:n], err)
		}
		nsReplaceSameIno(t, srvPath, newData)
		_, err = f.WriteAt([]byte("XXXX"), 0)
		fmt.Fprintf(&out, "write: %s\n", en(err))
		fmt.Fprintf(&out, "close: %s\n", en(f.Close()))
		got, err := os.ReadFile(srvPath)
		fmt.Fprintf(&out, "the new file on the server untouched: %v %s\n", bytes.Equal(got, newData), en(err))
		got, err = os.ReadFile(filepath.Join(m.dir, name))
		fmt.Fprintf(&out, "the path reads the new file: %v %s\n", bytes.Equal(got, newData), en(err))
		outs[i] = out.String()
		t.Logf("%s:\n%s", m.label, outs[i])
	}
	if !strings.Contains(outs[0], "untouched: true") {
		t.Errorf("the kernel's mount changed the new file (the scenario means nothing):\n%s", outs[0])
	}
	if outs[0] != outs[1] {
		t.Errorf("differs:\nkernel:\n%snfsrdma:\n%s", outs[0], outs[1])
	}
}

// TestNamespaceRootSquashSwitch: /export-insecure is switched to
// root_squash while mounted (exportfs -o, restored with exportfs -ra).
// Before, root reads file a and makes a directory (its owner, uid 0, shows
// root unsquashed), and the owner (uid 1001) reads its 0600 file b (its
// pages cached). After, root reads a and b again, and stats a file in the
// owner's 0700 directory p just after the owner did. The kernel client
// asks ACCESS per credential and keeps the answer per file while the
// file's attributes do not change: root may still read a (asked before),
// and b and p are refused (EACCES) — nfsrdma-mount must not serve root
// b's cached pages, nor p's name the owner's walk left in the kernel's
// dentry cache, nor p's listing the owner's left in its listing cache.
func TestNamespaceRootSquashSwitch(t *testing.T) {
	mounts := nsMounts(t, insecureExportDir)
	for _, m := range mounts {
		if err := os.Chmod(filepath.Dir(m.dir), 0o755); err != nil { // the owner must reach it
			t.Fatal(err)
		}
	}
	top := nsTop(t, insecureExportDir, "squash")
	owner := pcOwner
	secret := map[string][]byte{}
	for _, label := range []string{"kernel", "nfsrdma"} {
		for _, f := range []string{"a", "b"} {
			name := filepath.Join(top, f+"-"+label)
			secret[name] = []byte("the owner's secret " + name + "\n")
			p := filepath.Join(insecureExportDir, name)
			if err := os.WriteFile(p, secret[name], 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(p, int(owner.uid), int(owner.gid)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, label := range []string{"kernel", "nfsrdma"} {
		p := filepath.Join(insecureExportDir, top, "p-"+label)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "f"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{p, filepath.Join(p, "f")} {
			if err := os.Chown(q, int(owner.uid), int(owner.gid)); err != nil {
				t.Fatal(err)
			}
		}
	}
	stat := func(a pcActor, p string) string {
		return asActor(a, func() string {
			_, err := os.Lstat(p)
			return en(err)
		})
	}
	list := func(a pcActor, p string) string {
		return asActor(a, func() string {
			ents, err := os.ReadDir(p)
			if err != nil {
				return en(err)
			}
			return fmt.Sprintf("%d names", len(ents))
		})
	}
	read := func(a pcActor, p, name string) string {
		return asActor(a, func() string {
			got, err := os.ReadFile(p)
			if err != nil {
				return en(err)
			}
			if !bytes.Equal(got, secret[name]) {
				return fmt.Sprintf("%d bytes that are not the file's", len(got))
			}
			return "ok"
		})
	}
	outs := make([]strings.Builder, len(mounts))
	for i, m := range mounts {
		a, b := filepath.Join(top, "a-"+m.label), filepath.Join(top, "b-"+m.label)
		fmt.Fprintf(&outs[i], "no_root_squash: root reads a: %s\n", read(pcRoot, filepath.Join(m.dir, a), a))
		d := filepath.Join(m.dir, top, "rootdir-"+m.label)
		fmt.Fprintf(&outs[i], "no_root_squash: root mkdir: %s\n", en(os.Mkdir(d, 0o700)))
		fmt.Fprintf(&outs[i], "no_root_squash: the owner reads b: %s\n", read(owner, filepath.Join(m.dir, b), b))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("exportfs", "-ra").CombinedOutput(); err != nil {
			t.Errorf("exportfs -ra: %v\n%s", err, out)
		}
	})
	run(t, "exportfs", "-o", "rw,insecure,root_squash,no_subtree_check,fsid=2", "*:"+insecureExportDir)
	for i, m := range mounts {
		a, b := filepath.Join(top, "a-"+m.label), filepath.Join(top, "b-"+m.label)
		fmt.Fprintf(&outs[i], "root_squash: root reads b: %s\n", read(pcRoot, filepath.Join(m.dir, b), b))
		fmt.Fprintf(&outs[i], "root_squash: root reads a: %s\n", read(pcRoot, filepath.Join(m.dir, a), a))
		fmt.Fprintf(&outs[i], "root_squash: the owner reads b: %s\n", read(owner, filepath.Join(m.dir, b), b))
		pf := filepath.Join(m.dir, top, "p-"+m.label, "f")
		fmt.Fprintf(&outs[i], "root_squash: the owner stats p/f in its 0700 directory: %s\n", stat(owner, pf))
		fmt.Fprintf(&outs[i], "root_squash: root stats p/f: %s\n", stat(pcRoot, pf))
		pd := filepath.Dir(pf)
		fmt.Fprintf(&outs[i], "root_squash: the owner lists p: %s\n", list(owner, pd))
		fmt.Fprintf(&outs[i], "root_squash: root lists p: %s\n", list(pcRoot, pd))
	}
	k, o := outs[0].String(), outs[1].String()
	t.Logf("kernel:\n%snfsrdma:\n%s", k, o)
	if !strings.Contains(k, "root_squash: root reads b: EACCES") || !strings.Contains(k, "root stats p/f: EACCES") {
		t.Errorf("the kernel's mount let squashed root read b (the scenario means nothing):\n%s", k)
	}
	if k != o {
		t.Errorf("differs:\nkernel:\n%snfsrdma:\n%s", k, o)
	}
}

// TestNamespaceOtherClientName: a file another client (the server's own
// directory) makes in a directory this mount just made, and in which it
// just made a file, is found through the mount as soon as on the kernel's
// mount, which has no negative entry for a name it never looked up and
// asks the server: within 3 s, not when the directory's attributes expire
// (acdirmin, 30 s).
func TestNamespaceOtherClientName(t *testing.T) {
	mounts := nsMounts(t, insecureExportDir)
	top := nsTop(t, insecureExportDir, "names")
	const rounds, within = 3, 3 * time.Second
	outs := make([]string, len(mounts))
	for i, m := range mounts {
		var out strings.Builder
		for r := range rounds {
			d := filepath.Join(top, fmt.Sprintf("%s-%d", m.label, r))
			if err := os.Mkdir(filepath.Join(m.dir, d), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(m.dir, d, "mine"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(insecureExportDir, d, "theirs"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			var err error
			for {
				if _, err = os.Lstat(filepath.Join(m.dir, d, "theirs")); err == nil || time.Since(start) > 40*time.Second {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			took := time.Since(start)
			t.Logf("%s, round %d: the other client's file found after %v (%s)", m.label, r, took.Round(10*time.Millisecond), en(err))
			fmt.Fprintf(&out, "round %d: found within %v: %v\n", r, within, err == nil && took <= within)
		}
		outs[i] = out.String()
	}
	if outs[0] != outs[1] {
		t.Errorf("differs:\nkernel:\n%snfsrdma:\n%s", outs[0], outs[1])
	}
}
