package testbed

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Image is a built guest: kernel, tiny initramfs and root image.
type Image struct {
	Dir     string
	Key     string
	Kernel  string // vmlinuz path
	Initrd  string // tiny initramfs path
	Root    string // ext4 root image path
	KVer    string
	BuiltAt time.Time
}

type manifest struct {
	Key     string           `json:"key"`
	KVer    string           `json:"kernel_version"`
	BuiltAt time.Time        `json:"built_at"`
	Files   map[string]int64 `json:"files"`
}

var imageFiles = []string{"vmlinuz", "initrd.cpio", "root.img"}

// CacheDir is where built images live: $XDG_CACHE_HOME/nfsrdma or
// ~/.cache/nfsrdma, overridable with NFSRDMA_CACHE.
func CacheDir() (string, error) {
	if d := os.Getenv("NFSRDMA_CACHE"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("testbed: no cache directory (%v): set NFSRDMA_CACHE", err)
	}
	return filepath.Join(d, "nfsrdma"), nil
}

// Cached returns the cached image for the current recipe, or an error
// saying why it cannot be used.
func Cached(cache string) (*Image, error) {
	key := Key()
	dir := filepath.Join(cache, "guest-"+key)
	data, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return nil, fmt.Errorf("no guest image built for recipe %s in %s", key, cache)
	}
	var m manifest
	if err := json.Unmarshal(data, &m); err != nil || m.Key != key {
		return nil, fmt.Errorf("the cached guest image in %s is corrupt (bad manifest)", dir)
	}
	for _, f := range imageFiles {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil || fi.Size() != m.Files[f] {
			return nil, fmt.Errorf("the cached guest image in %s is corrupt (%s missing or changed size)", dir, f)
		}
	}
	return &Image{Dir: dir, Key: key, Kernel: filepath.Join(dir, "vmlinuz"), Initrd: filepath.Join(dir, "initrd.cpio"),
		Root: filepath.Join(dir, "root.img"), KVer: m.KVer, BuiltAt: m.BuiltAt}, nil
}

// Build returns the cached guest image or builds it. Progress goes to log.
func Build(ctx context.Context, log io.Writer) (*Image, error) {
	cache, err := CacheDir()
	if err != nil {
		return nil, err
	}
	if img, err := Cached(cache); err == nil {
		fmt.Fprintf(log, "[testbed] guest image %s is cached in %s (built %s)\n", img.Key, img.Dir, img.BuiltAt.Format(time.RFC3339))
		return img, nil
	} else if strings.Contains(err.Error(), "corrupt") {
		fmt.Fprintf(log, "[testbed] %v: rebuilding it\n", err)
	}
	if !isRoot() {
		return nil, ErrNotRoot
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, fmt.Errorf("testbed: cannot create the cache directory: %w", err)
	}
	unlock, err := lockDir(cache)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// Another build may have finished while we waited for the lock.
	if img, err := Cached(cache); err == nil {
		return img, nil
	}
	b := &builder{cache: cache, key: Key(), p: NewProgress(log, 8)}
	b.final = filepath.Join(cache, "guest-"+b.key)
	b.work = b.final + ".build"
	b.root = filepath.Join(b.work, "root")
	b.out = filepath.Join(b.work, "out")
	fmt.Fprintf(log, "[testbed] building guest image %s in %s (about 3–5 minutes)\n", b.key, cache)
	img, err := b.run(ctx)
	if cerr := unmountAll(b.work); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	if err := removeTree(b.work); err != nil {
		fmt.Fprintf(log, "[testbed] warning: %v\n", err)
	}
	b.pruneOld()
	return img, nil
}

type builder struct {
	cache, key, final, work, root, out string
	kver                               string
	p                                  *Progress
}

func (b *builder) run(ctx context.Context) (*Image, error) {
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"host packages", func(ctx context.Context) error { return EnsureHostPackages(ctx, b.p.w) }},
		{"prepare", b.prepare},
		{"debootstrap " + Suite, b.debootstrap},
		{"install guest packages", b.installGuest},
		{"configure guest", b.configure},
		{"tiny initramfs", b.initramfs},
		{"root image (mkfs.ext4)", b.mkfs},
		{"finish", b.finish},
	}
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := b.p.Step(s.name, func() error { return s.fn(ctx) }); err != nil {
			return nil, err
		}
	}
	return Cached(b.cache)
}

