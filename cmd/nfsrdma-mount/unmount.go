package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// fsType is the type the kernel gives our mounts.
const fsType = "fuse.nfsrdma"

// mountEntry is one line of /proc/self/mountinfo.
type mountEntry struct {
	Point     string // mount point, unescaped
	MountOpts string // per-mount options (rw,nosuid,nodev,relatime...)
	Type      string
	Source    string
	SuperOpts string // the superblock's options (rw,user_id=0,group_id=0...)
}

// OwnerUID returns the user_id= of a FUSE mount's superblock options, -1
// when there is none.
func (e *mountEntry) OwnerUID() int {
	for _, o := range strings.Split(e.SuperOpts, ",") {
		if v, ok := strings.CutPrefix(o, "user_id="); ok {
			if n, err := strconv.Atoi(v); err == nil {
				return n
			}
		}
	}
	return -1
}

// unescapeMount undoes the octal escapes (\040 for a space...) of
// /proc/self/mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// parseMountinfo reads the mountinfo format (proc(5)).
func parseMountinfo(r io.Reader) []mountEntry {
	var es []mountEntry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+2 >= len(f) {
			continue
		}
		e := mountEntry{Point: unescapeMount(f[4]), MountOpts: f[5], Type: f[sep+1], Source: unescapeMount(f[sep+2])}
		if sep+3 < len(f) {
			e.SuperOpts = f[sep+3]
		}
		es = append(es, e)
	}
	return es
}

// mountinfo returns this process's mounts.
func mountinfo() []mountEntry {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	return parseMountinfo(f)
}

// topMount returns the mount on top at dir (the last one mounted there),
// nil when dir is not a mount point.
func topMount(dir string) *mountEntry {
	var top *mountEntry
	es := mountinfo()
	for i := range es {
		if es[i].Point == dir {
			top = &es[i]
		}
	}
	return top
}

// nfsrdmaMounts returns every mount of type fuse.nfsrdma.
func nfsrdmaMounts() []mountEntry {
	var out []mountEntry
	for _, e := range mountinfo() {
		if e.Type == fsType {
			out = append(out, e)
		}
	}
	return out
}

// errHung is a mount whose file system does not answer a stat.
var errHung = errors.New("the mount does not answer")

// statMount asks the file system mounted at dir for its statfs, giving up
// after d (a mount whose server is alive but stuck would hang). Unlike a
// stat, which the kernel may answer from its attribute cache, a FUSE statfs
// always reaches the server: a mount whose server is gone answers ENOTCONN.
func statMount(dir string, d time.Duration) error {
	done := make(chan error, 1)
	go func() {
		var st syscall.Statfs_t
		done <- syscall.Statfs(dir, &st)
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		return errHung
	}
}

// isDead reports whether the FUSE mount at dir lost its server: the kernel
// answers ENOTCONN for it.
func isDead(dir string) bool {
	return errors.Is(statMount(dir, 2*time.Second), syscall.ENOTCONN)
}

// lazyUnmount detaches the mount at dir (umount2 MNT_DETACH; fusermount -u
// -z when not root): it goes from the tree at once, and from the kernel
// when its last user lets go.
func lazyUnmount(dir string) error {
	if os.Geteuid() == 0 {
		return syscall.Unmount(dir, syscall.MNT_DETACH)
	}
	fm, err := fusermountPath()
	if err != nil {
		return err
	}
	if out, err := runCommand(fm, "-u", "-z", dir); err != nil {
		return fmt.Errorf("%s -u -z: %v: %s", fm, err, strings.TrimSpace(out))
	}
	return nil
}

// ErrMountPointBusy is a mount point that holds a live mount that this
// command does not serve.
var ErrMountPointBusy = errors.New("already a mount point")

// clearMountPoint makes dir ready for a new mount: dead FUSE mounts there
// (their server was killed) are detached; a live nfsrdma mount, or a FUSE
// mount that does not answer, refuses the mount. Mounts are never stacked
// on a FUSE mount.
func clearMountPoint(dir string, logf func(msg string, args ...any)) error {
	for range 8 {
		top := topMount(dir)
		if top == nil || !strings.HasPrefix(top.Type, "fuse") {
			return nil
		}
		switch err := statMount(dir, 2*time.Second); {
		case errors.Is(err, syscall.ENOTCONN):
			logf("removing a dead mount (its server is gone)", "dir", dir, "type", top.Type, "source", top.Source)
			if err := lazyUnmount(dir); err != nil {
				return fmt.Errorf("%s holds a dead %s mount of %s that cannot be removed: %w", dir, top.Type, top.Source, err)
			}
			removeStaleSocket(dir)
		case errors.Is(err, errHung):
			return fmt.Errorf("%s: %w: %s of %s does not answer; unmount it first (nfsrdma-mount -u -l %s)", dir, ErrMountPointBusy, top.Type, top.Source, dir)
		default:
			return fmt.Errorf("%s: %w: %s of %s is mounted there; unmount it first", dir, ErrMountPointBusy, top.Type, top.Source)
		}
	}
	return fmt.Errorf("%s: dead mounts keep reappearing", dir)
}

