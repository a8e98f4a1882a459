//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma/integration/faults"
	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/faulty"
	"github.com/nfsrdma/nfsrdma/verbs/ibv"
	"github.com/nfsrdma/nfsrdma/xprt"
)

// The fault suite (TestFaults*): faults injected while workloads run
// through the library (nfs3 on xprt, over a verbs/faulty decorator of the
// real fabric) and through the FUSE mount, every byte the workloads wrote
// checked on the server's side (the export's tmpfs) and every byte they
// read compared with what the server holds. Each fault × workload gives a
// row of the results table (faultTable), written after every row to
// $NFSRDMA_FAULTS_OUT (default _build/faults.md under the working
// directory: the host's repository, /share, in the guest).

var faultTable = faults.NewTable("Faults on the test bed: nfsrdma against knfsd over Soft-RoCE", faultsOut())

func faultsOut() string {
	if p := os.Getenv("NFSRDMA_FAULTS_OUT"); p != "" {
		return p
	}
	return filepath.Join("_build", "faults.md")
}

var tableNote sync.Once

func addRow(t *testing.T, r faults.Row) {
	t.Helper()
	tableNote.Do(func() {
		var u unix.Utsname
		unix.Uname(&u)
		faultTable.Note("run of %s UTC, guest kernel %s, soak length %v; recovery is from the fault's injection to the first operation of the workload completed after the fault was over; bytes verified are those written and checked on the server by SHA-256 plus those read and compared",
			time.Now().UTC().Format("2006-01-02 15:04"), unix.ByteSliceToString(u.Release[:]), soakLength(t))
	})
	t.Logf("row: %+v", r)
	if err := faultTable.Add(r); err != nil {
		t.Errorf("results table: %v", err)
	}
}

// shell runs a command of the bed (rpc.nfsd and the like) through the
// bed's command runner (runner_test.go: a command started from this
// process could deadlock with the fault it injects) and returns its error
// with its output. A command still running after two minutes is reported
// with its kernel stack (knfsd's start and stop happen in the writes
// rpc.nfsd makes) and killed.
func shell(name string, args ...string) error {
	return runBed(2*time.Minute, name, args...)
}

// stopNFSD stops knfsd: every connection drops and nothing listens on
// 20049 until startNFSD.
func stopNFSD() error { return shell("rpc.nfsd", "0") }

// startNFSD starts knfsd as the bed does, with its rdma listener.
func startNFSD() error {
	if err := shell("rpc.nfsd", "--no-udp", "8"); err != nil {
		return err
	}
	if b, _ := os.ReadFile("/proc/fs/nfsd/portlist"); !strings.Contains(string(b), "rdma 20049") {
		return os.WriteFile("/proc/fs/nfsd/portlist", []byte("rdma 20049\n"), 0)
	}
	return nil
}

// restartKnfsd is fault 1 (testbed-nfsd-restart: the write verifier
// changes and every connection drops).
func restartKnfsd(context.Context) error { return shell("testbed-nfsd-restart") }

// faultClient is an NFSv3 client over xprt over a faulty decorator of the
// real fabric.
type faultClient struct {
	base *ibv.Fabric
	fab  *faulty.Fabric
	tr   *xprt.Transport
	c    *nfs3.Client
	root nfs3.FileHandle
	logs *logRecorder
}

func dialFaulty(t *testing.T, export string, retry sunrpc.RetryPolicy) *faultClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, err := nfs3.DialMount(ctx, serverAddr.String(), 0, authSys(t, 0), nil)
	if err != nil {
		t.Fatalf("MOUNT over TCP: %v", err)
	}
	mr, err := m.Mnt(ctx, export)
	m.Close()
	if err != nil {
		t.Fatalf("MNT %s: %v", export, err)
	}
	base, err := ibv.Open()
	if err != nil {
		t.Fatal(err)
	}
	fc := &faultClient{base: base, fab: faulty.New(base), root: mr.FH, logs: &logRecorder{}}
	// A short reconnect backoff: the bed's knfsd restarts in seconds.
	fc.tr, err = xprt.Dial(ctx, xprt.Config{Fabric: fc.fab, Addr: nfsRDMA, MaxReconnectDelay: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	fc.c, err = nfs3.NewClient(fc.tr, &nfs3.ClientOptions{Cred: authSys(t, 0), Retry: retry, Logger: slog.New(fc.logs)})
	if err != nil {
		fc.tr.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		t.Logf("xprt counters: %s", fc.tr.Counters())
		fc.c.Close()
		if live := base.Live(); !live.Zero() {
			t.Errorf("verbs resources left after Close: %+v", live)
		}
	})
	return fc
}

// snapshot counts the client's resources. The registrations the
// transport made ahead and holds for later calls (a stock, not a leak)
// are left out of the MRs; the stock's own lifecycle is tested in frwr and
// xprt.
func (fc *faultClient) snapshot() faults.Snapshot {
	s := faults.Take(fc.base)
	s.Verbs.MRs -= int(fc.tr.Counters().RegisteredAhead)
	return s
}

// lookup returns the handle of a path below the root.
func (fc *faultClient) lookup(ctx context.Context, path string) (nfs3.FileHandle, error) {
	fh := fc.root
	for _, name := range strings.Split(path, "/") {
		lr, err := fc.c.Lookup(ctx, fh, name)
		if err != nil {
			return nil, fmt.Errorf("LOOKUP %s: %w", name, err)
		}
		fh = lr.FH
	}
	return fh, nil
}

// A workload is one kind of verified I/O, run as a loop of steps.
type workload struct {
	name   string
	step   func(ctx context.Context, w *workload) error // one operation; calls p.Done on success
	p      faults.Progress
	ledger *faults.Ledger // what it wrote (nil: it only reads)
	root   string         // the server directory the ledger's names are under
	// expect says which errors the fault makes expected (nil: none).
	expect func(error) bool
	// pause after an error before the next step.
	pause time.Duration

	mu  sync.Mutex
	seq int // the workload's own counter (file names)
}

func (w *workload) next() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seq++
	return w.seq
}

// runner runs workloads until stopped; a step in progress finishes.
type runner struct {
	stopped atomic.Bool
	wg      sync.WaitGroup
}

func startWorkloads(ws ...*workload) *runner {
	r := &runner{}
	for _, w := range ws {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for !r.stopped.Load() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				err := w.step(ctx, w)
				cancel()
				if err != nil {
					if w.expect != nil && w.expect(err) {
						w.p.Expected()
					} else {
						w.p.Fail(err)
					}
					time.Sleep(max(w.pause, 100*time.Millisecond))
				}
			}
		}()
	}
	return r
}

func (r *runner) stop() {
	r.stopped.Store(true)
	r.wg.Wait()
}

