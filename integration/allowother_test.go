//go:build integration

package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Who may use a mount besides its maker (allow_other, noallow_other), and
// the remount of a user's fstab mount, against knfsd with the guest's
// fusermount3 and mount(8).

// userMountDir makes a directory uid owns under a fresh /tmp directory
// every user can walk (t.TempDir's parents are 0700).
func userMountDir(t *testing.T, uid int, name string) string {
	t.Helper()
	base, err := os.MkdirTemp("/tmp", name+"-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(base, 0o755)
	t.Cleanup(func() { os.RemoveAll(base) })
	dir := filepath.Join(base, "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, uid); err != nil {
		t.Fatal(err)
	}
	return dir
}

// replaceFile sets path's content for the test and restores it (or its
// absence) after.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	old, err := os.ReadFile(path)
	existed := err == nil
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if existed {
			os.WriteFile(path, old, 0o644)
		} else {
			os.Remove(path)
		}
	})
}

// ownedFiles makes files on the insecure export's side: name -> uid and
// mode, in a directory of its own (0755, owned by uid 1001).
func ownedFiles(t *testing.T, files map[string][2]int) string {
	t.Helper()
	sub := fmt.Sprintf("allowother-%d", os.Getpid())
	d := filepath.Join(insecureExportDir, sub)
	os.RemoveAll(d)
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	os.Chown(d, mountUser, mountUser)
	for name, um := range files {
		p := filepath.Join(d, name)
		if err := os.WriteFile(p, []byte("content of "+name), os.FileMode(um[1])); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, os.FileMode(um[1]))
		if err := os.Chown(p, um[0], um[0]); err != nil {
			t.Fatal(err)
		}
	}
	return sub
}

// TestAllowOtherUser: user 1001 mounts with allow_other. Without
// user_allow_other in /etc/fuse.conf the mount is refused at once, naming
// that line; with it the mount is open to user 1002, whose calls carry
// 1002's own credential: 1002 reads what 1002 may read (1001's 0644 file,
// its own 0600 file, which 1001 may not) and is refused 1001's 0600 file.
func TestAllowOtherUser(t *testing.T) {
	bin := mountBinary(t)
	addUsers(t)
	userMountSystem(t)
	const other = mountUser + 1
	sub := ownedFiles(t, map[string][2]int{
		"public":     {mountUser, 0o644},
		"private":    {mountUser, 0o600},
		"other-only": {other, 0o600},
	})
	dir := userMountDir(t, mountUser, "allowother")
	cleanupMount(t, bin, dir)
	opts := "proto=tcp,port=2049,allow_other"

	replaceFile(t, "/etc/fuse.conf", "# mount_max = 1000\n#user_allow_other\n")
	code, out := asUser(t, mountUser, nil, bin, "-o", opts, insecureExportSpec, dir)
	t.Logf("allow_other without user_allow_other: exit %d: %s", code, out)
	if code == 0 {
		t.Fatal("a user's allow_other mount succeeded without user_allow_other in /etc/fuse.conf")
	}
	for _, want := range []string{"user_allow_other", "/etc/fuse.conf"} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal lacks %q", want)
		}
	}
	if strings.Contains(out, "fusermount") {
		t.Errorf("the refusal came from fusermount, not before it: %s", out)
	}
	if mountType(t, dir) != "" {
		t.Fatal("left mounted")
	}

	os.WriteFile("/etc/fuse.conf", []byte("# mount_max = 1000\nuser_allow_other\n"), 0o644)
	if code, out := asUser(t, mountUser, nil, bin, "-o", opts, insecureExportSpec, dir); code != 0 {
		t.Fatalf("allow_other with user_allow_other: exit %d: %s", code, out)
	}
	_, super := mountOptsOf(t, dir)
	t.Logf("superblock options: %s", super)
	if !strings.Contains(super, ",allow_other,") || !strings.Contains(super, fmt.Sprintf(",user_id=%d,", mountUser)) {
		t.Errorf("not the user's allow_other mount: %s", super)
	}
	for _, tc := range []struct {
		uid  int
		file string
		ok   bool
	}{
		{other, "public", true},
		{other, "other-only", true},
		{other, "private", false},
		{mountUser, "private", true},
		{mountUser, "other-only", false},
	} {
		code, out := asUser(t, tc.uid, nil, "/bin/cat", filepath.Join(dir, sub, tc.file))
		switch {
		case tc.ok && (code != 0 || out != "content of "+tc.file):
			t.Errorf("uid %d reading %s: exit %d: %q; want its content", tc.uid, tc.file, code, out)
		case !tc.ok && (code == 0 || !strings.Contains(out, "Permission denied")):
			t.Errorf("uid %d reading %s: exit %d: %q; want Permission denied", tc.uid, tc.file, code, out)
		}
	}
	// Writing where only the mounting user may: refused for the other.
	code, out = asUser(t, other, nil, "/bin/sh", "-c", `echo mine > "$0"`, filepath.Join(dir, sub, "made-by-other"))
	if code == 0 {
		t.Errorf("uid %d created a file in uid %d's 0755 directory: the mounting user's rights were lent", other, mountUser)
	} else if !strings.Contains(out, "Permission denied") {
		t.Errorf("uid %d creating in uid %d's 0755 directory: %s; want Permission denied", other, mountUser, out)
	}
	if code, out := asUser(t, mountUser, nil, bin, "-u", dir); code != 0 || mountType(t, dir) != "" {
		t.Fatalf("unmount as the user: exit %d: %s", code, out)
	}
}

