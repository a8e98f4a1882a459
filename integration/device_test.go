//go:build integration

package integration

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/verbs/ibv"
	"github.com/nfsrdma/nfsrdma/xprt"
)

// restoreRXE puts the bed's rxe0 back (on dummy0) and makes sure knfsd
// listens for RDMA, whatever state a device test left.
func restoreRXE(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/sys/class/infiniband/rxe0"); err != nil {
		if out, err := exec.Command("rdma", "link", "add", "rxe0", "type", "rxe", "netdev", "dummy0").CombinedOutput(); err != nil {
			t.Errorf("rdma link add rxe0: %v\n%s", err, out)
			return
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, _ := os.ReadFile("/sys/class/infiniband/rxe0/ports/1/state")
		if strings.Contains(string(st), "ACTIVE") {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("rxe0 port not active after re-adding it: %q", st)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	if pl, _ := os.ReadFile("/proc/fs/nfsd/portlist"); !strings.Contains(string(pl), "rdma 20049") {
		if err := os.WriteFile("/proc/fs/nfsd/portlist", []byte("rdma 20049\n"), 0); err != nil {
			t.Errorf("re-adding knfsd's RDMA listener: %v", err)
		}
	}
}

// deviceHolders logs who holds RDMA device files: every process's
// descriptors and mappings of /dev/infiniband and the verbs event files,
// this process's goroutines in the transport, and the kernel's last words.
func deviceHolders(t *testing.T) {
	t.Helper()
	var b strings.Builder
	b.WriteString(uverbsHolders())
	// The kernel's side: blocked tasks (sysrq w) and the stacks of the
	// delete and of knfsd's threads.
	os.WriteFile("/proc/sysrq-trigger", []byte("w"), 0)
	out, _ := exec.Command("sh", "-c", `dmesg | tail -120; rdma link show; ls /sys/class/infiniband /sys/class/infiniband_verbs
for p in /proc/[0-9]*; do c=$(cat $p/comm 2>/dev/null); case "$c" in rdma|nfsd*|kworker*|rxe*) s=$(cat $p/stack 2>/dev/null); case "$s" in *rdma*|*rxe*|*svc*|*ib_*) echo "$p ($c):"; echo "$s";; esac;; esac; done`).CombinedOutput()
	b.Write(out)
	t.Logf("device holders:\n%s", b.String())
}

// uverbsHolders lists the processes with an RDMA device file open or
// mapped, and this process's goroutines in xprt and verbs/ibv; it starts
// no command (see runBed).
func uverbsHolders() string {
	var b strings.Builder
	pids, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range pids {
		comm, _ := os.ReadFile(p + "/comm")
		fds, _ := filepath.Glob(p + "/fd/*")
		for _, fd := range fds {
			l, _ := os.Readlink(fd)
			if strings.Contains(l, "infiniband") || strings.Contains(l, "uverbs") {
				fmt.Fprintf(&b, "%s (%s) fd %s -> %s\n", p, strings.TrimSpace(string(comm)), filepath.Base(fd), l)
			}
		}
		if maps, err := os.ReadFile(p + "/maps"); err == nil {
			for _, line := range strings.Split(string(maps), "\n") {
				if strings.Contains(line, "infiniband") || strings.Contains(line, "uverbs") {
					fmt.Fprintf(&b, "%s (%s) map %s\n", p, strings.TrimSpace(string(comm)), line)
				}
			}
		}
	}
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "nfsrdma/xprt") || strings.Contains(g, "verbs/ibv") {
			b.WriteString(g + "\n\n")
		}
	}
	return b.String()
}