// verified returns the bytes the workload verified: those it compared
// while reading plus its ledger checked against the server.
func (w *workload) verified(t *testing.T) (int64, error) {
	n := w.p.Bytes()
	if w.ledger == nil {
		return n, nil
	}
	files, b, err := w.ledger.Verify(w.root)
	t.Logf("%s: %d files, %d bytes verified on the server", w.name, files, b)
	return n + b, err
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// Library workloads. Their files live in one server directory, sub
// (relative to the export), whose handle is dir.

// libWriteStream writes files of 8 MiB with WriteAt, 1 MiB at a time
// (UNSTABLE WRITEs carried in Read chunks, then a COMMIT).
func libWriteStream(fc *faultClient, dir nfs3.FileHandle, serverDir, prefix string) *workload {
	var fh nfs3.FileHandle
	var name string
	var data []byte
	return &workload{name: "library WRITE stream (Read chunks)", ledger: &faults.Ledger{}, root: serverDir,
		step: func(ctx context.Context, w *workload) error {
			if fh == nil || len(data) >= 8<<20 {
				name = fmt.Sprintf("%s-%d", prefix, w.next())
				cr, err := fc.c.Create(ctx, dir, name, nfs3.CreateHow{Mode: nfs3.Unchecked})
				if err != nil {
					return fmt.Errorf("CREATE %s: %w", name, err)
				}
				if fh = cr.FH; fh == nil {
					lr, err := fc.c.Lookup(ctx, dir, name)
					if err != nil {
						return err
					}
					fh = lr.FH
				}
				data = nil
			}
			chunk := randBytes(1 << 20)
			if n, err := fc.c.WriteAt(ctx, fh, chunk, int64(len(data))); err != nil {
				fh = nil // the file's tail is unknown: start a new one
				w.ledger.Forget(name)
				return fmt.Errorf("WriteAt %s: %d, %w", name, n, err)
			}
			data = append(data, chunk...)
			w.ledger.Record(name, data)
			w.p.Done(0)
			return nil
		}}
}

// serverFiles writes n files of size bytes of random data into a server
// directory and returns their contents by name.
func serverFiles(t *testing.T, dir, prefix string, n, size int) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		data := randBytes(size)
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o666); err != nil {
			t.Fatal(err)
		}
		files[name] = data
	}
	return files
}

func pick(files map[string][]byte) (string, []byte) {
	i := mrand.IntN(len(files))
	for name, data := range files {
		if i == 0 {
			return name, data
		}
		i--
	}
	panic("empty")
}

// libReadStream reads 1 MiB pieces of server files with ReadAt (READs
// whose data comes back in Write chunks) and compares them.
func libReadStream(fc *faultClient, dir nfs3.FileHandle, files map[string][]byte) *workload {
	fhs := map[string]nfs3.FileHandle{}
	return &workload{name: "library READ stream (Write chunks)",
		step: func(ctx context.Context, w *workload) error {
			name, data := pick(files)
			fh := fhs[name]
			if fh == nil {
				lr, err := fc.c.Lookup(ctx, dir, name)
				if err != nil {
					return err
				}
				fh, fhs[name] = lr.FH, lr.FH
			}
			off := mrand.IntN(len(data)/(1<<20)) << 20
			buf := make([]byte, 1<<20)
			n, err := fc.c.ReadAt(ctx, fh, buf, int64(off))
			if err != nil {
				return fmt.Errorf("ReadAt %s@%d: %d, %w", name, off, n, err)
			}
			if i := faults.Compare(buf[:n], data[off:off+len(buf)]); i >= 0 {
				return fmt.Errorf("ReadAt %s@%d: wrong data from byte %d", name, off, i)
			}
			w.p.Done(n)
			return nil
		}}
}

// libCreateLoop creates small files (CREATE, then a FILE_SYNC WRITE of 1
// to 16 KiB).
func libCreateLoop(fc *faultClient, dir nfs3.FileHandle, serverDir, prefix string) *workload {
	return &workload{name: "library small-file create loop", ledger: &faults.Ledger{}, root: serverDir,
		step: func(ctx context.Context, w *workload) error {
			name := fmt.Sprintf("%s-%d", prefix, w.next())
			cr, err := fc.c.Create(ctx, dir, name, nfs3.CreateHow{Mode: nfs3.Unchecked})
			if err != nil {
				return fmt.Errorf("CREATE %s: %w", name, err)
			}
			fh := cr.FH
			if fh == nil {
				lr, err := fc.c.Lookup(ctx, dir, name)
				if err != nil {
					return err
				}
				fh = lr.FH
			}
			data := randBytes(1024 + mrand.IntN(15<<10))
			if _, err := fc.c.Write(ctx, fh, 0, data, nfs3.FileSync); err != nil {
				return fmt.Errorf("WRITE %s: %w", name, err)
			}
			w.ledger.Record(name, data)
			w.p.Done(0)
			return nil
		}}
}

// serverDirEntries makes a server directory of n empty files.
func serverDirEntries(t *testing.T, dir string, n int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("e-%04d", i)), nil, 0o666); err != nil {
			t.Fatal(err)
		}
	}
}

// libReaddirplus lists a directory of n entries with READDIRPLUS (its
// replies come back in Reply chunks) and checks every name is there.
func libReaddirplus(fc *faultClient, dir nfs3.FileHandle, n int) *workload {
	return &workload{name: "library READDIRPLUS (Reply chunks)",
		step: func(ctx context.Context, w *workload) error {
			ents, err := fc.c.ReadDirPlusAll(ctx, dir)
			if err != nil {
				return fmt.Errorf("READDIRPLUS: %w", err)
			}
			seen := map[string]bool{}
			size := 0
			for _, e := range ents {
				seen[e.Name] = true
				size += len(e.Name)
			}
			for i := range n {
				if name := fmt.Sprintf("e-%04d", i); !seen[name] {
					return fmt.Errorf("READDIRPLUS: %s missing from %d entries", name, len(ents))
				}
			}
			w.p.Done(size)
			return nil
		}}
}

// Mount workloads: files under mdir, the mount's view of the server
// directory serverDir.

// mountWriteStream writes files of 4 MiB through the mount, 256 KiB a
// write, then fsync and close.
func mountWriteStream(mdir, serverDir, prefix string) *workload {
	return &workload{name: "mount WRITE stream (write, fsync, close)", ledger: &faults.Ledger{}, root: serverDir,
		step: func(ctx context.Context, w *workload) error {
			name := fmt.Sprintf("%s-%d", prefix, w.next())
			f, err := os.Create(filepath.Join(mdir, name))
			if err != nil {
				return err
			}
			data := randBytes(4 << 20)
			for off := 0; off < len(data); off += 256 << 10 {
				if _, err := f.Write(data[off : off+256<<10]); err != nil {
					f.Close()
					return err
				}
			}
			if err := f.Sync(); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			w.ledger.Record(name, data)
			w.p.Done(0)
			return nil
		}}
}

// mountReadStream reads whole server files through the mount, their
// cached pages dropped first so that the reads reach the server.
func mountReadStream(mdir string, files map[string][]byte) *workload {
	return &workload{name: "mount READ stream",
		step: func(ctx context.Context, w *workload) error {
			name, data := pick(files)
			f, err := os.Open(filepath.Join(mdir, name))
			if err != nil {
				return err
			}
			defer f.Close()
			unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
			got, err := io.ReadAll(f)
			if err != nil {
				return fmt.Errorf("read %s: %d, %w", name, len(got), err)
			}
			if i := faults.Compare(got, data); i >= 0 {
				return fmt.Errorf("read %s: wrong data from byte %d of %d", name, i, len(got))
			}
			w.p.Done(len(got))
			return nil
		}}
}

// mountCreateLoop creates small files through the mount (open, write,
// close).
func mountCreateLoop(mdir, serverDir, prefix string) *workload {
	return &workload{name: "mount small-file create loop", ledger: &faults.Ledger{}, root: serverDir,
		step: func(ctx context.Context, w *workload) error {
			name := fmt.Sprintf("%s-%d", prefix, w.next())
			data := randBytes(1024 + mrand.IntN(15<<10))
			if err := os.WriteFile(filepath.Join(mdir, name), data, 0o644); err != nil {
				return err
			}
			w.ledger.Record(name, data)
			w.p.Done(0)
			return nil
		}}
}

// rdmaStats is the part of a mount's "stats -json" the fault tests read.
type rdmaStats struct {
	PID        int `json:"pid"`
	Transports []struct {
		RDMA *xprt.Counters `json:"rdma"`
	} `json:"transports"`
}