// TestNoAllowOtherRoot: root's mount is open to every user, as
// mount.nfs's; with noallow_other another user's stat of its contents (and
// of the mount point) fails with EACCES in the kernel, while root's works.
func TestNoAllowOtherRoot(t *testing.T) {
	bin := mountBinary(t)
	addUsers(t)
	for _, tc := range []struct {
		opt    string
		shared bool
	}{{"", true}, {"noallow_other", false}} {
		dir := userMountDir(t, 0, "noallowother")
		cleanupMount(t, bin, dir)
		opts := "vers=3,proto=rdma,port=20049"
		if tc.opt != "" {
			opts += "," + tc.opt
		}
		if code, out := runCmd(t, bin, "-o", opts, exportSpec, dir); code != 0 {
			t.Fatalf("mount -o %s: exit %d: %s", opts, code, out)
		}
		for _, p := range []string{dir, dir + "/."} {
			code, out := asUser(t, mountUser, nil, "/usr/bin/stat", "-c", "%i", p)
			switch {
			case tc.shared && code != 0:
				t.Errorf("%s: uid %d stat %s: exit %d: %s", opts, mountUser, p, code, out)
			case !tc.shared && (code == 0 || !strings.Contains(out, "Permission denied")):
				t.Errorf("%s: uid %d stat %s: exit %d: %s; want Permission denied", opts, mountUser, p, code, out)
			}
		}
		if _, err := os.ReadDir(dir); err != nil {
			t.Errorf("%s: root listing the mount: %v", opts, err)
		}
		if code, out := runCmd(t, bin, "-u", dir); code != 0 {
			t.Fatalf("unmount: %s", out)
		}
	}
}