// TestXprtDeviceRemovalRXE: `rdma link delete rxe0` while a verified READ
// and WRITE stream runs over it, then `rdma link add`. The client handles
// RDMA CM DEVICE_REMOVAL by releasing everything of the device (the
// delete, which waits for every user of the device, returns), reconnects
// through the new rxe0 with the same buffer memory registered there, and
// the stream goes on: every byte written is on the server and every byte
// read is right.
func TestXprtDeviceRemovalRXE(t *testing.T) {
	t.Cleanup(func() { restoreRXE(t) })
	n := dialRDMA(t, xprt.Config{MaxReconnectDelay: 500 * time.Millisecond})
	ctx := ctxT(t, 4*time.Minute)
	src := serverFile(t, "devrm-src", 4<<20)
	lr, err := n.c.Lookup(ctx, n.root, "devrm-src")
	if err != nil {
		t.Fatal(err)
	}
	cr, err := n.c.Create(ctx, n.root, "devrm-dst", nfs3.CreateHow{Mode: nfs3.Unchecked})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(exportDir + "/devrm-dst") })
	dst := make([]byte, 4<<20)

	var stop atomic.Bool
	var reads, writes atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	const chunk = 256 << 10
	wg.Add(2)
	go func() { // READs, checked
		defer wg.Done()
		buf := make([]byte, chunk)
		for i := 0; !stop.Load(); i++ {
			off := (i % (len(src) / chunk)) * chunk
			rr, err := n.c.Read(ctx, lr.FH, uint64(off), buf)
			if err != nil {
				errc <- fmt.Errorf("READ at %d: %w", off, err)
				return
			}
			if rr.Count != chunk || !bytes.Equal(buf, src[off:off+chunk]) {
				errc <- fmt.Errorf("READ at %d: %d bytes, wrong data", off, rr.Count)
				return
			}
			reads.Add(1)
		}
	}()
	// Every WRITE's iteration and times, for the report of a mismatch.
	type writeRec struct {
		i          int
		start, end time.Time
	}
	var wlog []writeRec // the writer's own until wg.Wait
	base := time.Now()
	go func() { // WRITEs (FILE_SYNC), every chunk rewritten with new bytes
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			off := (i % (len(dst) / chunk)) * chunk
			p := dst[off : off+chunk]
			for j := range p {
				p[j] = byte(i + j*13)
			}
			st := time.Now()
			if _, err := n.c.Write(ctx, cr.FH, uint64(off), p, nfs3.FileSync); err != nil {
				errc <- fmt.Errorf("WRITE at %d: %w", off, err)
				return
			}
			wlog = append(wlog, writeRec{i, st, time.Now()})
			writes.Add(1)
		}
	}()
	waitCount := func(what string, c *atomic.Int64, more int64) {
		t.Helper()
		want := c.Load() + more
		deadline := time.Now().Add(90 * time.Second)
		for c.Load() < want {
			select {
			case err := <-errc:
				t.Fatal(err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s stalled at %d (want %d): %s", what, c.Load(), want, n.tr.Counters())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitCount("READs", &reads, 5)
	waitCount("WRITEs", &writes, 5)

	start := time.Now()
	done := startCmd("rdma", "link", "delete", "rxe0")
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("rdma link delete rxe0: %v\n%s", r.err, r.out)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("rdma link delete rxe0 still waits after 30 s: something holds the device (%s)", n.tr.Counters())
		deviceHolders(t)
		select {
		case <-done:
			t.Logf("the delete returned after %v", time.Since(start))
		case <-time.After(60 * time.Second):
			deviceHolders(t)
			t.FailNow()
		}
	}
	deleted := time.Since(start)
	if c := n.tr.Counters(); c.DeviceRemovals == 0 {
		t.Fatalf("no DEVICE_REMOVAL seen: %s", c)
	}
	time.Sleep(time.Second) // the device is absent for a while
	restoreRXE(t)
	readded := time.Now()
	waitCount("READs after the new device", &reads, 5)
	waitCount("WRITEs after the new device", &writes, 5)
	recovered := time.Since(readded)
	stop.Store(true)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	got, err := os.ReadFile(exportDir + "/devrm-dst")
	if err != nil {
		t.Fatal(err)
	}
	// The file is as long as the chunks written: all of dst once the
	// writer went round.
	extent := int(min(writes.Load(), int64(len(dst)/chunk))) * chunk
	if len(got) != extent {
		t.Fatalf("the file on the server has %d bytes, want %d (%d WRITEs of %d KiB)", len(got), extent, writes.Load(), chunk>>10)
	}
	dst = dst[:extent]
	if !bytes.Equal(got, dst) {
		t.Logf("device deleted at +%v, re-added at +%v; counters %s", start.Sub(base).Round(time.Millisecond), readded.Sub(base).Round(time.Millisecond), n.tr.Counters())
		for off := 0; off < len(dst); off += chunk {
			g, w := got[off:min(off+chunk, len(got))], dst[off:off+chunk]
			if bytes.Equal(g, w) {
				continue
			}
			first, diff := -1, 0
			for j := range w {
				if j >= len(g) || g[j] != w[j] {
					diff++
					if first < 0 {
						first = j
					}
				}
			}
			t.Logf("chunk at %d: %d bytes differ from byte %d; expected iteration %d (mod 256), the file has %s",
				off, diff, first, w[0], describeChunk(g))
			for _, r := range wlog {
				if (r.i%(len(dst)/chunk))*chunk == off {
					t.Logf("  WRITE iteration %d: +%v … +%v", r.i, r.start.Sub(base).Round(time.Millisecond), r.end.Sub(base).Round(time.Millisecond))
				}
			}
		}
		t.Fatal("the file on the server differs from what was written")
	}
	c := n.tr.Counters()
	if c.DeviceMoves != 1 || c.Reconnects == 0 {
		t.Fatalf("counters: %s", c)
	}
	t.Logf("device deleted in %v with the client connected; I/O going again %v after rxe0 came back; %d READs and %d WRITEs of %d KiB verified",
		deleted.Round(time.Millisecond), recovered.Round(time.Millisecond), reads.Load(), writes.Load(), chunk>>10)
	_ = context.Background
}

// TestDeviceRemovalWhileRedialing: a process whose connections are closed
// (no rdma_cm id left) but that keeps trying to connect to a server that
// refuses it, an id made and destroyed every 200 ms as a reconnecting
// client makes them, does not keep a removed device: `rdma link delete`
// returns. The binding watches the devices of a process without ids and
// lets a removed one go; a watch put off by every new id (it used to start
// its period again each time) never looked, and the delete waited for the
// process to exit.
func TestDeviceRemovalWhileRedialing(t *testing.T) {
	t.Cleanup(func() { restoreRXE(t) })
	n := dialRDMA(t, xprt.Config{})
	ctx := ctxT(t, 2*time.Minute)
	if _, err := n.c.Getattr(ctx, n.root); err != nil {
		t.Fatal(err)
	}
	n.c.Close() // no id left: librdmacm keeps its context of rxe0
	fab, err := ibv.Open()
	if err != nil {
		t.Fatal(err)
	}
	refused := netip.AddrPortFrom(nfsRDMA.Addr(), 1) // nobody listens there
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var attempts atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			dctx, cancel := context.WithTimeout(ctx, time.Second)
			tr, err := xprt.Dial(dctx, xprt.Config{Fabric: fab, Addr: refused})
			cancel()
			attempts.Add(1)
			if err == nil {
				tr.Close()
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(time.Second) // attempts going
	start := time.Now()
	select {
	case r := <-startCmd("rdma", "link", "delete", "rxe0"):
		if r.err != nil {
			t.Fatalf("rdma link delete rxe0 while the process redials: %v\n%s", r.err, r.out)
		}
	case <-time.After(30 * time.Second):
		deviceHolders(t)
		t.Fatalf("rdma link delete rxe0 still waits after 30 s while the process redials (%d attempts)", attempts.Load())
	}
	t.Logf("rdma link delete rxe0 returned in %v, %d connection attempts meanwhile", time.Since(start).Round(time.Millisecond), attempts.Load())
}

// cmdResult is what a command started by startCmd printed and returned.
type cmdResult struct {
	out []byte
	err error
}

// startCmd runs a command in the background; its result comes on the
// channel (buffered: a caller that stops waiting leaves nothing blocked).
func startCmd(name string, args ...string) <-chan cmdResult {
	c := make(chan cmdResult, 1)
	go func() {
		out, err := exec.Command(name, args...).CombinedOutput()
		c <- cmdResult{out, err}
	}()
	return c
}

// describeChunk says what a chunk of the device test's WRITE file holds:
// one iteration's pattern (byte(i + j*13)), zeros, or a mix, piece by
// piece.
func describeChunk(g []byte) string {
	var b strings.Builder
	for j := 0; j < len(g); {
		k := j
		switch {
		case g[j] == 0 && (j+1 >= len(g) || g[j+1] == 0):
			for k < len(g) && g[k] == 0 {
				k++
			}
			fmt.Fprintf(&b, "[%d,%d) zeros; ", j, k)
		default:
			it := g[j] - byte(j*13)
			for k < len(g) && g[k] == it+byte(k*13) {
				k++
			}
			if k == j {
				k++
			}
			fmt.Fprintf(&b, "[%d,%d) iteration %d; ", j, k, it)
		}
		j = k
		if b.Len() > 600 {
			b.WriteString("…")
			break
		}
	}
	return b.String()
}