func mountCounters(bin, dir string) (rdmaStats, error) {
	out, err := exec.Command(bin, "stats", "-json", dir).CombinedOutput()
	if err != nil {
		return rdmaStats{}, fmt.Errorf("stats -json %s: %v: %s", dir, err, out)
	}
	var s rdmaStats
	if err := json.Unmarshal(out, &s); err != nil {
		return s, fmt.Errorf("stats -json: %v", err)
	}
	return s, nil
}

func (s rdmaStats) reconnects() uint64 {
	var n uint64
	for _, tr := range s.Transports {
		if tr.RDMA != nil {
			n += tr.RDMA.Reconnects
		}
	}
	return n
}

// A client whose resources a fault case checks: its snapshot before the
// fault is compared with one after, once the workloads stopped.
type watched struct {
	label string
	take  func() faults.Snapshot
	// strict: the threads of another process must be back too (they
	// need not: the Go runtime keeps threads it made).
	strict bool
	base   faults.Snapshot
}

// faultCase runs workloads, injects one fault once every workload made
// progress, waits for each to complete an operation after the fault,
// stops them, verifies their data and resources and adds a row each.
type faultCase struct {
	fault     string
	workloads []*workload
	inject    func(ctx context.Context) error
	watch     []*watched
	warmOps   int64         // operations each workload completes before the fault (default 2)
	after     time.Duration // how long the workloads go on after they all recovered
}

func (fc faultCase) run(t *testing.T) {
	t.Helper()
	for _, w := range fc.watch {
		w.base = w.take()
	}
	if fc.warmOps == 0 {
		fc.warmOps = 2
	}
	r := startWorkloads(fc.workloads...)
	stopped := false
	defer func() {
		if !stopped {
			r.stop()
		}
	}()
	for _, w := range fc.workloads {
		if _, ok := w.p.WaitOps(fc.warmOps, 2*time.Minute); !ok {
			t.Fatalf("%s: no progress before the fault (%d ops; errors: %s)", w.name, w.p.Ops(), w.p.Errors())
		}
	}
	t0 := time.Now()
	if err := fc.inject(context.Background()); err != nil {
		t.Fatalf("injecting %s: %v", fc.fault, err)
	}
	t1 := time.Now()
	t.Logf("%s: injected in %v", fc.fault, t1.Sub(t0).Round(time.Millisecond))
	recovery := map[*workload]time.Duration{}
	for _, w := range fc.workloads {
		at, ok := w.p.WaitAfter(t1, 3*time.Minute)
		if !ok {
			t.Errorf("%s: no operation completed within 3 minutes after %s (errors: %s)", w.name, fc.fault, w.p.Errors())
			continue
		}
		recovery[w] = at.Sub(t0)
	}
	time.Sleep(fc.after)
	r.stop()
	stopped = true
	deltas := map[*watched]string{}
	for _, wt := range fc.watch {
		base := wt.base
		take := wt.take
		if !wt.strict {
			take = func() faults.Snapshot { s := wt.take(); s.Threads = base.Threads; return s }
		}
		now := faults.Settle(base, 15*time.Second, take)
		deltas[wt] = wt.base.Delta(wt.take())
		if now != base {
			t.Errorf("%s: resources not back to baseline after %s: %s", wt.label, fc.fault, base.Delta(now))
		}
	}
	for i, w := range fc.workloads {
		n, err := w.verified(t)
		pass := err == nil && w.p.Unexpected() == 0 && recovery[w] > 0
		if err != nil {
			t.Errorf("%s: data lost or corrupted after %s: %v", w.name, fc.fault, err)
		}
		if w.p.Unexpected() > 0 {
			t.Errorf("%s: errors under %s: %s", w.name, fc.fault, w.p.Errors())
		}
		var res []string
		for _, wt := range fc.watch {
			if len(fc.watch) == 1 || strings.HasPrefix(w.name, wt.label) {
				res = append(res, wt.label+": "+deltas[wt])
			}
		}
		_ = i
		addRow(t, faults.Row{Fault: fc.fault, Workload: w.name, Ops: w.p.Ops(), Bytes: n,
			Expected: w.p.ExpectedErrs(), Unexpected: w.p.Unexpected(), Errors: w.p.Errors(),
			Recovery: recovery[w], Resources: strings.Join(res, "; "), Pass: pass})
	}
}

// mountWatch watches the mount server's fds and threads.
func mountWatch(t *testing.T, bin, dir string) *watched {
	t.Helper()
	s, err := mountCounters(bin, dir)
	if err != nil {
		t.Fatal(err)
	}
	return &watched{label: "mount", take: func() faults.Snapshot { return faults.TakeProcess(s.PID) }}
}

