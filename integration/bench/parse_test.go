package bench

import (
	"math"
	"strings"
	"testing"
	"time"
)

const writeBW = `
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF		Device         : rxe0
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 65536      5000             23.10              22.87  		   0.000366
---------------------------------------------------------------------------------------
`

const sendLat = `
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 2       1000          41.20          310.55       55.13    	       60.02       	11.03  		98.22   		310.55  
`

func TestParsePerftest(t *testing.T) {
	bw, err := ParsePerftestBW(writeBW)
	if err != nil || bw != 22.87 {
		t.Fatalf("bw = %v, %v; want 22.87", bw, err)
	}
	typ, avg, err := ParsePerftestLat(sendLat)
	if err != nil || typ != 55.13 || avg != 60.02 {
		t.Fatalf("lat = %v %v %v", typ, avg, err)
	}
	if _, err := ParsePerftestBW("Couldn't connect to 10.99.0.1:18515"); err == nil {
		t.Fatal("garbage parsed as a result")
	}
	if _, _, err := ParsePerftestLat(writeBW); err == nil {
		t.Fatal("bw output parsed as latency")
	}
}

func TestParseFio(t *testing.T) {
	out := []byte(`note: both iodepth >= 1 and synchronous I/O engine are selected
{"jobs":[{"error":0,"read":{"bw":16384,"iops":16.0},"write":{"bw":0,"iops":0}},
{"error":0,"read":{"bw":8192,"iops":8.0},"write":{"bw":0,"iops":0}}]}`)
	r, err := ParseFio(out)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(r.ReadMiBps-24) > 1e-9 || r.ReadIOPS != 24 || r.Errors != 0 {
		t.Fatalf("%+v", r)
	}
	if _, err := ParseFio([]byte(`{"jobs":[]}`)); err == nil {
		t.Fatal("empty job list accepted")
	}
}

func TestRatio(t *testing.T) {
	var r Report
	r.Add(Measure{Group: "a", Name: "x", Value: 10})
	r.Add(Measure{Group: "b", Name: "x", Value: 20})
	r.AddRatio("higher", [2]string{"a", "x"}, [2]string{"b", "x"}, "higher", 0.9)
	r.AddRatio("lower", [2]string{"a", "x"}, [2]string{"b", "x"}, "lower", 1.2)
	r.AddRatio("lower-missed", [2]string{"b", "x"}, [2]string{"a", "x"}, "lower", 1.2)
	r.AddRatio("missing", [2]string{"a", "y"}, [2]string{"b", "x"}, "lower", 1)
	if len(r.Ratios) != 3 || len(r.Errors) != 1 {
		t.Fatalf("%+v", r)
	}
	for i, want := range []struct {
		value float64
		met   bool
		miss  float64
	}{
		{0.5, false, 1 - 0.5/0.9}, // ours/theirs, below the 0.9 floor
		{0.5, true, 0},            // lower is better: half the reference
		{2, false, 2/1.2 - 1},     // twice the reference, over the 1.2 ceiling
	} {
		x := r.Ratios[i]
		if x.Value != want.value || x.Met != want.met || math.Abs(x.Miss()-want.miss) > 1e-9 {
			t.Errorf("ratio %s = %+v (miss %v), want %+v", x.Name, x, x.Miss(), want)
		}
	}
	// Paired rounds: the median of the per-round ratios, not the ratio of
	// the medians.
	r.Add(Measure{Group: "a", Name: "paired", Value: 2, Rounds: []float64{1, 2, 9}})
	r.Add(Measure{Group: "b", Name: "paired", Value: 4, Rounds: []float64{1, 4, 3}})
	r.AddRatio("paired", [2]string{"a", "paired"}, [2]string{"b", "paired"}, "higher", 0.9)
	if x := r.Ratios[3]; x.Value != 1 || len(x.Rounds) != 3 || x.Rounds[2] != 3 {
		t.Errorf("paired ratio %+v, want the median of 1, 0.5, 3", x)
	}
	var md strings.Builder
	r.WriteMarkdown(&md)
	for _, s := range []string{"| higher | 0.50x | >= 0.90x | no (44% off) |  |", "| lower | 0.50x | <= 1.20x | yes |  |", "missing figure a y", "| paired | 1.00x | >= 0.90x | yes | 1.00 0.50 3.00 |"} {
		if !strings.Contains(md.String(), s) {
			t.Errorf("Markdown lacks %q:\n%s", s, md.String())
		}
	}
}

func TestParseFioLatency(t *testing.T) {
	out := `fio: a warning first
{"jobs": [{"jobname": "lat", "error": 0,
  "read": {"io_bytes": 4096, "lat_ns": {"min": 900, "max": 90000, "mean": 1500.5, "N": 1000,
    "percentile": {"1.000000": 1000, "50.000000": 1200, "99.000000": 80000}}},
  "write": {"io_bytes": 0, "lat_ns": {"min": 0, "max": 0, "mean": 0, "N": 0}}}]}`
	l, err := ParseFioLatency([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if l.Median != 1200*time.Nanosecond || l.Mean != 1500*time.Nanosecond {
		t.Errorf("got %+v, want median 1.2µs, mean 1.5µs", l)
	}
	// Without --lat_percentiles there is no median: an error, not a zero.
	if _, err := ParseFioLatency([]byte(`{"jobs": [{"read": {"lat_ns": {"mean": 5, "N": 3}}}]}`)); err == nil {
		t.Error("no percentiles: want an error")
	}
	if _, err := ParseFioLatency([]byte(`{"jobs": []}`)); err == nil {
		t.Error("no jobs: want an error")
	}
}
