//go:build integration

package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma/integration/faults"
	"github.com/nfsrdma/nfsrdma/xprt"
)

// Faults under the FUSE mount: the connection broken from inside the mount
// server (its test-only fault hook), the RDMA device removed and added
// again, and a file replaced on the server while the mount holds it open,
// side by side with the kernel's own NFS/RDMA client.

// faultInjectEnv enables nfsrdma-mount's test-only fault hook: its fabric
// goes through verbs/faulty and "nfsrdma-mount fault ACTION DIR" reaches it.
const faultInjectEnv = "NFSRDMA_FAULT_INJECT"

// mountReaddirplus lists a directory of n entries through the mount (each
// listing is a FUSE opendir, READDIRPLUS at the server) and checks every
// name is there. Before each listing the directory's times are set to the
// server's clock through the mount (a SETATTR, which a retransmission
// repeats harmlessly; the directory must be writable by the caller): the
// kernel's copy of the listing is dropped with the old modification
// time, so the listings reach the server.
func mountReaddirplus(dir string, n int) *workload {
	return &workload{name: "mount directory listing (READDIRPLUS)",
		step: func(ctx context.Context, w *workload) error {
			if err := unix.UtimesNanoAt(unix.AT_FDCWD, dir, nil, 0); err != nil {
				return fmt.Errorf("touching the directory: %w", err)
			}
			ents, err := os.ReadDir(dir)
			if err != nil {
				return err
			}
			seen := map[string]bool{}
			size := 0
			for _, e := range ents {
				seen[e.Name()] = true
				size += len(e.Name())
			}
			for i := range n {
				if name := fmt.Sprintf("e-%04d", i); !seen[name] {
					return fmt.Errorf("listing: %s missing from %d entries", name, len(ents))
				}
			}
			w.p.Done(size)
			return nil
		}}
}

// mountFault asks the mount server of dir, started with the fault hook,
// to inject action. The command goes through the bed's runner: started
// from this process, whose workloads hold files on the mount, its exec
// would flush them to a mount whose connection is being broken.
func mountFault(t *testing.T, bin, dir, action string) error {
	if err := runBed(2*time.Minute, bin, "fault", action, dir); err != nil {
		return err
	}
	t.Logf("nfsrdma-mount fault %s %s: done", action, dir)
	return nil
}

func (s rdmaStats) sum(f func(c *xprt.Counters) uint64) uint64 {
	var n uint64
	for _, tr := range s.Transports {
		if tr.RDMA != nil {
			n += f(tr.RDMA)
		}
	}
	return n
}

// TestFaultsMountConnectionLost is fault 2 from inside the client under
// the FUSE mount: the mount server, started with NFSRDMA_FAULT_INJECT=1,
// moves its connection's QP to the error state, or fails the next post of
// a SEND, each while one workload alone runs through a hard mount — a
// WRITE stream (write, fsync, close), a READ stream, directory listings
// (READDIRPLUS). The application sees no error, every byte written is on
// the server and every byte read is right, the mount reconnected, and its
// fds are back to where they were.
func TestFaultsMountConnectionLost(t *testing.T) {
	bin := mountBinary(t)
	sub := "faults-mount-connlost"
	sdir := exportSubdir(t, sub)
	readFiles := serverFiles(t, sdir, "r", 3, 2<<20)
	serverDirEntries(t, filepath.Join(sdir, "dir"), 300)
	if err := os.Chmod(filepath.Join(sdir, "dir"), 0o777); err != nil { // see mountReaddirplus
		t.Fatal(err)
	}
	t.Setenv(faultInjectEnv, "1")
	mnt := mountNFSRDMA(t, bin)
	mdir := filepath.Join(mnt, sub)
	mk := []func() *workload{
		func() *workload { return mountWriteStream(mdir, sdir, fmt.Sprintf("mw%d", time.Now().UnixNano())) },
		func() *workload { return mountReadStream(mdir, readFiles) },
		func() *workload { return mountReaddirplus(filepath.Join(mdir, "dir"), 300) },
	}
	injections := []struct {
		fault, action string
		check         func(before, after rdmaStats) error
	}{
		{"QP moved to the error state (mount server)", "break-qps", func(b, a rdmaStats) error {
			if a.reconnects() == b.reconnects() {
				return errors.New("no reconnect")
			}
			return nil
		}},
		{"ibv_post_send fails (mount server)", "fail-send", func(b, a rdmaStats) error {
			pf := func(c *xprt.Counters) uint64 { return c.PostFailures }
			if a.sum(pf) == b.sum(pf) || a.reconnects() == b.reconnects() {
				return fmt.Errorf("post failures %d→%d, reconnects %d→%d", b.sum(pf), a.sum(pf), b.reconnects(), a.reconnects())
			}
			return nil
		}},
	}
	watch := mountWatch(t, bin, mnt)
	for _, inj := range injections {
		for _, m := range mk {
			before, err := mountCounters(bin, mnt)
			if err != nil {
				t.Fatal(err)
			}
			faultCase{
				fault:     inj.fault,
				workloads: []*workload{m()},
				inject:    func(context.Context) error { return mountFault(t, bin, mnt, inj.action) },
				watch:     []*watched{watch},
				after:     200 * time.Millisecond,
			}.run(t)
			after, err := mountCounters(bin, mnt)
			if err != nil {
				t.Fatal(err)
			}
			if err := inj.check(before, after); err != nil {
				t.Errorf("%s: %v", inj.fault, err)
			}
		}
	}
	s, err := mountCounters(bin, mnt)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.sum(func(c *xprt.Counters) uint64 { return c.RefusedTransitions }); n != 0 {
		t.Errorf("the mount's transport refused %d call-state transitions", n)
	}
}

