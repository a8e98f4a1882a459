package bench

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"image/png"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const mountstats = `device rootfs mounted on / with fstype rootfs
device 10.99.0.1:/export mounted on /mnt/other with fstype nfs statvers=1.1
	opts:	rw,vers=3
	per-op statistics
	        NULL: 1 1 0 40 24 0 0 0 0
	        READ: 999 999 0 0 0 0 0 0 0

device 10.99.0.1:/export mounted on /mnt/bench-kernel with fstype nfs statvers=1.1
	opts:	rw,vers=3,rsize=1048576,wsize=1048576,namlen=255,acregmin=3,proto=rdma,port=20049
	age:	12
	caps:	caps=0x3fc7,wtmult=512,dtsize=1048576,bsize=0,namlen=255
	sec:	flavor=1,pseudoflavor=1
	events:	0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26
	bytes:	0 0 0 0 0 0 0 0
	RPC iostats version: 1.1  p/v: 100003/3 (nfs)
	xprt:	rdma 0 0 1 0 0 3 3 0 3 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
	per-op statistics
	        NULL: 1 1 0 40 24 0 0 0 0
	     GETATTR: 3 3 0 312 336 0 1 1 0
	     SETATTR: 0 0 0 0 0 0 0 0 0
	      LOOKUP: 12 12 0 1400 2200 0 5 6 2
	 READDIRPLUS: 2 2 0 200 9000 0 3 3 0

device proc mounted on /proc with fstype proc
`

const ourStats = `device 10.99.0.1:/export mounted on /mnt/bench-ours with fstype fuse.nfsrdma
	opts:	proto=rdma,vers=3
	age:	3
	pid:	123
	caps:	rsize=1048576,wsize=1048576
	xprt:	rdma 10.99.0.1:20049 calls 20 replies 20
	nfsrdma-fuse:	LOOKUP 7 20 MKDIR 3 900 GETATTR 2 5
	per-op statistics
	     GETATTR: calls 4 errors 0 timeouts 0 sent 400 recv 500 rtt_mean 100µs rtt_max 200µs hist <128µs:3 <256µs:1
	      LOOKUP: calls 10 errors 1 timeouts 0 sent 1000 recv 1000 rtt_mean 90µs rtt_max 100µs hist <128µs:10
	     MOUNT/1: calls 1 errors 0 timeouts 0 sent 10 recv 10 rtt_mean 90µs rtt_max 100µs hist <128µs:1
`

func TestParseMountstats(t *testing.T) {
	c, err := ParseMountstats(mountstats, "/mnt/bench-kernel")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"NULL": 1, "GETATTR": 3, "SETATTR": 0, "LOOKUP": 12, "READDIRPLUS": 2}
	if len(c) != len(want) {
		t.Fatalf("counts %v, want %v", c, want)
	}
	for op, n := range want {
		if c[op].Calls != n {
			t.Errorf("%s = %d, want %d", op, c[op].Calls, n)
		}
	}
	if c["LOOKUP"].Sent != 1400 || c["LOOKUP"].Recv != 2200 {
		t.Errorf("LOOKUP bytes: %+v", c["LOOKUP"])
	}
	if _, err := ParseMountstats(mountstats, "/mnt/none"); err == nil {
		t.Error("a mount that is not there parsed")
	}
	after := RPCCounts{"NULL": {Calls: 1}, "GETATTR": {Calls: 5, Sent: 512, Recv: 636}, "LOOKUP": {Calls: 12}, "READ": {Calls: 7, Recv: 7 * 4200}}
	d := after.Sub(c)
	if len(d) != 2 || d["GETATTR"] != (OpCount{2, 200, 300}) || d["READ"].Calls != 7 || d.Total() != 9 {
		t.Errorf("diff %v", d)
	}
	if d.Payload("READ") != 4200 || d.Payload("GETATTR") != 0 {
		t.Errorf("payload %v %v", d.Payload("READ"), d.Payload("GETATTR"))
	}
	if ops := d.Ops(); len(ops) != 2 || ops[0] != "READ" {
		t.Errorf("ops by count: %v", ops)
	}
}

func TestParseOurStats(t *testing.T) {
	c, err := ParseOurStats(ourStats)
	if err != nil {
		t.Fatal(err)
	}
	if len(c) != 3 || c["GETATTR"] != (OpCount{4, 400, 500}) || c["LOOKUP"].Calls != 10 || c["MOUNT/1"].Calls != 1 {
		t.Fatalf("counts %v", c)
	}
	// The mountstats layout, should the mount helper take it up.
	ms := strings.Replace(mountstats, "/mnt/bench-kernel with fstype nfs", "/mnt/bench-ours with fstype fuse.nfsrdma", 1)
	c, err = ParseOurStats(ms[strings.Index(ms, "device 10.99.0.1:/export mounted on /mnt/bench-ours"):])
	if err != nil || c["LOOKUP"].Calls != 12 || c["READDIRPLUS"].Calls != 2 {
		t.Fatalf("mountstats layout: %v, %v", c, err)
	}
	// A mount with no call yet.
	c, err = ParseOurStats("device x mounted on /m with fstype fuse.nfsrdma\n\tper-op statistics\n")
	if err != nil || len(c) != 0 {
		t.Fatalf("empty: %v, %v", c, err)
	}
	if _, err := ParseOurStats("error: no server"); err == nil {
		t.Error("garbage parsed")
	}
}

