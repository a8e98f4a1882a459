//go:build integration

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/posixtest"
)

// posixSkips lists the go-fuse posixtest cases that cannot pass on an
// nfsrdma-mount mount of knfsd's export, with the reason. What the host's
// run (fusefs/posix_test.go) skips because go-nfs cannot do it — LINK,
// fileids that survive a rename, objects rather than paths behind handles —
// knfsd does, so those cases run here. Cases not listed run and must pass.
var posixSkips = map[string]string{
	"Fallocate":           "NFSv3 has no ALLOCATE: fallocate is EOPNOTSUPP",
	"FallocateKeepSize":   "NFSv3 has no ALLOCATE: fallocate is EOPNOTSUPP",
	"XAttr":               "NFSv3 has no extended attributes",
	"XAttrLarge":          "NFSv3 has no extended attributes",
	"Tmpfile":             "NFSv3 has no O_TMPFILE: an unnamed file cannot exist on the server",
	"FcntlFlockLocksFile": "the case expects a process's second POSIX lock on the file to conflict with its first; POSIX locks of one process never conflict (the kernel's NFS mount grants it too)",
	// An open racing with renames over its name on the same mount: the
	// kernel resolves the name to an inode from its dentry cache and the
	// open's GETATTR (close-to-open) or permission check reaches the
	// server after a rename has removed that object, so open(2) fails with
	// ESTALE even after the VFS's one retry (the name is replaced again
	// meanwhile). The kernel's NFS client revalidates the name with a
	// LOOKUP at every open and silly-renames a rename target whose dentry
	// is in use; a FUSE server sees neither the open's path walk nor the
	// dentry references.
	"OpenSymlinkRace": "an open racing with renames over its name gets ESTALE: FUSE opens the inode the dentry cache gave, which a rename on the server has removed (see posixSkips)",
}

// TestPosix runs go-fuse's POSIX conformance suite (posixtest.All) on one
// nfsrdma-mount mount of the export over RDMA, each case in a fresh
// directory of its own. NFSRDMA_POSIX=Name runs only the cases whose name
// contains Name; NFSRDMA_POSIX_NOSKIP=1 runs the skipped ones too.
func TestPosix(t *testing.T) {
	bin := mountBinary(t)
	runPosix(t, mountNFSRDMA(t, bin), exportDir)
}

// runPosix runs posixtest.All as TestPosix says, each case in a directory
// of its own under a new one in mount dir, whose export's directory on the
// server is export (the cases' leftovers are removed there).
func runPosix(t *testing.T, dir, export string) {
	names := make([]string, 0, len(posixtest.All))
	for name := range posixtest.All {
		names = append(names, name)
	}
	slices.Sort(names)
	only := os.Getenv("NFSRDMA_POSIX")
	base := fmt.Sprintf("posix-%d", os.Getpid())
	if err := os.Mkdir(filepath.Join(dir, base), 0o755); err != nil {
		t.Fatal(err)
	}
	// The server's side of the tree, removed whatever the cases left open.
	defer os.RemoveAll(filepath.Join(export, base))
	for _, name := range names {
		if only != "" && !strings.Contains(name, only) {
			continue
		}
		t.Run(name, func(t *testing.T) {
			if why, ok := posixSkips[name]; ok && os.Getenv("NFSRDMA_POSIX_NOSKIP") == "" {
				t.Skip(why)
			}
			sub := filepath.Join(dir, base, name)
			if err := os.Mkdir(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			defer watchMount(t, dir, 3*time.Minute)()
			posixtest.All[name](t, sub)
		})
	}
}
