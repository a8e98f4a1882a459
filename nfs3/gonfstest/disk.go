package gonfstest

import (
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/osfs"
	"golang.org/x/sys/unix"
)

// DiskFS is go-billy's osfs over a directory of the host, with what go-nfs
// needs of it done on the real files: ownership, times, MKNOD, mkfifo,
// sockets and hard links. It brings what MemFS lacks: real inode numbers,
// link counts, owners, times and special files.
type DiskFS struct {
	billy.Filesystem
	dir string
}

// NewDiskFS serves the directory dir.
func NewDiskFS(dir string) *DiskFS {
	return &DiskFS{Filesystem: osfs.New(dir, osfs.WithBoundOS()), dir: dir}
}

// Dir returns the directory served.
func (d *DiskFS) Dir() string { return d.dir }

func (d *DiskFS) real(name string) string { return filepath.Join(d.dir, filepath.Clean("/"+name)) }

func (d *DiskFS) Chmod(name string, mode os.FileMode) error { return os.Chmod(d.real(name), mode) }

func (d *DiskFS) Lchown(name string, uid, gid int) error { return os.Lchown(d.real(name), uid, gid) }
func (d *DiskFS) Chown(name string, uid, gid int) error  { return os.Chown(d.real(name), uid, gid) }

func (d *DiskFS) Chtimes(name string, atime, mtime time.Time) error {
	ts := []unix.Timespec{unix.NsecToTimespec(atime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	return unix.UtimesNanoAt(unix.AT_FDCWD, d.real(name), ts, unix.AT_SYMLINK_NOFOLLOW)
}

// Mknod makes a block device: go-nfs v0.0.4 calls it only for NF3BLK, with
// the permission bits alone.
func (d *DiskFS) Mknod(name string, mode, major, minor uint32) error {
	if mode&syscall.S_IFMT == 0 {
		mode |= syscall.S_IFBLK
	}
	return unix.Mknod(d.real(name), mode, int(unix.Mkdev(major, minor)))
}

// Remove, Rename, Lstat and Readlink work on the names themselves: osfs's
// bound mode resolves symbolic links in them, which fails for a dangling
// link. (And rename(2), not os.Rename, which refuses to replace an empty
// directory.)
func (d *DiskFS) Remove(name string) error { return os.Remove(d.real(name)) }

func (d *DiskFS) Rename(from, to string) error { return unix.Rename(d.real(from), d.real(to)) }

func (d *DiskFS) Lstat(name string) (os.FileInfo, error) { return os.Lstat(d.real(name)) }

func (d *DiskFS) Readlink(name string) (string, error) { return os.Readlink(d.real(name)) }

func (d *DiskFS) Mkfifo(name string, mode uint32) error { return unix.Mkfifo(d.real(name), mode) }

func (d *DiskFS) Socket(name string) error {
	return unix.Mknod(d.real(name), syscall.S_IFSOCK|0o600, 0)
}

func (d *DiskFS) Link(target, link string) error { return os.Link(d.real(target), d.real(link)) }