func TestParseOurFUSE(t *testing.T) {
	c, err := ParseOurFUSE(ourStats)
	if err != nil || len(c) != 3 || c["LOOKUP"] != 7 || c["MKDIR"] != 3 || c["GETATTR"] != 2 {
		t.Fatalf("FUSE requests %v, %v", c, err)
	}
	before := FUSECounts{"LOOKUP": 5, "MKDIR": 3}
	if d := c.Sub(before); len(d) != 2 || d["LOOKUP"] != 2 || d["GETATTR"] != 2 {
		t.Errorf("diff %v", d)
	}
	if c, err := ParseOurFUSE("device x mounted on /m with fstype fuse.nfsrdma\n"); err != nil || len(c) != 0 {
		t.Errorf("no FUSE line: %v, %v", c, err)
	}
	if _, err := ParseOurFUSE("\tnfsrdma-fuse:\tLOOKUP 7\n"); err == nil {
		t.Error("a cut FUSE line parsed")
	}
}

func TestBuildRows(t *testing.T) {
	tput := &workload{group: MatrixFioDirect, name: "rand-read 4KiB qd16", unit: "IOPS", per: "I/O", target: 1.0}
	tm := &workload{group: MatrixSmallFiles, name: "create", unit: "s", per: "file"}
	s := func(v float64, units int64, rpcs RPCCounts) *sample {
		return &sample{value: v, units: units, rpcs: rpcs}
	}
	cells := []*cell{
		{w: tput,
			kernel: []*sample{s(100, 500, RPCCounts{"READ": {500, 0, 500 * 4096}}), s(200, 1000, RPCCounts{"READ": {1000, 0, 1000 * 4096}}), s(100, 500, RPCCounts{"READ": {500, 0, 500 * 4096}})},
			ours:   []*sample{s(50, 250, RPCCounts{"READ": {250, 0, 250 << 20}, "GETATTR": {Calls: 250}}), s(300, 1500, RPCCounts{"READ": {1500, 0, 1500 << 20}}), nil}},
		{w: tm,
			kernel: []*sample{s(10, 100, nil), s(10, 100, nil), s(10, 100, nil)},
			ours:   []*sample{{value: 5, units: 100, fuse: FUSECounts{"MKDIR": 100, "LOOKUP": 100}}, s(20, 100, nil), {value: 10, units: 100, fuse: FUSECounts{"MKDIR": 100, "GETATTR": 100}}},
			floor:  []*sample{s(20, 100, nil), nil, s(8, 100, nil)}},
		{w: &workload{group: MatrixNconnect, name: "nc", unit: "MiB/s"}, kernel: []*sample{s(1, 1, nil)}, ours: []*sample{nil}, unsupported: "not supported"},
	}
	rows := buildRows(cells, &mclient{name: "kernel"}, &mclient{name: "nfsrdma-mount"})
	r := rows[0]
	// Rounds 1 and 2 only (round 3 failed on ours): 0.5 and 1.5.
	if len(r.Rounds) != 2 || r.Ratio != 1.0 || r.Min != 0.5 || r.Max != 1.5 || !r.Met || r.Better != "higher" {
		t.Errorf("throughput row: %+v", r)
	}
	if r.RPCs[0].Total != 1 || r.RPCs[1].PerOp["GETATTR"] != 250.0/1750 || r.RPCs[1].Units != 1500 {
		t.Errorf("RPCs: %+v", r.RPCs)
	}
	if rows[0].FUSE != nil {
		t.Errorf("FUSE requests without counts: %v", rows[0].FUSE)
	}
	// Rounds 1 and 3 counted them: 400 requests for 200 units.
	if f := rows[1].FUSE; rows[1].FUSETotal != 2 || f["MKDIR"] != 1 || f["LOOKUP"] != 0.5 || f["GETATTR"] != 0.5 {
		t.Errorf("FUSE requests per unit: %v (total %v)", f, rows[1].FUSETotal)
	}
	r = rows[1]
	// Times: kernel/ours, so 2, 0.5, 1; the median is 1.
	if len(r.Rounds) != 3 || r.Rounds[0] != 2 || r.Rounds[1] != 0.5 || r.Ratio != 1 || r.Better != "lower" || r.Target != 0.8 || !r.Met {
		t.Errorf("time row: %+v", r)
	}
	// The floor against the kernel, rounds 1 and 3: 0.5 and 1.25.
	if r.FloorRatio != 0.875 || len(r.Floor) != 3 || r.Floor[1] != 0 || r.FloorMedian() != 14 {
		t.Errorf("floor: %v %v", r.FloorRatio, r.Floor)
	}
	if rows[0].FloorRatio != 0 || rows[0].Floor != nil {
		t.Errorf("a row without the floor has one: %+v", rows[0])
	}
	if rows[2].Ratio != 0 || rows[2].Unsupprt == "" {
		t.Errorf("unsupported row: %+v", rows[2])
	}
	if gm, n := GeoMean(rows); n != 2 || gm != 1 {
		t.Errorf("geomean %v over %d", gm, n)
	}

	rep := &Report{Matrix: rows}
	var md strings.Builder
	rep.WriteMarkdown(&md)
	for _, want := range []string{"### fio direct", "### small files", "**1.00x**", "0.50-1.50", "not supported", "READ 1.00 (4.0 KiB each)", "1500 units: READ 1500 (1.00 MiB each)",
		"FUSE floor", "| 14.0 | 0.88x |", "20.0 - 8.00", "floor's geometric mean over its 1 ratios: **0.88x**", "| 2.00/file: MKDIR 1.00, GETATTR 0.50, LOOKUP 0.50 |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	if strings.Contains(md.String(), "even the floor misses") {
		t.Error("the floor (0.88x) is above its row's target (0.8) but is listed as missing it")
	}
	path := filepath.Join(t.TempDir(), "ratios.png")
	if err := WriteChart(rows, "test", path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() < 300 || b.Dy() < 300 {
		t.Errorf("chart of %v", b)
	}
}

func TestInputsDeterministic(t *testing.T) {
	dir := t.TempDir()
	sum := func(p string) [32]byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return sha256.Sum256(b)
	}
	a, b := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar")
	for _, p := range []string{a, b} {
		if n, err := WriteSmallTarball(p, 40, 4, 4); err != nil || n != 40 {
			t.Fatal(n, err)
		}
	}
	if sum(a) != sum(b) {
		t.Error("two tarballs differ")
	}
	f, _ := os.Open(a)
	defer f.Close()
	tr := tar.NewReader(f)
	files, dirs := 0, 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeDir {
			dirs++
		} else if h.Size == 4096 {
			files++
		}
	}
	if files != 40 || dirs != 4 {
		t.Errorf("%d files of 4 KiB, %d dirs", files, dirs)
	}

	var trees [2][]byte
	for i := range trees {
		root := filepath.Join(dir, "tree", string(rune('a'+i)))
		st, err := WriteSourceTree(root, 300)
		if err != nil || st.Files != 300 {
			t.Fatal(st, err)
		}
		var buf bytes.Buffer
		n := 0
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				t.Fatal(err)
			}
			if d.Type().IsRegular() {
				data, _ := os.ReadFile(p)
				if len(data) < 1024 || len(data) > 64<<10 {
					t.Errorf("%s: %d bytes", p, len(data))
				}
				rel, _ := filepath.Rel(root, p)
				h := sha256.Sum256(data)
				buf.WriteString(rel)
				buf.Write(h[:])
				n++
			}
			return nil
		})
		if n != 300 {
			t.Errorf("%d files", n)
		}
		trees[i] = buf.Bytes()
	}
	if !bytes.Equal(trees[0], trees[1]) {
		t.Error("two trees differ")
	}
}

func TestFioArgs(t *testing.T) {
	p := DefaultMatrixPlan()
	a := strings.Join(fioSpec{rw: "randrw", bs: "4k", depth: 16, mixRead: 70, direct: true}.args("/f", p), " ")
	for _, want := range []string{"--rw=randrw", "--rwmixread=70", "--iodepth=16", "--direct=1", "--time_based", "--runtime=5", "--size=64M"} {
		if !strings.Contains(a, want) {
			t.Errorf("%s lacks %s", a, want)
		}
	}
	a = strings.Join(fioSpec{rw: "read", bs: "1M"}.args("/f", p), " ")
	if !strings.Contains(a, "--direct=0") || !strings.Contains(a, "--ioengine=psync") || strings.Contains(a, "iodepth") {
		t.Errorf("buffered job: %s", a)
	}
	ws := matrixWorkloads(p)
	if len(ws) != 24 {
		t.Errorf("%d workloads", len(ws))
	}
	seen := map[string]bool{}
	for _, w := range ws {
		if seen[w.name] {
			t.Errorf("two workloads named %s", w.name)
		}
		seen[w.name] = true
	}
}
