package fusefstest

import (
	"os"
	"sync/atomic"

	"github.com/go-git/go-billy/v5"

	"github.com/nfsrdma/nfsrdma/nfs3/gonfstest"
)

// AnonUID and AnonGID own what the DiskSquashed backend makes: the
// anonymous identity a squashing server maps root to (exports(5) anonuid
// and anongid).
const AnonUID, AnonGID = 65534, 65534

// squashedDisk is gonfstest.DiskFS whose every new object is given to
// AnonUID and AnonGID once made, while squash is on, as a server squashing
// root owns root's creations. (go-nfs takes no account of the caller's
// credential: on Disk every object it makes is the server process's,
// root's in these tests.)
type squashedDisk struct {
	*gonfstest.DiskFS
	squash *atomic.Bool
}

// SquashRoot turns the squashing of root by a DiskSquashed server on or off
// (as exportfs -o root_squash or no_root_squash would): the objects made
// through it from now on are owned by AnonUID and AnonGID, or by the
// server's own user. It panics for the other backends.
func (s *Server) SquashRoot(on bool) {
	if s.squash == nil {
		panic("fusefstest: SquashRoot on a server that is not DiskSquashed")
	}
	s.squash.Store(on)
}

// give gives name to the anonymous identity, if made just now (existed
// false) and made at all (err nil), while squash is on.
func (d squashedDisk) give(name string, existed bool, err error) error {
	if err != nil || existed || !d.squash.Load() {
		return err
	}
	return d.DiskFS.Lchown(name, AnonUID, AnonGID)
}

func (d squashedDisk) exists(name string) bool {
	_, err := d.DiskFS.Lstat(name)
	return err == nil
}

func (d squashedDisk) Create(name string) (billy.File, error) {
	existed := d.exists(name)
	f, err := d.DiskFS.Create(name)
	if err := d.give(name, existed, err); err != nil {
		if f != nil {
			f.Close()
		}
		return nil, err
	}
	return f, nil
}

func (d squashedDisk) OpenFile(name string, flag int, perm os.FileMode) (billy.File, error) {
	existed := flag&os.O_CREATE == 0 || d.exists(name)
	f, err := d.DiskFS.OpenFile(name, flag, perm)
	if err := d.give(name, existed, err); err != nil {
		if f != nil {
			f.Close()
		}
		return nil, err
	}
	return f, nil
}

func (d squashedDisk) MkdirAll(name string, perm os.FileMode) error {
	existed := d.exists(name)
	return d.give(name, existed, d.DiskFS.MkdirAll(name, perm))
}

func (d squashedDisk) Symlink(target, link string) error {
	return d.give(link, false, d.DiskFS.Symlink(target, link))
}

func (d squashedDisk) Mknod(name string, mode, major, minor uint32) error {
	return d.give(name, false, d.DiskFS.Mknod(name, mode, major, minor))
}

func (d squashedDisk) Mkfifo(name string, mode uint32) error {
	return d.give(name, false, d.DiskFS.Mkfifo(name, mode))
}

func (d squashedDisk) Socket(name string) error {
	return d.give(name, false, d.DiskFS.Socket(name))
}