// TestFaultsKnfsdRestart is fault 1 (and fault 2 from outside the client:
// knfsd drops every connection when it stops): knfsd restarted while
// WRITE, READ, small-file and READDIRPLUS workloads run through the library
// and through a hard FUSE mount. Nobody sees an error; every byte written
// is on the server (UNSTABLE data is sent again when the verifier
// changes); the clients reconnected; resources are back to baseline.
func TestFaultsKnfsdRestart(t *testing.T) {
	bin := mountBinary(t)
	sub := "faults-restart"
	sdir := exportSubdir(t, sub)
	readFiles := serverFiles(t, sdir, "r", 3, 4<<20)
	mreadFiles := serverFiles(t, sdir, "mr", 4, 2<<20)
	serverDirEntries(t, filepath.Join(sdir, "dir"), 300)
	fc := dialFaulty(t, exportDir, sunrpc.RetryPolicy{})
	ctx := ctxT(t, time.Minute)
	dir, err := fc.lookup(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	ddir, err := fc.lookup(ctx, sub+"/dir")
	if err != nil {
		t.Fatal(err)
	}
	mnt := mountNFSRDMA(t, bin)
	mdir := filepath.Join(mnt, sub)
	before := fc.tr.Counters()
	mbefore, err := mountCounters(bin, mnt)
	if err != nil {
		t.Fatal(err)
	}
	faultCase{
		fault: "knfsd restart",
		workloads: []*workload{
			libWriteStream(fc, dir, sdir, "lw"),
			libReadStream(fc, dir, readFiles),
			libCreateLoop(fc, dir, sdir, "lc"),
			libReaddirplus(fc, ddir, 300),
			mountWriteStream(mdir, sdir, "mw"),
			mountReadStream(mdir, mreadFiles),
			mountCreateLoop(mdir, sdir, "mc"),
		},
		inject: restartKnfsd,
		watch:  []*watched{{label: "library", take: fc.snapshot, strict: true}, mountWatch(t, bin, mnt)},
		after:  time.Second,
	}.run(t)
	if c := fc.tr.Counters(); c.Reconnects == before.Reconnects {
		t.Errorf("the library's transport did not reconnect: the restart did not reach it (%s)", c)
	}
	if s, err := mountCounters(bin, mnt); err != nil || s.reconnects() == mbefore.reconnects() {
		t.Errorf("the mount did not reconnect across the restart (%v)", err)
	}
	if fc.logs.contains("write verifier changed") {
		faultTable.Note("knfsd restart: the library saw the write verifier change and sent the UNSTABLE data again with FILE_SYNC")
	}
}

// TestFaultsConnectionLost is fault 2 from inside the client, through the
// verbs/faulty decorator: the connection's QP moved to the error state, and
// a post of a call's SEND that fails, each while one workload alone runs —
// a WRITE stream (Read chunks), a READ stream (Write chunks), READDIRPLUS
// (Reply chunks) — so that the call hit is of that kind. The transport
// reconnects and retransmits; the data is verified; resources are back.
func TestFaultsConnectionLost(t *testing.T) {
	sub := "faults-connlost"
	sdir := exportSubdir(t, sub)
	readFiles := serverFiles(t, sdir, "r", 2, 4<<20)
	serverDirEntries(t, filepath.Join(sdir, "dir"), 300)
	fc := dialFaulty(t, exportDir, sunrpc.RetryPolicy{})
	ctx := ctxT(t, time.Minute)
	dir, err := fc.lookup(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	ddir, err := fc.lookup(ctx, sub+"/dir")
	if err != nil {
		t.Fatal(err)
	}
	mk := []func() *workload{
		func() *workload { return libWriteStream(fc, dir, sdir, fmt.Sprintf("lw%d", time.Now().UnixNano())) },
		func() *workload { return libReadStream(fc, dir, readFiles) },
		func() *workload { return libReaddirplus(fc, ddir, 300) },
	}
	injections := []struct {
		fault  string
		inject func(context.Context) error
		check  func(before, after xprt.Counters) error
	}{
		{"QP moved to the error state (client)", func(context.Context) error {
			n, err := fc.fab.BreakQPs()
			if err == nil && n == 0 {
				err = errors.New("no live QP to break")
			}
			return err
		}, func(b, a xprt.Counters) error {
			if a.Reconnects == b.Reconnects {
				return errors.New("no reconnect")
			}
			return nil
		}},
		{"ibv_post_send fails (client)", func(context.Context) error {
			select {
			case <-fc.fab.FailPostSend(faulty.HasOpcode(verbs.OpSend)):
				return nil
			case <-time.After(time.Minute):
				fc.fab.Disarm()
				return errors.New("no SEND posted within a minute")
			}
		}, func(b, a xprt.Counters) error {
			if a.PostFailures == b.PostFailures || a.Reconnects == b.Reconnects {
				return fmt.Errorf("post failures %d→%d, reconnects %d→%d", b.PostFailures, a.PostFailures, b.Reconnects, a.Reconnects)
			}
			return nil
		}},
	}
	for _, inj := range injections {
		for _, m := range mk {
			before := fc.tr.Counters()
			faultCase{
				fault:     inj.fault,
				workloads: []*workload{m()},
				inject:    inj.inject,
				watch:     []*watched{{label: "library", take: fc.snapshot, strict: true}},
				after:     200 * time.Millisecond,
			}.run(t)
			if err := inj.check(before, fc.tr.Counters()); err != nil {
				t.Errorf("%s: %v", inj.fault, err)
			}
		}
	}
	if c := fc.tr.Counters(); c.RefusedTransitions != 0 {
		t.Errorf("refused call-state transitions: %s", c)
	}
}

// ddChild writes src to dst through the mount with dd (conv=fsync: the
// data is on the server when it exits 0).
func ddChild(src, dst string) (*exec.Cmd, chan error) {
	cmd := exec.Command("dd", "if="+src, "of="+dst, "bs=256k", "conv=fsync", "status=none")
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		done <- err
		return cmd, done
	}
	go func() { done <- cmd.Wait() }()
	return cmd, done
}

// TestFaultsSilentServer is fault 4: knfsd stopped for longer than timeo ×
// retrans. A hard mount's and the library's writers wait and finish
// without loss when it comes back; a soft library client gets ETIMEDOUT and
// a soft mount EIO after about the major timeout; a process blocked on the
// hard mount dies of SIGKILL.
func TestFaultsSilentServer(t *testing.T) {
	const timeo, retrans = time.Second, 2
	// The most a soft call may take: linear backoff (timeo, 2 timeo, ...
	// for the first try and each retransmission), with slack for the bed.
	softMax := timeo*time.Duration((retrans+1)*(retrans+2)/2) + 5*time.Second
	bin := mountBinary(t)
	sub := "faults-silent"
	sdir := exportSubdir(t, sub)
	serverFile(t, "faults-silent-probe", 4096)
	// The file the killed cat reads lives in a directory of its own: the
	// dd's below create their files in sub, and a create waiting on a
	// silent server holds its directory's lock, on which another
	// process's first lookup in that directory sleeps uninterruptibly in
	// the VFS (as on the kernel's own NFS mount) before any FUSE request.
	kdir := exportSubdir(t, sub+"-kill")
	if err := os.WriteFile(filepath.Join(kdir, "never-read"), randBytes(1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "src")
	srcData := randBytes(4 << 20)
	if err := os.WriteFile(src, srcData, 0o644); err != nil {
		t.Fatal(err)
	}
	hard := dialFaulty(t, exportDir, sunrpc.RetryPolicy{})
	soft := dialFaulty(t, exportDir, sunrpc.RetryPolicy{Timeout: timeo, Retrans: retrans})
	ctx := ctxT(t, 5*time.Minute)
	dir, err := hard.lookup(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	probeFH, err := soft.lookup(ctx, "faults-silent-probe")
	if err != nil {
		t.Fatal(err)
	}
	hmnt := mountNFSRDMA(t, bin, "hard", fmt.Sprintf("timeo=%d,retrans=%d", timeo/(100*time.Millisecond), retrans))
	smnt := mountNFSRDMA(t, bin, "soft", "actimeo=0", fmt.Sprintf("timeo=%d,retrans=%d", timeo/(100*time.Millisecond), retrans))
	if _, err := os.Stat(filepath.Join(smnt, "faults-silent-probe")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(hmnt, sub+"-kill", "never-read")); err != nil {
		t.Fatal(err)
	}
	lw := libWriteStream(hard, dir, sdir, "lw")
	base := hard.snapshot()
	r := startWorkloads(lw)
	if _, ok := lw.p.WaitOps(2, 2*time.Minute); !ok {
		r.stop()
		t.Fatalf("no progress: %s", lw.p.Errors())
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			startNFSD()
		}
	})
	t0 := time.Now()
	if err := stopNFSD(); err != nil {
		r.stop()
		t.Fatal(err)
	}
	t.Logf("knfsd stopped in %v", time.Since(t0).Round(time.Millisecond))
	hardDD, hardDone := ddChild(src, filepath.Join(hmnt, sub, "dd-hard"))
	killDD, killDone := ddChild(src, filepath.Join(hmnt, sub, "dd-killed"))
	catCmd := exec.Command("cat", filepath.Join(hmnt, sub+"-kill", "never-read"))
	catDone := make(chan error, 1)
	if err := catCmd.Start(); err != nil {
		catDone <- err
	} else {
		go func() { catDone <- catCmd.Wait() }()
	}
	type softResult struct {
		err error
		d   time.Duration
	}
	libSoft := make(chan softResult, 1)
	mntSoft := make(chan softResult, 1)
	go func() {
		s := time.Now()
		_, err := soft.c.Getattr(ctx, probeFH)
		libSoft <- softResult{err, time.Since(s)}
	}()
	go func() {
		s := time.Now()
		_, err := os.Stat(filepath.Join(smnt, "faults-silent-probe"))
		mntSoft <- softResult{err, time.Since(s)}
	}()
	waitSoft := func(label string, ch chan softResult, want error) faults.Row {
		row := faults.Row{Fault: "silent server (knfsd stopped > timeo×retrans)", Workload: label, Ops: 1}
		select {
		case res := <-ch:
			t.Logf("%s: %v after %v", label, res.err, res.d.Round(time.Millisecond))
			row.Recovery = res.d
			switch {
			case errors.Is(res.err, want) && res.d >= timeo*retrans && res.d <= softMax:
				row.Expected, row.Pass = 1, true
			case errors.Is(res.err, want):
				row.Expected = 1
				t.Errorf("%s: %v after %v, want it between %v and %v", label, res.err, res.d, timeo*retrans, softMax)
			default:
				row.Unexpected, row.Errors = 1, fmt.Sprint(res.err)
				t.Errorf("%s: %v after %v, want %v", label, res.err, res.d, want)
			}
		case <-time.After(softMax + 10*time.Second):
			row.Unexpected, row.Errors = 1, "no error: the soft call hung"
			t.Errorf("%s: no answer after %v", label, softMax+10*time.Second)
		}
		return row
	}
	libRow := waitSoft("library soft GETATTR (ETIMEDOUT wanted; time = its latency)", libSoft, syscall.ETIMEDOUT)
	mntRow := waitSoft("mount soft stat (EIO wanted; time = its latency)", mntSoft, syscall.EIO)
	// Past timeo × retrans the hard ones still wait.
	if d := time.Since(t0); d < timeo*retrans+2*time.Second {
		time.Sleep(timeo*retrans + 2*time.Second - d)
	}
	select {
	case err := <-hardDone:
		t.Errorf("dd on the hard mount ended while knfsd was down: %v", err)
	default:
	}
	// SIGKILL of processes blocked on the hard mount: cat waits in a FUSE
	// request (killable: asserted); dd in fsync may wait for the page
	// cache's writeback, which the kernel does not let a signal end
	// (observed, not asserted).
	killRow := faults.Row{Fault: "silent server (knfsd stopped > timeo×retrans)", Workload: "cat blocked on the hard mount, SIGKILL (time: to its death)", Ops: 1}
	select {
	case err := <-catDone:
		t.Errorf("cat on the hard mount ended while knfsd was down: %v", err)
		killRow.Unexpected, killRow.Errors = 1, fmt.Sprint(err)
	default:
		k0 := time.Now()
		catCmd.Process.Kill()
		select {
		case <-catDone:
			killRow.Recovery, killRow.Expected, killRow.Pass = time.Since(k0), 1, true
			t.Logf("cat blocked on the hard mount died %v after SIGKILL", killRow.Recovery.Round(time.Millisecond))
		case <-time.After(20 * time.Second):
			killRow.Unexpected, killRow.Errors = 1, "still alive 20 s after SIGKILL"
			t.Error("a process blocked on the hard mount (cat) survived SIGKILL for 20 s")
		}
	}
	ddKillRow := faults.Row{Fault: "silent server (knfsd stopped > timeo×retrans)", Workload: "dd in fsync on the hard mount, SIGKILL (observed, not asserted)", Ops: 1, Pass: true}
	ddEnded := true
	select {
	case err := <-killDone:
		ddKillRow.Errors = fmt.Sprintf("ended before the kill: %v", err)
	default:
		k0 := time.Now()
		killDD.Process.Kill()
		select {
		case <-killDone:
			ddKillRow.Recovery, ddKillRow.Expected = time.Since(k0), 1
			t.Logf("dd blocked on the hard mount died %v after SIGKILL", ddKillRow.Recovery.Round(time.Millisecond))
		case <-time.After(15 * time.Second):
			ddEnded = false
			ddKillRow.Workload += ": alive 15 s after SIGKILL, dies when knfsd is back"
			t.Log("dd blocked in fsync on the hard mount survived SIGKILL for 15 s (the writeback wait is uninterruptible)")
		}
	}
	down := time.Since(t0)
	if err := startNFSD(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	t1 := time.Now()
	t.Logf("knfsd down for %v", down.Round(time.Millisecond))
	hardRow := faults.Row{Fault: "silent server (knfsd stopped > timeo×retrans)", Workload: "mount hard: dd conv=fsync of 4 MiB (time = from the stop)", Ops: 1}
	select {
	case err := <-hardDone:
		hardRow.Recovery = time.Since(t0)
		if err != nil {
			hardRow.Unexpected, hardRow.Errors = 1, fmt.Sprint(err)
			t.Errorf("dd on the hard mount: %v", err)
		} else if got, err := os.ReadFile(filepath.Join(sdir, "dd-hard")); err != nil || !bytes.Equal(got, srcData) {
			hardRow.Unexpected, hardRow.Errors = 1, "server copy differs"
			t.Errorf("the hard mount's dd: the server copy differs (%v, %d bytes)", err, len(got))
		} else {
			hardRow.Bytes, hardRow.Pass = int64(len(got)), true
		}
	case <-time.After(3 * time.Minute):
		hardDD.Process.Kill()
		hardRow.Unexpected, hardRow.Errors = 1, "did not finish 3 minutes after knfsd came back"
		t.Error("dd on the hard mount did not finish after knfsd came back")
	}
	libRow2 := faults.Row{Fault: "silent server (knfsd stopped > timeo×retrans)", Workload: lw.name + ", hard"}
	if at, ok := lw.p.WaitAfter(t1, 3*time.Minute); ok {
		libRow2.Recovery = at.Sub(t0)
	} else {
		t.Errorf("the library's hard writer made no progress after knfsd came back: %s", lw.p.Errors())
	}
	r.stop()
	n, verr := lw.verified(t)
	if verr != nil {
		t.Errorf("library writer: %v", verr)
	}
	if lw.p.Unexpected() > 0 {
		t.Errorf("library hard writer saw errors: %s", lw.p.Errors())
	}
	now := faults.Settle(base, 15*time.Second, hard.snapshot)
	libRow2.Ops, libRow2.Bytes, libRow2.Unexpected, libRow2.Errors = lw.p.Ops(), n, lw.p.Unexpected(), lw.p.Errors()
	libRow2.Resources = "library: " + base.Delta(now)
	libRow2.Pass = verr == nil && lw.p.Unexpected() == 0 && libRow2.Recovery > 0 && now == base
	if now != base {
		t.Errorf("library resources after the outage: %s", base.Delta(now))
	}
	if !ddEnded {
		select { // the killed dd ends once knfsd is back
		case <-killDone:
		case <-time.After(time.Minute):
			t.Error("the killed dd still runs a minute after knfsd came back")
		}
	}
	for _, row := range []faults.Row{libRow2, hardRow, killRow, ddKillRow, libRow, mntRow} {
		addRow(t, row)
	}
	// The soft mount answers again.
	if _, err := os.Stat(filepath.Join(smnt, "faults-silent-probe")); err != nil {
		t.Errorf("the soft mount after knfsd came back: %v", err)
	}
}

// fullExport exports a tmpfs of size bytes at /srv/faults-full for the
// test, and removes the export and the tmpfs when it ends.
func fullExport(t *testing.T, size int) string {
	t.Helper()
	dir := "/srv/faults-full"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=1777", size), "tmpfs", dir)
	t.Cleanup(func() {
		exec.Command("exportfs", "-u", "*:"+dir).Run()
		exec.Command("umount", dir).Run()
	})
	run(t, "exportfs", "-o", "rw,no_root_squash,insecure,no_subtree_check,fsid=4242", "*:"+dir)
	return dir
}

// prefixIntact checks that the server file's first least bytes are those
// written (the application was told they are), and returns how many
// leading bytes of the server's file are the written ones.
func prefixIntact(path string, data []byte, least int) (int, error) {
	got, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	if len(got) < least {
		return 0, fmt.Errorf("%s: %d bytes on the server, fewer than the %d the application was told are written", path, len(got), least)
	}
	i := faults.Compare(got[:min(len(got), len(data))], data[:min(len(got), len(data))])
	if i < 0 {
		i = min(len(got), len(data))
	}
	if i < least {
		return i, fmt.Errorf("%s: the server's bytes differ from those written from byte %d, within the %d the application was told are written", path, i, least)
	}
	return i, nil
}

// TestFaultsFullExport is fault 5's ENOSPC: a 4 MiB tmpfs exported at run
// time fills up. Through the library WriteAt returns ENOSPC; through the
// mount ENOSPC reaches the application at write, fsync or close (with or
// without fsync), never silently; what was written before the export
// filled is intact on the server.
func TestFaultsFullExport(t *testing.T) {
	const size = 4 << 20
	bin := mountBinary(t)
	sdir := fullExport(t, size)
	const fault = "export full (4 MiB tmpfs)"

	// Library: WriteAt of 6 MiB.
	fc := dialFaulty(t, sdir, sunrpc.RetryPolicy{})
	ctx := ctxT(t, 2*time.Minute)
	cr, err := fc.c.Create(ctx, fc.root, "lib", nfs3.CreateHow{Mode: nfs3.Unchecked})
	if err != nil {
		t.Fatal(err)
	}
	fh := cr.FH
	if fh == nil {
		if fh, err = fc.lookup(ctx, "lib"); err != nil {
			t.Fatal(err)
		}
	}
	data := randBytes(6 << 20)
	row := faults.Row{Fault: fault, Workload: "library WriteAt of 6 MiB", Ops: 1}
	n, err := fc.c.WriteAt(ctx, fh, data, 0)
	t.Logf("WriteAt on the full export: %d, %v", n, err)
	if !errors.Is(err, syscall.ENOSPC) {
		row.Unexpected, row.Errors = 1, fmt.Sprintf("WriteAt: %d, %v (want ENOSPC)", n, err)
		t.Errorf("WriteAt of 6 MiB into 4 MiB: %d, %v; want ENOSPC", n, err)
	} else {
		row.Expected = 1
	}
	if k, err := prefixIntact(filepath.Join(sdir, "lib"), data, n); err != nil {
		row.Unexpected++
		row.Errors += err.Error()
		t.Error(err)
	} else {
		row.Bytes = int64(k)
	}
	row.Pass = row.Unexpected == 0
	addRow(t, row)
	os.Remove(filepath.Join(sdir, "lib"))

	// The mount, with fsync before close and without.
	mnt := t.TempDir()
	cleanupMount(t, bin, mnt)
	if code, out := runCmd(t, bin, "-o", "vers=3,proto=rdma,port=20049", serverAddr.String()+":"+sdir, mnt); code != 0 {
		t.Fatalf("mount %s: exit %d: %s", sdir, code, out)
	}
	for _, withFsync := range []bool{true, false} {
		name := "nofsync"
		label := "mount: write 6 MiB, close"
		if withFsync {
			name, label = "fsync", "mount: write 6 MiB (fsync at 2 MiB), fsync, close"
		}
		row := faults.Row{Fault: fault, Workload: label, Ops: 1}
		f, err := os.Create(filepath.Join(mnt, name))
		if err != nil {
			t.Fatal(err)
		}
		var errs []string
		var where string
		written, synced := 0, 0
		note := func(at string, err error) {
			if err == nil {
				return
			}
			errs = append(errs, at+": "+err.Error())
			if where == "" && errors.Is(err, syscall.ENOSPC) {
				where = at
			} else if !errors.Is(err, syscall.ENOSPC) {
				row.Unexpected++
			}
		}
		for off := 0; off < len(data); off += 64 << 10 {
			k, err := f.Write(data[off : off+64<<10])
			written += k
			if err != nil {
				note("write", err)
				break
			}
			if withFsync && written == 2<<20 {
				// Half the export: this fsync must succeed, and these
				// bytes stay intact whatever comes after.
				if err := f.Sync(); err != nil {
					row.Unexpected++
					errs = append(errs, "fsync at 2 MiB: "+err.Error())
				} else {
					synced = written
				}
			}
		}
		if withFsync {
			note("fsync", f.Sync())
		}
		note("close", f.Close())
		t.Logf("%s: %d bytes accepted; errors %v; ENOSPC first at %q", label, written, errs, where)
		if where == "" {
			row.Unexpected++
			errs = append(errs, "no ENOSPC: the write was lost silently")
			t.Errorf("%s: 6 MiB into a 4 MiB export and no ENOSPC (%v)", label, errs)
		} else {
			row.Expected = 1
		}
		if row.Unexpected > 0 {
			row.Errors = strings.Join(errs, "; ")
			t.Errorf("%s: errors other than ENOSPC: %v", label, errs)
		}
		if k, err := prefixIntact(filepath.Join(sdir, name), data, synced); err != nil {
			row.Unexpected++
			row.Errors += err.Error()
			t.Error(err)
		} else {
			row.Bytes = int64(k)
		}
		if where != "" {
			row.Workload += " (ENOSPC at " + where + ")"
		}
		row.Pass = row.Unexpected == 0
		addRow(t, row)
		os.Remove(filepath.Join(sdir, name))
	}
	// Space freed on the server: the mount writes again.
	if err := os.WriteFile(filepath.Join(mnt, "after"), data[:1<<20], 0o644); err != nil {
		t.Errorf("writing after space was freed: %v", err)
	} else if _, err := prefixIntact(filepath.Join(sdir, "after"), data[:1<<20], 1<<20); err != nil {
		t.Error(err)
	}
}

// staleWithin polls op every 200 ms until it gives ESTALE or d passes.
// knfsd keeps a removed file's inode open in its file cache for a few
// seconds after the last I/O (the handle still reaches the unlinked file,
// nlink 0, meanwhile), so ESTALE comes once the server lets it go. It
// returns how long that took and the last other error (nil: none).
func staleWithin(d time.Duration, op func() error) (time.Duration, bool, error) {
	start := time.Now()
	var last error
	for time.Since(start) < d {
		err := op()
		if errors.Is(err, syscall.ESTALE) {
			return time.Since(start), true, nil
		}
		if err != nil {
			last = err
		}
		time.Sleep(200 * time.Millisecond)
	}
	return time.Since(start), false, last
}

// TestFaultsStaleHandle is fault 5's ESTALE: a file replaced on the server
// (removed and created again under its name) while the client holds its
// handle. The library gets ESTALE for the old handle (once knfsd let go of
// the removed inode) and the new file by a new LOOKUP. Through the mounts
// (nfsrdma's and the kernel's): TestFaultsStaleHandleMount.
func TestFaultsStaleHandle(t *testing.T) {
	const fault = "file replaced on the server (ESTALE)"
	name := "faults-stale"
	path := filepath.Join(exportDir, name)
	t.Cleanup(func() { os.Remove(path) })
	oldData, newData := randBytes(64<<10), randBytes(48<<10)
	replace := func() {
		t.Helper()
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, newData, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(path, oldData, 0o644); err != nil {
		t.Fatal(err)
	}
	// Library.
	fc := dialFaulty(t, exportDir, sunrpc.RetryPolicy{})
	ctx := ctxT(t, time.Minute)
	row := faults.Row{Fault: fault, Workload: "library: old handle gets ESTALE, LOOKUP again (time: to ESTALE)"}
	fh, err := fc.lookup(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	if k, err := fc.c.ReadAt(ctx, fh, buf, 0); (err != nil && err != io.EOF) || !bytes.Equal(buf[:k], oldData) {
		t.Fatalf("reading the file: %d, %v", k, err)
	}
	replace()
	took, stale, last := staleWithin(20*time.Second, func() error {
		row.Ops++
		k, err := fc.c.ReadAt(ctx, fh, buf, 0)
		if (err == nil || err == io.EOF) && !bytes.Equal(buf[:k], oldData) {
			return fmt.Errorf("the old handle read %d bytes that are not the old file's", k)
		}
		if err == io.EOF {
			err = nil
		}
		return err
	})
	t.Logf("library: the old handle gave ESTALE %v after the replacement (%v)", took.Round(time.Millisecond), last)
	if stale && last == nil {
		row.Expected, row.Recovery = 1, took
	} else {
		row.Unexpected, row.Errors = 1, fmt.Sprintf("old handle: ESTALE %v, error %v", stale, last)
		t.Errorf("READ of a replaced file's handle: no ESTALE within %v (last error %v)", took, last)
	}
	row.Ops++
	if fh2, err := fc.lookup(ctx, name); err != nil {
		row.Unexpected++
		t.Errorf("LOOKUP of the new file: %v", err)
	} else if k, err := fc.c.ReadAt(ctx, fh2, buf, 0); (err != nil && err != io.EOF) || !bytes.Equal(buf[:k], newData) {
		row.Unexpected++
		t.Errorf("reading the new file: %d, %v", k, err)
	} else {
		row.Bytes = int64(k)
	}
	row.Pass = row.Unexpected == 0
	addRow(t, row)

}

// fgMount is an nfsrdma-mount server run in the foreground as the test's
// child (-f -v, its output in a log file), so that the soak can kill it,
// mount again, and get its goroutines (SIGQUIT) if it hangs.
type fgMount struct {
	cmd    *exec.Cmd
	exited chan error
	log    string
}

func startFgMount(bin, opts, spec, dir, logPath string) (*fgMount, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-f", "-v", "--ready-fd=3", "-o", opts, spec, dir)
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{w}
	if err := cmd.Start(); err != nil {
		w.Close()
		r.Close()
		return nil, err
	}
	w.Close()
	line, _ := bufio.NewReader(r).ReadString('\n')
	r.Close()
	m := &fgMount{cmd: cmd, exited: make(chan error, 1), log: logPath}
	go func() { m.exited <- cmd.Wait() }()
	if strings.TrimSpace(line) != "ready" {
		select {
		case <-m.exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-m.exited
		}
		return nil, fmt.Errorf("nfsrdma-mount: %s\n%s", strings.TrimSpace(line), readLog(logPath))
	}
	return m, nil
}

// kill sends SIGKILL and waits for the server to go.
func (m *fgMount) kill() error {
	if err := m.cmd.Process.Kill(); err != nil {
		return err
	}
	select {
	case <-m.exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("mount server %d survived SIGKILL", m.cmd.Process.Pid)
	}
}

// dump makes the server print its goroutines (SIGQUIT) and returns the
// tail of its log.
func (m *fgMount) dump() string {
	m.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-m.exited:
	case <-time.After(10 * time.Second):
	}
	b, _ := os.ReadFile(m.log)
	if len(b) > 128<<10 {
		b = b[len(b)-128<<10:]
	}
	return string(b)
}

// soakLength is the chaos soak's length: $NFSRDMA_SOAK (a Go duration;
// make soak sets 10m), 2 minutes by default so that make test stays in
// its budget.
func soakLength(t *testing.T) time.Duration {
	s := os.Getenv("NFSRDMA_SOAK")
	if s == "" {
		return 2 * time.Minute
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("NFSRDMA_SOAK=%q: want a duration such as 10m", s)
	}
	return d
}

// TestFaultsSoak is the chaos soak (fault 8): every workload of
// TestFaultsKnfsdRestart runs, through the library and through the mount,
// while a driver injects, at random every 20–60 s, knfsd restarts (1), QPs
// moved to the error state and failed posts in the library's connection
// (2), knfsd stopped for longer than timeo × retrans (4) and SIGKILL of the
// mount server followed by a remount over the dead mount (6). Afterwards
// every byte each workload was told is safe is on the server, every byte
// read was right, the only errors were the killed mount's, and the
// library's verbs resources, goroutines and fds are back to baseline.
func TestFaultsSoak(t *testing.T) {
	length := soakLength(t)
	bin := mountBinary(t)
	sub := "faults-soak"
	sdir := exportSubdir(t, sub)
	readFiles := serverFiles(t, sdir, "r", 3, 4<<20)
	mreadFiles := serverFiles(t, sdir, "mr", 4, 2<<20)
	serverDirEntries(t, filepath.Join(sdir, "dir"), 300)
	fc := dialFaulty(t, exportDir, sunrpc.RetryPolicy{})
	ctx := ctxT(t, time.Minute)
	dir, err := fc.lookup(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	ddir, err := fc.lookup(ctx, sub+"/dir")
	if err != nil {
		t.Fatal(err)
	}
	// The mount server in the foreground as the test's child, so that it
	// can be killed, mounted again over its dead mount, and dumped.
	mnt := t.TempDir()
	cleanupMount(t, bin, mnt)
	mountOpts := "vers=3,proto=rdma,port=20049,hard,timeo=10,retrans=2"
	mlog := filepath.Join(t.TempDir(), "nfsrdma-mount.log")
	var msrvMu sync.Mutex
	msrv, err := startFgMount(bin, mountOpts, exportSpec, mnt, mlog)
	if err != nil {
		t.Fatal(err)
	}
	server := func() *fgMount { msrvMu.Lock(); defer msrvMu.Unlock(); return msrv }
	t.Cleanup(func() {
		m := server()
		exec.Command(bin, "-u", mnt).Run()
		select {
		case <-m.exited:
		case <-time.After(30 * time.Second):
			t.Errorf("the soak's mount server still runs 30 s after its unmount:\n%s", m.dump())
		}
	})
	mdir := filepath.Join(mnt, sub)
	// Errors are expected of the mount's workloads only while its server
	// is dead: from the kill until the new mount serves. The kernel fails
	// the FUSE requests in flight at the kill with ECONNABORTED and later
	// ones with ENOTCONN; ENOENT is the mount point bare before the
	// remount.
	var killed atomic.Bool
	mountExpect := func(err error) bool {
		return killed.Load() && (errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ENOENT))
	}
	ws := []*workload{
		libWriteStream(fc, dir, sdir, "lw"),
		libReadStream(fc, dir, readFiles),
		libCreateLoop(fc, dir, sdir, "lc"),
		libReaddirplus(fc, ddir, 300),
		mountWriteStream(mdir, sdir, "mw"),
		mountReadStream(mdir, mreadFiles),
		mountCreateLoop(mdir, sdir, "mc"),
	}
	for _, w := range ws[4:] {
		w.expect, w.pause = mountExpect, 500*time.Millisecond
	}
	var mountProblems []string
	fs := []faults.Fault{
		{Name: "knfsd restart", Inject: restartKnfsd},
		{Name: "QP moved to the error state (library)", Inject: func(context.Context) error {
			_, err := fc.fab.BreakQPs()
			return err
		}},
		{Name: "ibv_post_send fails (library)", Inject: func(context.Context) error {
			select {
			case <-fc.fab.FailPostSend(nil):
				return nil
			case <-time.After(time.Minute):
				fc.fab.Disarm()
				return errors.New("no post within a minute")
			}
		}},
		{Name: "silent server (knfsd stopped 5 s)", Inject: func(context.Context) error {
			if err := stopNFSD(); err != nil {
				return err
			}
			time.Sleep(5 * time.Second)
			return startNFSD()
		}},
		{Name: "mount server SIGKILL, remount", Inject: func(context.Context) error {
			killed.Store(true)
			if err := server().kill(); err != nil {
				return err
			}
			time.Sleep(time.Second) // the workloads meet the dead mount
			m, err := startFgMount(bin, mountOpts, exportSpec, mnt, mlog)
			if err != nil {
				return fmt.Errorf("mount over the dead one: %w", err)
			}
			msrvMu.Lock()
			msrv = m
			msrvMu.Unlock()
			if n := mountCount(t, mnt); n != 1 {
				mountProblems = append(mountProblems, fmt.Sprintf("%d mounts stacked at the mount point", n))
			}
			// Steps that met the dead mount finish before errors stop being expected.
			time.Sleep(2 * time.Second)
			killed.Store(false)
			return nil
		}},
	}
	// $NFSRDMA_SOAK_FAULTS (a regular expression) keeps only the faults
	// whose names it matches, to reproduce one of them many times.
	if re := os.Getenv("NFSRDMA_SOAK_FAULTS"); re != "" {
		keep, err := regexp.Compile(re)
		if err != nil {
			t.Fatalf("NFSRDMA_SOAK_FAULTS: %v", err)
		}
		only := fs[:0]
		for _, f := range fs {
			if keep.MatchString(f.Name) {
				only = append(only, f)
			}
		}
		if fs = only; len(fs) == 0 {
			t.Fatalf("NFSRDMA_SOAK_FAULTS=%q matches no fault", re)
		}
	}
	type stat struct {
		n        int
		worst    time.Duration
		failures []string
	}
	stats := map[string]*stat{}
	worst := map[*workload]time.Duration{}
	base := fc.snapshot()
	// The mount server's descriptors: a server serving after the soak
	// (the first, or one mounted after a kill) holds what the first one
	// held before it (its threads only grow with load, so they are shown,
	// not judged).
	// Taken once it holds still: just after the mount is ready the server
	// may still hold a descriptor of its start (the ready pipe).
	mbase := faults.TakeProcess(server().cmd.Process.Pid)
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
		time.Sleep(300 * time.Millisecond)
		again := faults.TakeProcess(server().cmd.Process.Pid)
		if again.FDs == mbase.FDs {
			break
		}
		mbase = again
	}
	r := startWorkloads(ws...)
	for _, w := range ws {
		if _, ok := w.p.WaitOps(1, 2*time.Minute); !ok {
			r.stop()
			t.Fatalf("%s: no progress before the soak (%s)", w.name, w.p.Errors())
		}
	}
	d := &faults.Driver{Faults: fs, Min: 20 * time.Second, Max: 60 * time.Second}
	if p := os.Getenv("NFSRDMA_SOAK_PAUSE"); p != "" { // "min-max", two Go durations
		lo, hi, _ := strings.Cut(p, "-")
		var err1, err2 error
		d.Min, err1 = time.ParseDuration(lo)
		d.Max, err2 = time.ParseDuration(hi)
		if err1 != nil || err2 != nil || d.Max < d.Min {
			t.Fatalf("NFSRDMA_SOAK_PAUSE=%q: want min-max such as 5s-15s", p)
		}
	}
	dctx, stopSoak := context.WithTimeout(context.Background(), length)
	hung := false
	d.OnStart = func(name string) { t.Logf("soak: injecting %s", name) }
	d.OnEvent = func(ev faults.Event) {
		s := stats[ev.Fault]
		if s == nil {
			s = &stat{}
			stats[ev.Fault] = s
		}
		s.n++
		if ev.Err != nil {
			s.failures = append(s.failures, ev.Err.Error())
			t.Errorf("injecting %s: %v", ev.Fault, ev.Err)
			hung = true
			stopSoak()
			return
		}
		for _, w := range ws {
			at, ok := w.p.WaitAfter(ev.End, 90*time.Second)
			if !ok {
				s.failures = append(s.failures, w.name+" did not recover")
				t.Errorf("%s: no progress within 90 s after %s (errors: %s)", w.name, ev.Fault, w.p.Errors())
				if strings.HasPrefix(w.name, "mount") {
					t.Errorf("the mount server's log and goroutines:\n%s", server().dump())
				}
				hung = true
				stopSoak()
				return
			}
			rec := at.Sub(ev.Start)
			s.worst = max(s.worst, rec)
			worst[w] = max(worst[w], rec)
		}
		t.Logf("soak: %s at %s, all workloads recovered within %v", ev.Fault, ev.Start.Format("15:04:05"), s.worst.Round(10*time.Millisecond))
	}
	start := time.Now()
	d.Run(dctx)
	stopSoak()
	if hung {
		// The workloads' hung steps end when the dumped server exits
		// (ENOTCONN) or their own timeouts pass.
		t.Error("the soak stopped at a workload that did not recover")
	}
	t.Logf("soak: %v, %d faults", time.Since(start).Round(time.Second), len(d.Events()))
	r.stop()
	now := faults.Settle(base, 15*time.Second, fc.snapshot)
	delta := base.Delta(now)
	if now != base {
		t.Errorf("library resources after the soak: %s", delta)
	}
	// A leak is growth: the server after the soak may hold fewer (a
	// remounted one never held its predecessor's start-up descriptors).
	mnow := faults.SettleUntil(15*time.Second, func() faults.Snapshot { return faults.TakeProcess(server().cmd.Process.Pid) },
		func(s faults.Snapshot) bool { return s.FDs <= mbase.FDs })
	mdelta := fmt.Sprintf("mount server fds %d before, %d after", mbase.FDs, mnow.FDs)
	if m := faults.TakeProcess(server().cmd.Process.Pid); m.Threads > 0 {
		mdelta += fmt.Sprintf(" (threads %d, %d)", mbase.Threads, m.Threads)
	}
	if mnow.FDs > mbase.FDs || mbase.FDs <= 0 || mnow.FDs <= 0 {
		t.Errorf("mount server after the soak: %s", mdelta)
	}
	for _, p := range mountProblems {
		t.Error(p)
	}
	label := fmt.Sprintf("soak %v", length)
	var kinds []string
	for _, f := range fs {
		if s := stats[f.Name]; s != nil {
			kinds = append(kinds, fmt.Sprintf("%s ×%d", f.Name, s.n))
		}
	}
	for _, w := range ws {
		n, err := w.verified(t)
		if err != nil {
			t.Errorf("%s: data lost or corrupted in the soak: %v", w.name, err)
		}
		if w.p.Unexpected() > 0 {
			t.Errorf("%s: unexpected errors in the soak: %s", w.name, w.p.Errors())
		}
		res := mdelta
		if strings.HasPrefix(w.name, "library") {
			res = "library: " + delta
		}
		addRow(t, faults.Row{Fault: label + ": all faults", Workload: w.name, Ops: w.p.Ops(), Bytes: n,
			Expected: w.p.ExpectedErrs(), Unexpected: w.p.Unexpected(), Errors: w.p.Errors(),
			Recovery: worst[w], Resources: res, Pass: err == nil && w.p.Unexpected() == 0 && (len(d.Events()) == 0 || worst[w] > 0)})
	}
	for _, f := range fs {
		s := stats[f.Name]
		if s == nil {
			continue
		}
		addRow(t, faults.Row{Fault: label + ": " + f.Name, Faults: s.n, Workload: "every soak workload (recovery: the slowest)",
			Recovery: s.worst, Errors: strings.Join(s.failures, "; "), Unexpected: len(s.failures), Pass: len(s.failures) == 0})
	}
	faultTable.Note("%s: %d faults injected (%s)", label, len(d.Events()), strings.Join(kinds, ", "))
	if len(d.Events()) == 0 {
		t.Error("the soak injected no fault")
	}
}
