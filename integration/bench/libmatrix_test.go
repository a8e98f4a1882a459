package bench

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/nfs3/gonfstest"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

func TestNewLibRow(t *testing.T) {
	// Throughput: library/kernel per round; a round where a side failed
	// (0) is left out.
	x := newLibRow(LibRandIO, "rand-read 4KiB, 16 goroutines", "IOPS", "", []float64{100, 200, 300, 50}, []float64{150, 180, 0, 100})
	if x.Better != "higher" || len(x.Rounds) != 3 {
		t.Fatalf("row %+v: want better higher and 3 rounds", x)
	}
	if x.Ratio != 1.5 || x.Min != 0.9 || x.Max != 2 || !x.Met || x.Target != LibRowTarget {
		t.Errorf("ratio %v min %v max %v met %v target %v, want 1.5 0.9 2 true %v", x.Ratio, x.Min, x.Max, x.Met, x.Target, LibRowTarget)
	}
	if got := x.LibraryMedian(); got != 150 {
		t.Errorf("library median %v, want 150 (zeros left out)", got)
	}
	// Time: kernel/library, so a slower library is below 1.
	y := newLibRow(LibSmallFiles, "create", "s", "", []float64{2, 4}, []float64{4, 5})
	if y.Better != "lower" || y.Ratio != (0.5+0.8)/2 || y.Met {
		t.Errorf("time row %+v: want ratio 0.65, not met", y)
	}
	z := newLibRow(LibTrees, "list", "s", "", []float64{0}, []float64{1})
	if z.Ratio != 0 || z.Met || z.Rounds != nil {
		t.Errorf("row without a paired round %+v: want no ratio", z)
	}
}

func TestLibMatrixSummarize(t *testing.T) {
	row := func(r float64) LibRow { return LibRow{Ratio: r, Target: 1, Met: r >= 1} }
	for _, c := range []struct {
		rows []float64
		gm   float64
		met  bool
	}{
		{[]float64{1.2, 1.2, 1.2}, 1.2, true},
		{[]float64{1.0, 2.0}, math.Sqrt2, true},
		{[]float64{0.9, 2.0}, math.Sqrt(1.8), false}, // a row below 1.0
		{[]float64{1.0, 1.1}, math.Sqrt(1.1), false}, // the mean below 1.2
		{[]float64{1.5, 0}, 1.5, false},              // a row not measured
		{nil, 0, false},
	} {
		m := &LibMatrix{}
		for _, r := range c.rows {
			m.Rows = append(m.Rows, row(r))
		}
		m.summarize()
		if math.Abs(m.GeoMean-c.gm) > 1e-9 || m.Met != c.met {
			t.Errorf("%v: geomean %v met %v, want %v %v", c.rows, m.GeoMean, m.Met, c.gm, c.met)
		}
		if m.RowTarget != LibRowTarget || m.GeoTarget != LibGeoTarget {
			t.Errorf("targets %v %v", m.RowTarget, m.GeoTarget)
		}
	}
}

func TestWriteLibMatrix(t *testing.T) {
	m := libMatrixOf([]*libWork{
		{group: LibRandIO, name: "rand-read 4KiB, 1 goroutines", unit: "IOPS"},
		{group: LibSmallFiles, name: "create 2000 files of 4 KiB", unit: "s", per: "file"},
	}, [][2][]libSample{
		{{{value: 1000}, {value: 1100}}, {{value: 1500}, {value: 1650}}},
		{{{value: 2, units: 10, rpcs: RPCCounts{"CREATE": {Calls: 10}, "WRITE": {Calls: 10}}}, {value: 2, units: 10, rpcs: RPCCounts{"CREATE": {Calls: 10}, "WRITE": {Calls: 10}}}},
			{{value: 4, units: 10, rpcs: RPCCounts{"LOOKUP": {Calls: 80}, "CREATE": {Calls: 10}}}, {value: 4}}},
	})
	var b bytes.Buffer
	(&Report{LibMatrix: m}).WriteLibMatrix(&b)
	out := b.String()
	for _, want := range []string{
		"## Library matrix",
		"### Library: random I/O",
		"### Library: small files",
		"| rand-read 4KiB, 1 goroutines | IOPS | 1050 | 1575 | 1.50x | 1.50-1.50 | >= 1.0x | yes |",
		"| create 2000 files of 4 KiB | s | 2.00 | 4.00 | 0.50x | 0.50-0.50 | >= 1.0x | **no** | 2.00: CREATE 1.00, WRITE 1.00 per file | 9.00: LOOKUP 8.00, CREATE 1.00 per file |",
		"| 1.50x | 1.50-1.50 | >= 1.0x | yes | - | - |",
		"no row below 1.0x (**not met**: 1 below, create 2000 files of 4 KiB 0.50x)",
		"geometric mean of the 2 ratios **0.87x**, at least 1.2x (**not met**)",
		"| create 2000 files of 4 KiB | 2.00 2.00 | 4.00 4.00 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the Markdown lacks %q:\n%s", want, out)
		}
	}
	// The full report places it after the workload matrix.
	b.Reset()
	(&Report{LibMatrix: m, Matrix: []MatrixRow{{Group: "g", Name: "n", Ratio: 1, Target: 0.8, Met: true}}}).WriteMarkdown(&b)
	if i, j := strings.Index(b.String(), "## Workload matrix"), strings.Index(b.String(), "## Library matrix"); i < 0 || j < i {
		t.Errorf("library matrix at %d, workload matrix at %d: want it after", j, i)
	}
}

