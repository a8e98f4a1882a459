package bench

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nfsrdma/nfsrdma/nfs3"
)

// The library matrix's two sides. Each workload is written once, against
// libFS, and runs on both: the library (an nfs3.Target from nfsrdma.Mount,
// used through its path API and Files as a Go program would) and os calls
// on the kernel's NFSv3/RDMA mount. Names are slash-separated and relative
// to the export's root on both.

// libFS is what a library-matrix workload does to files.
type libFS interface {
	// OpenFile opens name with os.OpenFile's flags. oDirect among them
	// asks the kernel's side to bypass its page cache (the library has
	// none, and ignores it).
	OpenFile(ctx context.Context, name string, flag int, perm fs.FileMode) (libFile, error)
	Mkdir(ctx context.Context, name string, perm fs.FileMode) error
	// Remove removes a file; RmDir an empty directory.
	Remove(ctx context.Context, name string) error
	RmDir(ctx context.Context, name string) error
	// ReadDir lists a directory; each entry's Info has its attributes.
	ReadDir(ctx context.Context, name string) ([]fs.DirEntry, error)
	ReadFile(ctx context.Context, name string) ([]byte, error)
	// WriteFile creates or truncates name and writes data, as
	// os.WriteFile does.
	WriteFile(ctx context.Context, name string, data []byte, perm fs.FileMode) error
}

// libFile is an open file of a libFS: both *os.File and *nfs3.File are one.
type libFile interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
}

// osFS is os calls on a mount point: the kernel's side.
type osFS struct{ root string }

func (o osFS) path(name string) string { return filepath.Join(o.root, filepath.FromSlash(name)) }

func (o osFS) OpenFile(_ context.Context, name string, flag int, perm fs.FileMode) (libFile, error) {
	return os.OpenFile(o.path(name), flag, perm)
}
func (o osFS) Mkdir(_ context.Context, name string, perm fs.FileMode) error {
	return os.Mkdir(o.path(name), perm)
}
func (o osFS) Remove(_ context.Context, name string) error { return os.Remove(o.path(name)) }
func (o osFS) RmDir(_ context.Context, name string) error  { return os.Remove(o.path(name)) }
func (o osFS) ReadDir(_ context.Context, name string) ([]fs.DirEntry, error) {
	return os.ReadDir(o.path(name))
}
func (o osFS) ReadFile(_ context.Context, name string) ([]byte, error) {
	return os.ReadFile(o.path(name))
}
func (o osFS) WriteFile(_ context.Context, name string, data []byte, perm fs.FileMode) error {
	return os.WriteFile(o.path(name), data, perm)
}

// targetFS is the library's side: a Target's path API and Files.
type targetFS struct{ t *nfs3.Target }

func (l targetFS) OpenFile(ctx context.Context, name string, flag int, perm fs.FileMode) (libFile, error) {
	return l.t.OpenFileContext(ctx, path.Clean(name), flag&^oDirect, perm)
}
func (l targetFS) Mkdir(ctx context.Context, name string, perm fs.FileMode) error {
	_, err := l.t.Mkdir(ctx, name, perm)
	return err
}
func (l targetFS) Remove(ctx context.Context, name string) error { return l.t.Remove(ctx, name) }
func (l targetFS) RmDir(ctx context.Context, name string) error  { return l.t.RmDir(ctx, name) }
func (l targetFS) ReadDir(ctx context.Context, name string) ([]fs.DirEntry, error) {
	return l.t.ReadDirContext(ctx, name)
}
func (l targetFS) ReadFile(ctx context.Context, name string) ([]byte, error) {
	return l.t.ReadFileContext(ctx, name)
}

// WriteFile is Target.WriteFile, the library's os.WriteFile.
func (l targetFS) WriteFile(ctx context.Context, name string, data []byte, perm fs.FileMode) error {
	return l.t.WriteFile(ctx, name, data, perm)
}

// nfsdProcs are the NFSv3 procedures in the order of the "proc3" line of
// /proc/net/rpc/nfsd (RFC 1813's procedure numbers).
var nfsdProcs = []string{"NULL", "GETATTR", "SETATTR", "LOOKUP", "ACCESS", "READLINK", "READ", "WRITE", "CREATE",
	"MKDIR", "SYMLINK", "MKNOD", "REMOVE", "RMDIR", "RENAME", "LINK", "READDIR", "READDIRPLUS", "FSSTAT", "FSINFO",
	"PATHCONF", "COMMIT"}

// ParseNFSDProc3 returns the NFSv3 calls knfsd has answered, by procedure,
// from the text of /proc/net/rpc/nfsd ("proc3 22 n0 n1 ..."). The server
// counts every client alike, so the difference over one client's run, with
// no other client busy, is that client's RPCs.
func ParseNFSDProc3(text string) (RPCCounts, error) {
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "proc3" {
			continue
		}
		n, err := strconv.Atoi(f[1])
		if err != nil || n != len(f)-2 {
			return nil, fmt.Errorf("bench: malformed nfsd proc3 line %q", line)
		}
		c := RPCCounts{}
		for i, s := range f[2:] {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("bench: malformed nfsd proc3 line %q", line)
			}
			if i < len(nfsdProcs) && v > 0 {
				c[nfsdProcs[i]] = OpCount{Calls: v}
			}
		}
		return c, nil
	}
	return nil, fmt.Errorf("bench: no proc3 line in the nfsd counters")
}

// nfsdCounts reads knfsd's NFSv3 counters.
func nfsdCounts() (RPCCounts, error) {
	b, err := os.ReadFile("/proc/net/rpc/nfsd")
	if err != nil {
		return nil, err
	}
	return ParseNFSDProc3(string(b))
}