// deleteRXE runs `rdma link delete rxe0`, which returns once every user
// of the device let go of it, through the bed's runner (the mount this
// process holds files on waits for the device to come back); after 90 s
// it reports the command's kernel stack and the kernel's log.
func deleteRXE(t *testing.T) error {
	start := time.Now()
	if err := runBed(90*time.Second, "rdma", "link", "delete", "rxe0"); err != nil {
		return fmt.Errorf("%w\nholders of the device:\n%s", err, uverbsHolders())
	}
	t.Logf("rdma link delete rxe0 returned in %v", time.Since(start).Round(time.Millisecond))
	return nil
}

// within2m runs f and reports a call still running after two minutes with
// every blocked task's kernel stack (sysrq w) and the kernel's log.
func within2m(what string, f func()) error {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
		return nil
	case <-time.After(2 * time.Minute):
	}
	return fmt.Errorf("%s: still running after 2 minutes; dmesg:\n%s", what, blockedTasksLog())
}

// rxeNetdev returns the network device rxe0 runs on (`rdma link show`).
func rxeNetdev(t *testing.T) string {
	t.Helper()
	out := run(t, "rdma", "link", "show", "rxe0/1")
	f := strings.Fields(out)
	for i := range f[:max(len(f)-1, 0)] {
		if f[i] == "netdev" {
			return f[i+1]
		}
	}
	t.Fatalf("rdma link show rxe0/1: no netdev in %q", out)
	return ""
}

// TestFaultsMountDeviceRemoval is fault 3 under the FUSE mount: `rdma link
// delete rxe0` and `rdma link add rxe0 type rxe netdev NETDEV` (the one it
// was on) while a
// WRITE stream (write, fsync, close) and a READ stream run through a hard
// mount. The delete returns (the mount server lets go of the device), the
// mount moves to the new device, the I/O goes on without an error, and
// every byte is verified.
func TestFaultsMountDeviceRemoval(t *testing.T) {
	bin := mountBinary(t)
	sub := "faults-mount-devrm"
	sdir := exportSubdir(t, sub)
	readFiles := serverFiles(t, sdir, "r", 3, 2<<20)
	mnt := mountNFSRDMA(t, bin)
	// Before the mount's cleanup (cleanups run last registered first):
	// the device is back before the unmount.
	t.Cleanup(func() {
		if err := within2m("restoring rxe0 at the end", func() { restoreRXE(t) }); err != nil {
			t.Error(err)
		}
	})
	mdir := filepath.Join(mnt, sub)
	netdev := rxeNetdev(t)
	before, err := mountCounters(bin, mnt)
	if err != nil {
		t.Fatal(err)
	}
	faultCase{
		fault: "rxe0 deleted and added again (rdma link)",
		workloads: []*workload{
			mountWriteStream(mdir, sdir, "mw"),
			mountReadStream(mdir, readFiles),
		},
		inject: func(context.Context) error {
			if err := deleteRXE(t); err != nil {
				return err
			}
			time.Sleep(time.Second) // the device is absent for a while
			// On the same netdev, through the bed's runner; a hung add
			// is reported with its kernel stack (shell's watchdog).
			if err := shell("rdma", "link", "add", "rxe0", "type", "rxe", "netdev", netdev); err != nil {
				return err
			}
			// Waits for the port, puts knfsd's listener back.
			return within2m("restoring rxe0 and knfsd's RDMA listener", func() { restoreRXE(t) })
		},
		watch: []*watched{mountWatch(t, bin, mnt)},
		after: time.Second,
	}.run(t)
	after, err := mountCounters(bin, mnt)
	if err != nil {
		t.Fatal(err)
	}
	rm := func(c *xprt.Counters) uint64 { return c.DeviceRemovals }
	mv := func(c *xprt.Counters) uint64 { return c.DeviceMoves }
	t.Logf("mount: device removals %d→%d, device moves %d→%d, reconnects %d→%d",
		before.sum(rm), after.sum(rm), before.sum(mv), after.sum(mv), before.reconnects(), after.reconnects())
	if after.sum(rm) == before.sum(rm) || after.sum(mv) == before.sum(mv) || after.reconnects() == before.reconnects() {
		t.Errorf("the mount did not handle the removal: device removals %d→%d, device moves %d→%d, reconnects %d→%d",
			before.sum(rm), after.sum(rm), before.sum(mv), after.sum(mv), before.reconnects(), after.reconnects())
	}
}

