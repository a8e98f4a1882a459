// Package fusefstest serves NFSv3 exports in-process for the FUSE tests:
// the repository's go-nfs fixture (nfs3/gonfstest) over one of these
// file systems.
//   - Mem: gonfstest.MemFS, in memory. It has no inodes (go-nfs makes the
//     fileid a hash of the path) and no hard links (LINK copies).
//   - Disk: gonfstest.DiskFS over a temporary directory of the host, which
//     brings real inode numbers, link counts, ownership, times and special
//     files.
//   - DiskSquashed: Disk as a server that squashes root serves it: every
//     object made through the server is owned by AnonUID and AnonGID
//     (while Server.SquashRoot has not turned it off).
//
// go-nfs's own limits are listed in gonfstest's documentation.
package fusefstest

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-git/go-billy/v5"

	"github.com/nfsrdma/nfsrdma/nfs3/gonfstest"
)

// Backends.
const (
	Mem          = "memfs"
	Disk         = "disk"
	DiskSquashed = "disk-squashed"
)

var quietOnce sync.Once

// Server is an in-process NFSv3 server (go-nfs; MOUNT and NFS on one TCP
// port of 127.0.0.1).
type Server struct {
	Host string
	Port int
	FS   billy.Filesystem // what it serves
	Dir  string           // the Disk backend's directory

	squash *atomic.Bool // DiskSquashed: root's squashing (SquashRoot)
}

// Start serves an empty file system of the given backend until the test
// ends.
func Start(t testing.TB, backend string) *Server {
	t.Helper()
	quietOnce.Do(gonfstest.Quiet) // the server's own logging is noise here
	srv := &Server{}
	switch backend {
	case Mem:
		srv.FS = gonfstest.NewMemFS()
	case Disk:
		srv.Dir = t.TempDir()
		srv.FS = gonfstest.NewDiskFS(srv.Dir)
	case DiskSquashed:
		srv.Dir = t.TempDir()
		srv.squash = new(atomic.Bool)
		srv.squash.Store(true)
		srv.FS = squashedDisk{gonfstest.NewDiskFS(srv.Dir), srv.squash}
	default:
		t.Fatalf("unknown backend %q", backend)
	}
	s := gonfstest.StartFS(t, srv.FS)
	srv.Host, srv.Port = s.Host, s.Port
	return srv
}