// TestRemountUserMount: an fstab "user" mount made by user 1001 through
// mount(8). Another user may neither remount nor unmount it; the owner
// cannot remount it either (fusermount cannot); root's remount keeps what
// mount(8) keeps: user's noexec, nosuid and nodev, the owner (user_id),
// and the owner's right to unmount; a mount made ro is not remounted rw
// behind its server's back.
func TestRemountUserMount(t *testing.T) {
	bin := mountBinary(t)
	addUsers(t)
	userMountSystem(t)
	helperLinks(t, bin, "mount.nfsrdma", "mount.fuse.nfsrdma", "umount.nfsrdma", "umount.fuse.nfsrdma")
	const other = mountUser + 1
	dir := userMountDir(t, mountUser, "remount-user")
	roDir := userMountDir(t, mountUser, "remount-user-ro")
	cleanupMount(t, bin, dir)
	cleanupMount(t, bin, roDir)
	fstab, err := os.ReadFile("/etc/fstab")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	lines := fmt.Sprintf("%s %s nfsrdma proto=tcp,port=2049,user,noauto,_netdev 0 0\n%s %s nfsrdma proto=tcp,port=2049,ro,user,noauto,_netdev 0 0\n",
		insecureExportSpec, dir, insecureExportSpec, roDir)
	replaceFile(t, "/etc/fstab", string(append(bytes.Clone(fstab), lines...)))

	if code, out := asUser(t, mountUser, nil, "/usr/bin/mount", dir); code != 0 {
		t.Fatalf("mount %s as uid %d: exit %d: %s", dir, mountUser, code, out)
	}
	vfs0, super0 := mountOptsOf(t, dir)
	t.Logf("the user's mount: %s - %s", vfs0, super0)
	has := func(what, opts string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(opts, ","+w+",") {
				t.Errorf("%s: lacks %s: %s", what, w, opts)
			}
		}
	}
	has("the user's mount", vfs0, "rw", "noexec", "nosuid", "nodev")
	owner := fmt.Sprintf("user_id=%d", mountUser)
	has("the user's mount", super0, owner)

	// Another user: neither remount nor unmount.
	for _, args := range [][]string{{"/usr/bin/mount", "-o", "remount,ro", dir}, {bin, "-o", "remount,ro", dir}, {"/usr/bin/umount", dir}, {bin, "-u", dir}} {
		code, out := asUser(t, other, nil, args[0], args[1:]...)
		t.Logf("uid %d: %v: exit %d: %s", other, args, code, strings.TrimSpace(out))
		if code == 0 {
			t.Errorf("uid %d ran %v on uid %d's mount", other, args, mountUser)
		}
		if vfs, _ := mountOptsOf(t, dir); vfs != vfs0 {
			t.Fatalf("uid %d's %v changed the mount: %s, was %s", other, args, vfs, vfs0)
		}
	}
	// The owner: a FUSE mount cannot be remounted without privilege.
	code, out := asUser(t, mountUser, nil, "/usr/bin/mount", "-o", "remount,ro", dir)
	t.Logf("uid %d: mount -o remount,ro: exit %d: %s", mountUser, code, strings.TrimSpace(out))
	if vfs, _ := mountOptsOf(t, dir); code == 0 || vfs != vfs0 {
		t.Errorf("the owner's remount: exit %d, options %s (were %s); want a refusal and no change", code, vfs, vfs0)
	}

	// Root: ro, then rw again, through mount(8) and through the helper;
	// user's flags and the owner stay. nfsrdma-mount starts from the
	// mount's current flags; mount(8) from the fstab line's and those
	// given (mount(8): "mount reads fstab and merges these options with
	// the options from the command line"), so a remount through it that
	// names neither ro nor rw makes the mount rw again, as it does a
	// kernel NFS mount, while the atime flags, unnamed, stay (mount(2)).
	for _, step := range []struct {
		args []string
		ro   bool
	}{
		{[]string{"mount", "-o", "remount,ro", dir}, true},
		{[]string{"mount", "-o", "remount,rw", dir}, false},
		{[]string{bin, "-o", "remount,ro", dir}, true},
		{[]string{bin, "-o", "remount,noatime", dir}, true},
		{[]string{"mount", "-o", "remount", dir}, false},
		{[]string{bin, "-o", "remount,ro", dir}, true},
		{[]string{bin, "-o", "remount,rw", dir}, false},
	} {
		code, out := runCmd(t, step.args[0], step.args[1:]...)
		vfs, super := mountOptsOf(t, dir)
		t.Logf("root: %v: exit %d: %s -> %s - %s", step.args, code, strings.TrimSpace(out), vfs, super)
		if code != 0 {
			t.Fatalf("root's %v: exit %d: %s", step.args, code, out)
		}
		mode := "rw"
		if step.ro {
			mode = "ro"
		}
		has(fmt.Sprint(step.args), vfs, mode, "noexec", "nosuid", "nodev")
		has(fmt.Sprint(step.args), super, owner)
	}
	if vfs, _ := mountOptsOf(t, dir); !strings.Contains(vfs, ",noatime,") {
		t.Errorf("remount,noatime not kept by the later remount,rw: %s", vfs)
	}
	name := filepath.Join(dir, fmt.Sprintf("remount-user-%d", os.Getpid()))
	defer os.Remove(filepath.Join(insecureExportDir, filepath.Base(name)))
	if code, out := asUser(t, mountUser, nil, "/bin/sh", "-c", `echo rw > "$0"`, name); code != 0 {
		t.Errorf("the owner writing after root's remount,rw: %s", out)
	}
	if code, out := asUser(t, mountUser, nil, "/usr/bin/umount", dir); code != 0 || mountType(t, dir) != "" {
		t.Errorf("the owner's umount after root's remounts: exit %d: %s", code, out)
	}

	// Mounted ro from fstab by the user: root's remount,rw is refused (the
	// server refuses writes), and the mount stays ro.
	if code, out := asUser(t, mountUser, nil, "/usr/bin/mount", roDir); code != 0 {
		t.Fatalf("mount %s as uid %d: exit %d: %s", roDir, mountUser, code, out)
	}
	has("the user's ro mount", mountOptsOf1(t, roDir), "ro", "noexec")
	// The fstab line's ro is kept by root's remount of another flag.
	if code, out := runCmd(t, "mount", "-o", "remount,noatime", roDir); code != 0 {
		t.Fatalf("root's remount,noatime of the user's ro mount: exit %d: %s", code, out)
	}
	vfsRO := mountOptsOf1(t, roDir)
	has("the user's ro mount after remount,noatime", vfsRO, "ro", "noexec", "nosuid", "nodev", "noatime")
	code, out = runCmd(t, "mount", "-o", "remount,rw", roDir)
	t.Logf("root: remount,rw of the user's ro mount: exit %d: %s", code, strings.TrimSpace(out))
	if vfs, _ := mountOptsOf(t, roDir); code == 0 || !strings.Contains(out, "mounted ro") || vfs != vfsRO {
		t.Errorf("remount,rw of a mount made ro: exit %d: %s; options %s, were %s; want a refusal saying it was mounted ro, and no change", code, out, vfs, vfsRO)
	}
	if code, out := asUser(t, mountUser, nil, "/usr/bin/umount", roDir); code != 0 {
		t.Errorf("the owner's umount of the ro mount: exit %d: %s", code, out)
	}
}

// mountOptsOf1 is mountOptsOf's per-mount options alone.
func mountOptsOf1(t *testing.T, dir string) string {
	t.Helper()
	vfs, _ := mountOptsOf(t, dir)
	return vfs
}