// mountKernelOpts mounts the export with the kernel's NFS/RDMA client with
// extra options, a superblock of its own (nosharecache).
func mountKernelOpts(t *testing.T, extra string) string {
	t.Helper()
	dir := t.TempDir()
	opts := "vers=3,proto=rdma,port=20049,nosharecache"
	if extra != "" {
		opts += "," + extra
	}
	run(t, "mount", "-t", "nfs", "-o", opts, exportSpec, dir)
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	return dir
}

// far reports whether two times to ESTALE differ by more than the slack
// of polling both clients every 200 ms on the emulated bed.
func far(a, b time.Duration) bool { return a-b > 1500*time.Millisecond || b-a > 1500*time.Millisecond }

// staleOutcome is what one client's open descriptor of a file replaced on
// the server gave.
type staleOutcome struct {
	statStale, readStale time.Duration // when fstat, read first gave ESTALE (0: never)
	other                error         // any other error, or wrong bytes
	newByPath            error         // reading the path afterwards: nil when the new file
	ops                  int
}

func (o staleOutcome) String() string {
	d := func(x time.Duration) string {
		if x == 0 {
			return "never"
		}
		return x.Round(10 * time.Millisecond).String()
	}
	s := fmt.Sprintf("fstat ESTALE after %s, read ESTALE after %s", d(o.statStale), d(o.readStale))
	if o.other != nil {
		s += fmt.Sprintf(", other: %v", o.other)
	}
	if o.newByPath == nil {
		s += "; the path reads the new file"
	} else {
		s += fmt.Sprintf("; the path: %v", o.newByPath)
	}
	return s
}