// removeStaleSocket removes dir's control socket when no server answers it.
func removeStaleSocket(dir string) {
	for _, path := range socketCandidates(dir, -1) {
		if _, err := os.Stat(path); err != nil {
			continue
		}
		if c, err := dialControl(path); err == nil {
			c.Close()
			continue
		}
		os.Remove(path)
	}
}

// unmountDir unmounts dir: through its server when one answers (which
// waits for it to finish), else directly. A dead mount (its server killed)
// is detached; lazy detaches in any case, force aborts the FUSE connection
// (umount -f).
func unmountDir(dir string, lazy, force bool) error {
	c, err := canonicalDir(dir)
	if err != nil {
		return err
	}
	if !lazy && !force {
		reply, path, err := controlRequestOwned(c, "unmount", time.Minute)
		var nse *NoServerError
		switch {
		case errors.As(err, &nse):
			// Unmounted below.
		case err != nil:
			return err
		default:
			if msg, ok := strings.CutPrefix(strings.TrimSpace(reply), errPrefix); ok {
				return errors.New(msg)
			}
			// The server removes its socket last, once it has let go of
			// everything.
			for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
					return nil
				}
			}
			return fmt.Errorf("unmounted, but the server has not exited (socket %s remains)", path)
		}
	}
	return unmountDirect(c, lazy, force)
}

// unmountDirect unmounts c without its server's help.
func unmountDirect(c string, lazy, force bool) error {
	top := topMount(c)
	if top == nil {
		return fmt.Errorf("%s: %w", c, errNotMounted)
	}
	defer removeStaleSocket(c)
	if lazy || isDead(c) {
		return lazyUnmount(c)
	}
	if os.Geteuid() != 0 {
		fm, err := fusermountPath()
		if err != nil {
			return fmt.Errorf("no server answers, and %w", err)
		}
		if out, err := runCommand(fm, "-u", c); err != nil {
			return fmt.Errorf("%s -u: %v: %s", fm, err, strings.TrimSpace(out))
		}
		return nil
	}
	flags := 0
	if force {
		flags = syscall.MNT_FORCE
	}
	switch err := syscall.Unmount(c, flags); {
	case errors.Is(err, syscall.EINVAL):
		return fmt.Errorf("%s: %w", c, errNotMounted)
	case err != nil:
		return err
	}
	return nil
}

var errNotMounted = errors.New("not mounted")

// remount changes the VFS flags of a live mount (mount -o remount,...):
// ro/rw, nosuid, nodev, noexec and the atime flags: as mount(8) computed
// them (it passes them all to its helper), or the mount's current ones
// changed by the options given to nfsrdma-mount. The NFS options of a mount cannot change: as with
// the kernel client, those given are ignored. It needs root (fusermount
// cannot remount).
func remount(inv *invocation, _ *mountOptions) error {
	dir, err := canonicalDir(inv.dir)
	if err != nil {
		return err
	}
	top := topMount(dir)
	if top == nil || top.Type != fsType {
		return fmt.Errorf("remount %s: not an nfsrdma mount", dir)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("remount %s: only root can remount (fusermount cannot)", dir)
	}
	// mount(8) passes the flags it computed from the mount's current ones
	// and those given, in full; the options given to nfsrdma-mount change
	// the mount's current flags.
	var flags uintptr
	if !inv.helper {
		cur, _ := parseOptions(top.MountOpts, true)
		flags = cur.MountFlags
	}
	ro := strings.Contains(","+top.MountOpts+",", ",ro,")
	for _, o := range strings.Split(inv.opts, ",") {
		name, _, _ := strings.Cut(strings.TrimSpace(o), "=")
		if f, ok := vfsFlags[name]; ok {
			if f.set {
				flags |= f.bit
			} else {
				flags &^= f.bit
			}
		}
		switch name {
		case "user", "users":
			flags |= syscall.MS_NOEXEC | syscall.MS_NOSUID | syscall.MS_NODEV
		case "ro":
			ro = true
		case "rw":
			ro = false
		}
	}
	if !ro && strings.Contains(","+top.SuperOpts+",", ",ro,") {
		// The server was started ro: it refuses every change, whatever
		// the VFS allows.
		if reply, _, err := controlRequestOwned(dir, "stats-json", 5*time.Second); err == nil && strings.Contains(reply, `"ro"`) {
			return fmt.Errorf("remount %s rw: it was mounted ro and its server refuses writes; unmount and mount it rw", dir)
		}
	}
	if ro {
		flags |= syscall.MS_RDONLY
	}
	if err := syscall.Mount(top.Source, dir, top.Type, flags|syscall.MS_REMOUNT, ""); err != nil {
		return fmt.Errorf("remount %s: %w", dir, err)
	}
	return nil
}
