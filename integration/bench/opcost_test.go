package bench

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestParseProcStatBusy(t *testing.T) {
	const stat = "cpu  100 5 40 9000 7 3 2 11 0 0\ncpu0 50 2 20 4500 3 1 1 5 0 0\nintr 1 2 3\n"
	got, err := parseProcStatBusy(stat)
	if want := uint64(100 + 5 + 40 + 3 + 2); err != nil || got != want {
		t.Errorf("busy %d, %v; want %d (user+nice+system+irq+softirq, not idle, iowait or steal)", got, err, want)
	}
	for _, bad := range []string{"cpu0 1 2 3 4 5 6 7\n", "cpu 1 2 3\n", "cpu 1 x 3 4 5 6 7 8\n"} {
		if _, err := parseProcStatBusy(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestParseTaskFiles(t *testing.T) {
	if n, err := parseSchedstat("123456789 2000 17\n"); err != nil || n != 123456789 {
		t.Errorf("schedstat: %d, %v", n, err)
	}
	if _, err := parseSchedstat("1 2\n"); err == nil {
		t.Error("a two-field schedstat parsed")
	}
	status := "Name:\tnfsrdma-mount\nState:\tS (sleeping)\nvoluntary_ctxt_switches:\t4021\nnonvoluntary_ctxt_switches:\t17\n"
	if v, i, err := parseCtxSwitches(status); err != nil || v != 4021 || i != 17 {
		t.Errorf("status: %d %d %v", v, i, err)
	}
	if _, _, err := parseCtxSwitches("Name:\tx\nvoluntary_ctxt_switches:\t1\n"); err == nil {
		t.Error("a status without nonvoluntary_ctxt_switches parsed")
	}
	// A name with spaces and a parenthesis; flags 0x00208040 (a kernel
	// thread).
	comm, flags, err := parseStatFlags("42 (nfsd (x) y) S 2 0 0 0 -1 2129984 0 0 0 0 1 2")
	if err != nil || comm != "nfsd (x) y" || flags&pfKthread == 0 {
		t.Errorf("stat: %q %#x %v", comm, flags, err)
	}
}

const syscallHistText = `# event histogram
#
# trigger info: hist:keys=common_pid:vals=hitcount:sort=hitcount:size=8192 [active]
#

{ common_pid:        146 } hitcount:          1
{ common_pid:       1201 } hitcount:      52011

Totals:
    Hits: 52012
    Entries: 2
    Dropped: 0
`

func TestParseSyscallHist(t *testing.T) {
	m, err := parseSyscallHist(syscallHistText)
	if err != nil || len(m) != 2 || m[146] != 1 || m[1201] != 52011 {
		t.Errorf("%v, %v", m, err)
	}
	if _, err := parseSyscallHist("{ common_pid: 12 } hits: 3\n"); err == nil {
		t.Error("a line without hitcount parsed")
	}
}

func TestParseOurGo(t *testing.T) {
	text := ourStats + "\tnfsrdma-go:\theap_alloc_objects 987654 heap_alloc_bytes 1000000 gc_cycles 3\n"
	pid, allocs, err := ParseOurGo(text)
	if err != nil || pid != 123 || allocs != 987654 {
		t.Errorf("pid %d allocs %d, %v", pid, allocs, err)
	}
	// An older server: the pid, no allocations.
	if pid, allocs, err := ParseOurGo(ourStats); err != nil || pid != 123 || allocs != -1 {
		t.Errorf("without the Go line: pid %d allocs %d, %v", pid, allocs, err)
	}
	if _, _, err := ParseOurGo("device x\n"); err == nil {
		t.Error("stats without a pid parsed")
	}
}

// fakeProc writes a /proc with a server process of two threads (one
// gone mid-reading is modelled by a task without status) and two kernel
// threads, nfsd and a kworker.
func fakeProc(t *testing.T, busy, run1, run2, kw, nfsd uint64) string {
	dir := t.TempDir()
	w := func(path, data string) {
		p := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w("stat", "cpu  "+itoa(busy)+" 0 0 100 0 0 0 0 0 0\n")
	w("500/stat", "500 (nfsrdma-mount) S 1 500 500 0 -1 4194560 0 0\n")
	w("500/task/500/schedstat", itoa(run1)+" 0 10\n")
	w("500/task/500/status", "voluntary_ctxt_switches:\t10\nnonvoluntary_ctxt_switches:\t1\n")
	w("500/task/501/schedstat", itoa(run2)+" 0 10\n")
	w("500/task/501/status", "voluntary_ctxt_switches:\t20\nnonvoluntary_ctxt_switches:\t2\n")
	w("500/task/502/schedstat", "5 0 1\n") // no status: ended
	w("500/schedstat", "0 0 0\n")
	w("20/stat", "20 (kworker/0:1-rpciod) I 2 0 0 0 -1 69238880 0 0\n")
	w("20/schedstat", itoa(kw)+" 0 1\n")
	w("30/stat", "30 (nfsd) S 2 0 0 0 -1 2129984 0 0\n")
	w("30/schedstat", itoa(nfsd)+" 0 1\n")
	return dir
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// TestReadCostAndDelta: the counters read from /proc and their growth
// over a workload.
func TestReadCostAndDelta(t *testing.T) {
	defer func(r string) { procRoot = r }(procRoot)
	procRoot = fakeProc(t, 1000, 1e6, 2e6, 5e5, 7e5)
	before, err := readCost(500, 100, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if s := before.server; s == nil || s.runNS != 3e6 || s.vol != 30 || s.invol != 3 || s.syscallsOK || s.allocs != 100 {
		t.Fatalf("server %+v", before.server)
	}
	if len(before.kthreads) != 2 || !before.kthreads[30].nfsd || before.kthreads[20].nfsd {
		t.Fatalf("kernel threads %+v (the mount server is not one)", before.kthreads)
	}
	procRoot = fakeProc(t, 1030, 4e6, 2e6, 9e5, 1.7e6)
	after, err := readCost(500, 400, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	d := after.sub(before)
	if d.busyNS != 300e6 || d.kthreadNS != 4e5 || d.nfsdNS != 1e6 {
		t.Errorf("delta %+v: want 30 ticks = 300 ms busy, 0.4 ms kworker, 1 ms nfsd", d)
	}
	if s := d.server; s == nil || s.runNS != 3e6 || s.vol != 0 || s.allocs != 300 || s.syscallsOK {
		t.Errorf("server delta %+v", d.server)
	}
	// With a histogram, the threads' system calls.
	hist := map[int]uint64{500: 7, 501: 5, 999: 1000}
	p, err := readProcess(500, hist)
	if err != nil || !p.syscallsOK || p.syscalls != 12 {
		t.Errorf("syscalls %+v, %v: want 12 (the process's threads only)", p, err)
	}
}

func TestRowCost(t *testing.T) {
	ss := []*sample{
		{units: 1000, cost: &costDelta{busyNS: 100e6, kthreadNS: 10e6, nfsdNS: 20e6,
			server: &procCounts{runNS: 40e6, vol: 2000, invol: 10, syscalls: 5000, syscallsOK: true, allocs: 30000}}},
		nil,
		{units: 3000, cost: &costDelta{busyNS: 300e6, kthreadNS: 30e6, nfsdNS: 60e6,
			server: &procCounts{runNS: 120e6, vol: 6000, invol: 30, syscalls: 15000, syscallsOK: true, allocs: 90000}}},
		{units: 500}, // not counted
	}
	c := rowCost("nfsrdma-mount", ss)
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if c == nil || c.Units != 4000 || !near(c.CPUUS, 100) || !near(c.KThreadUS, 10) || !near(c.NfsdUS, 20) {
		t.Fatalf("%+v: want 100 µs CPU, 10 kernel threads, 20 nfsd per unit over 4000 units", c)
	}
	if s := c.Server; s == nil || !near(s.CPUUS, 40) || !near(s.Syscalls, 5) || !near(s.VolCSW, 2) || !near(s.InvolCSW, 0.01) || !near(s.Allocs, 30) {
		t.Errorf("server %+v", c.Server)
	}
	// A round without allocations makes them unknown, not smaller.
	ss[2].cost.server.allocs = -1
	if c := rowCost("x", ss); c.Server.Allocs != -1 || !near(c.Server.Syscalls, 5) {
		t.Errorf("allocs %v syscalls %v", c.Server.Allocs, c.Server.Syscalls)
	}
	if rowCost("kernel", []*sample{nil, {units: 4}}) != nil {
		t.Error("a cost from no counted round")
	}
}

func TestWriteCostTable(t *testing.T) {
	rows := []MatrixRow{{Group: MatrixFioDirect, Name: "rand-read 4KiB qd1", Unit: "IOPS", Per: "I/O", Ratio: 0.8, Target: 0.8, Met: true,
		Cost: []OpCost{
			{Client: "kernel", Units: 100, CPUUS: 150, KThreadUS: 40, NfsdUS: 30},
			{Client: "nfsrdma-mount", Units: 90, CPUUS: 230, KThreadUS: 20, NfsdUS: 31,
				Server: &ServerCost{CPUUS: 120, Syscalls: 6.5, VolCSW: 3.25, InvolCSW: 0.004, Allocs: -1}},
		}}}
	var b bytes.Buffer
	writeMatrix(&b, rows)
	out := b.String()
	for _, want := range []string{
		"| cost per unit | ratio | CPU µs: kernel | nfsrdma-mount |",
		"| rand-read 4KiB qd1 (per I/O) | 0.80x | 150 | 230 | 40.00 + 30.00 | 20.00 + 31.00 | 120 | 6.50 | 3.25 + 0.004 | - |",
		"Cost per unit",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}

// TestMarkdownAccel: the header says how the guest ran, TCG for reports
// that do not say.
func TestMarkdownAccel(t *testing.T) {
	for accel, want := range map[string]string{
		"":                                  "TCG-emulated guest, 2 vCPUs",
		"TCG (no /dev/kvm on this host)":    "Guest on TCG (no /dev/kvm on this host), 2 vCPUs",
		"KVM (a probe boot ... user space)": "Guest on KVM (a probe boot ... user space), 2 vCPUs",
	} {
		var b bytes.Buffer
		(&Report{Accel: accel}).WriteMarkdown(&b)
		if !strings.Contains(b.String(), want) {
			t.Errorf("accel %q: no %q in\n%s", accel, want, b.String())
		}
	}
}