func (b *builder) prepare(ctx context.Context) error {
	if err := removeTree(b.work); err != nil {
		return err
	}
	if err := os.RemoveAll(b.final); err != nil {
		return err
	}
	if err := os.MkdirAll(b.out, 0o755); err != nil {
		return err
	}
	return checkFreeSpace(b.work, 4<<30)
}

func (b *builder) debootstrap(ctx context.Context) error {
	c := b.p.Counter("packages", regexp.MustCompile(`^I: (Retrieving|Extracting|Unpacking|Configuring) `), nil)
	cmd := exec.CommandContext(ctx, "debootstrap", "--variant=minbase", Suite, b.root, Mirror)
	cmd.Stdout, cmd.Stderr = c, c
	err := cmd.Run()
	last := c.Close()
	if err != nil {
		return fmt.Errorf("testbed: debootstrap %s from %s failed: %v\n%s\n(check that the Debian mirror is reachable)", Suite, Mirror, err, tail(last, 15))
	}
	return nil
}

// chroot runs a command in the guest root with proc, sys and dev bound.
func (b *builder) chroot(ctx context.Context, out io.Writer, args ...string) error {
	for _, d := range []string{"proc", "sys", "dev"} {
		mp := filepath.Join(b.root, d)
		if len(mountsUnder(mp)) > 0 {
			continue
		}
		if err := syscall.Mount("/"+d, mp, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return fmt.Errorf("testbed: bind-mount /%s into the guest root: %w", d, err)
		}
		// Keep the host's sub-mounts from being unmounted through the bind.
		syscall.Mount("", mp, "", syscall.MS_SLAVE|syscall.MS_REC, "")
	}
	cmd := exec.CommandContext(ctx, "chroot", append([]string{b.root}, args...)...)
	// INITRD=No: the kernel postinst skips the Debian initramfs; the bed
	// boots with its own tiny one.
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive", "LANG=C", "HOME=/root", "INITRD=No"}
	cmd.Stdout, cmd.Stderr = out, out
	return cmd.Run()
}

func (b *builder) installGuest(ctx context.Context) error {
	// Nothing installed in the chroot may start a daemon on the host.
	policy := filepath.Join(b.root, "usr/sbin/policy-rc.d")
	if err := os.WriteFile(policy, []byte("#!/bin/sh\nexit 101\n"), 0o755); err != nil {
		return err
	}
	c := b.p.Counter("steps (download, set up)", regexp.MustCompile(`^(Get:\d+|Setting up) `), nil)
	err := b.chroot(ctx, c, append([]string{"apt-get", "install", "-y", "-q", "--no-install-recommends"}, GuestPackages...)...)
	last := c.Close()
	if err != nil {
		return fmt.Errorf("testbed: installing the guest packages failed: %v\n%s", err, tail(last, 20))
	}
	var out bytes.Buffer
	if err := b.chroot(ctx, &out, "apt-get", "clean"); err != nil {
		return fmt.Errorf("testbed: apt-get clean in the guest: %v\n%s", err, out.String())
	}
	return os.Remove(policy)
}

func (b *builder) configure(ctx context.Context) error {
	files := []struct {
		path string
		data string
		mode os.FileMode
	}{
		{"sbin/testbed-init", guestInit, 0o755},
		{"usr/local/sbin/testbed-nfsd-restart", nfsdRestart, 0o755},
		{"etc/exports", exportsLine, 0o644},
		{"etc/hostname", "testbed\n", 0o644},
		{"etc/fstab", "# the test bed mounts everything from /sbin/testbed-init\n", 0o644},
	}
	for _, f := range files {
		p := filepath.Join(b.root, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(f.data), f.mode); err != nil {
			return err
		}
	}
	mods, err := os.ReadDir(filepath.Join(b.root, "lib/modules"))
	if err != nil || len(mods) != 1 {
		return fmt.Errorf("testbed: expected exactly one kernel in the guest's /lib/modules (%v)", err)
	}
	b.kver = mods[0].Name()
	for _, g := range []string{"boot/initrd.img*", "var/lib/apt/lists/*_Packages", "usr/share/doc/*", "usr/share/man/*"} {
		ms, _ := filepath.Glob(filepath.Join(b.root, g))
		for _, m := range ms {
			os.RemoveAll(m)
		}
	}
	return copyFile(filepath.Join(b.root, "boot", "vmlinuz-"+b.kver), filepath.Join(b.out, "vmlinuz"))
}

