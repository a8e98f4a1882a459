package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// The FUSE floor: the matrix's third column. A go-fuse loopback of the
// export's own directory in the guest (no network, no NFS: each request is
// a system call on the server's tmpfs), mounted with the FUSE settings
// nfsrdma-mount uses, runs every workload beside the two clients. Its
// ratio against the kernel's NFS mount is the most any FUSE file system
// can reach on the bed for that work: what is left between it and
// nfsrdma-mount is ours to win; what is between it and 1.0 is the cost of
// going through FUSE at all (a request crosses to a user-space server and
// back, and the kernel's FUSE module asks for what the kernel's NFS client
// has in hand, such as a directory's attributes after each entry change).

// FloorFlag is the benchguest flag that serves the loopback: the program
// re-executes itself with it, so that the server runs in its own process
// as a mount helper does.
const FloorFlag = "-fuse-floor"

// floorTimeout is the loopback's entry, attribute and negative-entry
// timeout: nfsrdma-mount's acregmin (a file's attributes, trusted for 3 s
// by default), for all three (nfsrdma-mount keeps directories' longer).
const floorTimeout = 3 * time.Second

// ServeFloor mounts the loopback of src at mnt and serves it until it is
// unmounted or the process is signalled.
func ServeFloor(src, mnt string) error {
	root, err := fs.NewLoopbackRoot(src)
	if err != nil {
		return err
	}
	ln, ok := root.(*fs.LoopbackNode)
	if !ok {
		return fmt.Errorf("fuse floor: unexpected loopback root %T", root)
	}
	top := &floorNode{LoopbackNode: ln}
	ln.RootData.RootNode = top
	to := floorTimeout
	opts := &fs.Options{
		EntryTimeout: &to, AttrTimeout: &to, NegativeTimeout: &to,
		// As nfsrdma-mount's (fusefs.FS.FUSEOptions): the kernel checks
		// permissions, requests as large as 1 MiB READs and WRITEs,
		// asynchronous direct I/O, the same background limits.
		MountOptions: fuse.MountOptions{
			AllowOther: true, FsName: "fuse-floor:" + src, Name: "fusefloor",
			MaxWrite: 1 << 20, MaxReadAhead: 1 << 20,
			MaxBackground: 64, CongestionThreshold: 48,
			DisableXAttrs: true, DisableSplice: true,
			ExtraCapabilities: fuse.CAP_ASYNC_DIO,
			DirectMount:       true,
			Options:           []string{"default_permissions"},
		},
	}
	srv, err := fs.Mount(mnt, top, opts)
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		srv.Unmount()
	}()
	srv.Wait()
	return nil
}

// floorNode is the loopback's node: it opens the backing file without
// O_DIRECT (tmpfs refuses it, and knfsd reads and writes through the
// server's page cache too), so that direct I/O through the mount is
// direct at FUSE, as through the two clients, and costs the backing file
// system nothing.
type floorNode struct{ *fs.LoopbackNode }

var (
	_ fs.NodeWrapChilder = (*floorNode)(nil)
	_ fs.NodeOpener      = (*floorNode)(nil)
	_ fs.NodeCreater     = (*floorNode)(nil)
)

func (n *floorNode) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	if ln, ok := ops.(*fs.LoopbackNode); ok {
		return &floorNode{LoopbackNode: ln}
	}
	return ops
}

func (n *floorNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return n.LoopbackNode.Open(ctx, flags&^syscall.O_DIRECT)
}

func (n *floorNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return n.LoopbackNode.Create(ctx, name, flags&^syscall.O_DIRECT, mode, out)
}

// floorProc is a running loopback server.
type floorProc struct {
	cmd  *exec.Cmd
	done chan error
}

// startFloor starts this program as the loopback server of src at mnt and
// waits until the mount is there.
func startFloor(ctx context.Context, src, mnt string) (*floorProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return nil, err
	}
	var out strings.Builder
	cmd := exec.Command(self, FloorFlag, src, mnt)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("fuse floor: %w", err)
	}
	p := &floorProc{cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		if mounted(mnt) {
			return p, nil
		}
		select {
		case err := <-p.done:
			return nil, fmt.Errorf("fuse floor: the loopback server exited: %v: %s", err, strings.TrimSpace(out.String()))
		case <-deadline.C:
			p.stop()
			return nil, errors.New("fuse floor: the loopback did not mount within 30 s")
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop unmounts the loopback and waits for its server.
func (p *floorProc) stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// mounted reports whether a file system is mounted at dir.
func mounted(dir string) bool {
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[1] == dir {
			return true
		}
	}
	return false
}