// watchStale polls an open descriptor of the old file every 200 ms for up
// to limit from start: fstat, and a read of it all with its cached pages
// dropped first. It returns when both gave ESTALE.
func watchStale(f *os.File, old []byte, start time.Time, limit time.Duration) staleOutcome {
	var o staleOutcome
	buf := make([]byte, len(old))
	for time.Since(start) < limit && (o.statStale == 0 || o.readStale == 0) {
		o.ops++
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); errors.Is(err, syscall.ESTALE) {
			if o.statStale == 0 {
				o.statStale = time.Since(start)
			}
		} else if err != nil && o.other == nil {
			o.other = fmt.Errorf("fstat: %w", err)
		}
		unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		k, err := f.ReadAt(buf, 0)
		switch {
		case errors.Is(err, syscall.ESTALE):
			if o.readStale == 0 {
				o.readStale = time.Since(start)
			}
		case err != nil && err != io.EOF:
			if o.other == nil {
				o.other = fmt.Errorf("read: %w", err)
			}
		case !bytes.Equal(buf[:k], old) && o.other == nil:
			o.other = fmt.Errorf("read %d bytes that are not the old file's", k)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return o
}

// TestFaultsStaleHandleMount is fault 5's ESTALE through the mounts: a
// file replaced on the server (removed and created again under its name)
// while an nfsrdma mount and the kernel's own NFS/RDMA mount each hold it
// open, with the attribute cache off (actimeo=0) and with nfs(5)'s
// defaults. The kernel client is the reference: once the attributes time
// out (at once with actimeo=0), or at the first stat after a READ (which
// makes the cached atime stale), fstat and read of the old descriptor give
// ESTALE (its revalidating GETATTR gets NFS3ERR_STALE once knfsd let go of
// the removed inode), and the path reaches the new file. The nfsrdma mount
// must do the same, at about the same time.
func TestFaultsStaleHandleMount(t *testing.T) {
	bin := mountBinary(t)
	const fault = "file replaced on the server (ESTALE)"
	for _, tc := range []struct{ label, opts string }{
		{"actimeo=0", "actimeo=0"},
		{"default attribute cache", ""},
	} {
		t.Run(strings.ReplaceAll(tc.label, " ", "_"), func(t *testing.T) {
			name := fmt.Sprintf("faults-stale-mount-%d", time.Now().UnixNano())
			path := filepath.Join(exportDir, name)
			t.Cleanup(func() { os.Remove(path) })
			oldData, newData := randBytes(64<<10), randBytes(48<<10)
			if err := os.WriteFile(path, oldData, 0o644); err != nil {
				t.Fatal(err)
			}
			var ours string
			if tc.opts == "" {
				ours = mountNFSRDMA(t, bin)
			} else {
				ours = mountNFSRDMA(t, bin, tc.opts)
			}
			kern := mountKernelOpts(t, tc.opts)
			clients := []struct{ label, dir string }{{"kernel NFS/RDMA mount", kern}, {"nfsrdma mount", ours}}
			files := make([]*os.File, len(clients))
			for i, c := range clients {
				f, err := os.Open(filepath.Join(c.dir, name))
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				if got, err := io.ReadAll(f); err != nil || !bytes.Equal(got, oldData) {
					t.Fatalf("%s: reading the file: %d bytes, %v", c.label, len(got), err)
				}
				files[i] = f
			}
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, newData, 0o644); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			// Both descriptors watched at once, under the same conditions
			// at the server (knfsd lets go of the removed inode once).
			limit := 20 * time.Second
			if tc.opts == "" {
				limit = 75 * time.Second // up to acregmax (60 s)
			}
			outcomes := make([]staleOutcome, len(clients))
			var wg sync.WaitGroup
			for i := range clients {
				wg.Go(func() { outcomes[i] = watchStale(files[i], oldData, start, limit) })
			}
			wg.Wait()
			for i, c := range clients {
				got, err := os.ReadFile(filepath.Join(c.dir, name))
				if err == nil && !bytes.Equal(got, newData) {
					err = fmt.Errorf("%d bytes that are not the new file's", len(got))
				}
				outcomes[i].newByPath = err
				outcomes[i].ops++
				t.Logf("%s, %s: %s", c.label, tc.label, outcomes[i])
			}
			for i, c := range clients {
				o := outcomes[i]
				row := faults.Row{Fault: fault, Ops: int64(o.ops), Recovery: o.statStale,
					Workload: fmt.Sprintf("%s, %s: old fd: %s (time: to fstat's ESTALE)", c.label, tc.label, o)}
				if o.newByPath == nil {
					row.Bytes = int64(len(newData))
				}
				ok := o.statStale > 0 && o.readStale > 0 && o.other == nil && o.newByPath == nil
				if ok {
					row.Expected = 2
				} else {
					row.Unexpected = 1
					row.Errors = "want ESTALE from fstat and read of the old fd, the new file by the path"
					t.Errorf("%s, %s: %s; want fstat and read of the old descriptor to give ESTALE and the path the new file", c.label, tc.label, o)
				}
				if k := outcomes[0]; i > 0 && ok && (far(o.statStale, k.statStale) || far(o.readStale, k.readStale)) {
					// The kernel client is the reference: ESTALE as soon as
					// it gives it (within the polling's and the bed's
					// slack), not later and not sooner.
					ok = false
					row.Unexpected = 1
					row.Errors = "ESTALE not when the kernel client gives it"
					t.Errorf("%s, %s: %s; the kernel client: %s", c.label, tc.label, o, k)
				}
				row.Pass = ok
				addRow(t, row)
			}
		})
	}
}