func (b *builder) initramfs(ctx context.Context) error {
	var deps bytes.Buffer
	args := append([]string{"modprobe", "-S", b.kver, "--show-depends", "-a"}, initrdModules...)
	if err := b.chroot(ctx, &deps, args...); err != nil {
		return fmt.Errorf("testbed: resolving initramfs modules: %v\n%s", err, deps.String())
	}
	dir := filepath.Join(b.work, "initramfs")
	if err := os.MkdirAll(filepath.Join(dir, "modules"), 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		return err
	}
	seen := map[string]bool{}
	var list []string
	sc := bufio.NewScanner(&deps)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "insmod" {
			continue
		}
		name := filepath.Base(f[1])
		if seen[name] {
			continue
		}
		seen[name] = true
		if err := copyFile(filepath.Join(b.root, f[1]), filepath.Join(dir, "modules", name)); err != nil {
			return err
		}
		list = append(list, name)
	}
	if len(list) == 0 {
		return fmt.Errorf("testbed: modprobe listed no modules for %v:\n%s", initrdModules, deps.String())
	}
	if err := os.WriteFile(filepath.Join(dir, "modules.list"), []byte(strings.Join(list, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "init"), []byte(initramfsInit), 0o755); err != nil {
		return err
	}
	busybox := "/bin/busybox"
	if err := copyFile(busybox, filepath.Join(dir, "bin", "busybox")); err != nil {
		return fmt.Errorf("testbed: the host's static busybox (package busybox-static): %w", err)
	}
	os.Chmod(filepath.Join(dir, "bin", "busybox"), 0o755)
	out, err := os.Create(filepath.Join(b.out, "initrd.cpio"))
	if err != nil {
		return err
	}
	defer out.Close()
	var names []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && p != dir {
			rel, _ := filepath.Rel(dir, p)
			names = append(names, rel)
		}
		return nil
	})
	sort.Strings(names)
	var errb bytes.Buffer
	cmd := exec.CommandContext(ctx, "cpio", "-o", "-H", "newc", "--quiet")
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(strings.Join(names, "\n") + "\n")
	cmd.Stdout, cmd.Stderr = out, &errb
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("testbed: cpio: %v: %s", err, errb.String())
	}
	return out.Close()
}

func (b *builder) mkfs(ctx context.Context) error {
	if err := unmountAll(b.root); err != nil {
		return err
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-L", "testbed", "-d", b.root, filepath.Join(b.out, "root.img"), ImageSize)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("testbed: mkfs.ext4: %v\n%s", err, out.String())
	}
	return nil
}

func (b *builder) finish(ctx context.Context) error {
	m := manifest{Key: b.key, KVer: b.kver, BuiltAt: time.Now().UTC(), Files: map[string]int64{}}
	for _, f := range imageFiles {
		fi, err := os.Stat(filepath.Join(b.out, f))
		if err != nil {
			return err
		}
		m.Files[f] = fi.Size()
	}
	data, _ := json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(filepath.Join(b.out, "manifest.json"), data, 0o644); err != nil {
		return err
	}
	return os.Rename(b.out, b.final)
}

// pruneOld removes images of other recipes.
func (b *builder) pruneOld() {
	ms, _ := filepath.Glob(filepath.Join(b.cache, "guest-*"))
	for _, m := range ms {
		if m != b.final {
			removeTree(m)
		}
	}
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// lockDir takes an exclusive flock on dir/.lock.
func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, errors.New("testbed: cannot lock the cache directory: " + err.Error())
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}