// TestLibRounds runs every row of a small plan on both sides, os on a
// local directory and the library on go-nfs serving the same directory,
// as the guest runs them, and checks that each measured.
func TestLibRounds(t *testing.T) {
	p := LibPlan{Rounds: 2, IOSeconds: 0.05, IOFileMiB: 1, Goroutines: []int{1, 4},
		SmallFiles: 12, SmallDirs: 3, SmallKiB: 4, BigDir: 25, TreeFiles: 15, StepTimeout: time.Minute}
	exp, local := t.TempDir(), t.TempDir()
	if err := layOutLib(p, exp, local); err != nil {
		t.Fatal(err)
	}
	s := gonfstest.StartFS(t, gonfstest.NewDiskFS(exp))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tgt, err := nfs3.Mount(ctx, s.Host, "/", &nfs3.MountOptions{MountPort: s.Port, NFSPort: s.Port, Cred: &sunrpc.AuthNone})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	colds := 0
	cold := func(context.Context) error { colds++; return nil }
	kern := &libSide{name: "kernel mount (os)", key: "lm-kernel", fs: osFS{root: exp}, cold: cold}
	lib := &libSide{name: "library", key: "lm-lib", fs: targetFS{t: tgt}, cold: cold}
	ws := libWorkloads(p)
	var fails []string
	rounds := 0
	var m *LibMatrix
	// A counter of its own in place of knfsd's: one call per read.
	calls := uint64(0)
	counts := func() (RPCCounts, error) { calls++; return RPCCounts{"NULL": {Calls: calls}}, nil }
	libRounds(ctx, p, ws, kern, lib, local, counts, t.Logf, func(what string, err error) {
		fails = append(fails, fmt.Sprintf("%s: %v", what, err))
	}, func(vals [][2][]libSample) { rounds++; m = libMatrixOf(ws, vals) })
	if len(fails) > 0 {
		t.Fatalf("failures:\n%s", strings.Join(fails, "\n"))
	}
	if rounds != p.Rounds {
		t.Errorf("%d checkpoints, want %d", rounds, p.Rounds)
	}
	if want := 2 * p.Rounds * 3; colds != want {
		t.Errorf("%d cold preparations, want %d (3 cold rows)", colds, want)
	}
	if len(m.Rows) != 2*2*len(p.Goroutines)+6 {
		t.Errorf("%d rows", len(m.Rows))
	}
	for _, x := range m.Rows {
		if x.Ratio <= 0 || len(x.Rounds) != p.Rounds {
			t.Errorf("row %s: ratio %v over %d rounds", x.Name, x.Ratio, len(x.Rounds))
		}
		// Each run counted one call between its two readings.
		for side := range 2 {
			if x.RPCs[side]["NULL"] <= 0 || x.RPCTotal[side] != x.RPCs[side]["NULL"] || x.Per == "" {
				t.Errorf("row %s side %d: RPCs %v total %v per %q", x.Name, side, x.RPCs[side], x.RPCTotal[side], x.Per)
			}
		}
	}
	// The delete rows removed what the create rows made; the copies in
	// are there.
	for _, k := range libKeys {
		if _, err := os.Stat(filepath.Join(exp, k, "r1", "sf")); !os.IsNotExist(err) {
			t.Errorf("%s: the small files' directory is still there (%v)", k, err)
		}
		if err := sameTree(filepath.Join(local, "tree"), filepath.Join(exp, k, "r1", "tree")); err != nil {
			t.Errorf("%s: the tree copied in: %v", k, err)
		}
	}
}

func TestParseNFSDProc3(t *testing.T) {
	text := "rc 0 10 20\nproc3 22 1 2 0 5 0 0 7 8 0 0 0 0 0 0 0 0 0 3 0 1 0 4\nproc4 2 0 0\n"
	c, err := ParseNFSDProc3(text)
	if err != nil {
		t.Fatal(err)
	}
	want := RPCCounts{"NULL": {Calls: 1}, "GETATTR": {Calls: 2}, "LOOKUP": {Calls: 5}, "READ": {Calls: 7}, "WRITE": {Calls: 8},
		"READDIRPLUS": {Calls: 3}, "FSINFO": {Calls: 1}, "COMMIT": {Calls: 4}}
	if fmt.Sprint(c) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", c, want)
	}
	for _, bad := range []string{"rc 0\n", "proc3 22 1 2 3\n", "proc3 2 1 x\n"} {
		if _, err := ParseNFSDProc3(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
