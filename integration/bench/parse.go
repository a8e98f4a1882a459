package bench

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParsePerftestBW reads the average bandwidth (MB/s, as perftest prints
// without --report_gbits; MB = 2^20 bytes) from ib_{write,read,send}_bw
// output.
func ParsePerftestBW(out string) (mbps float64, err error) {
	hdr := -1
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if f[0] == "#bytes" {
			for i, c := range f {
				if strings.HasPrefix(c, "BW") && strings.Contains(c, "average") {
					hdr = i
				}
			}
			// "BW average[MB/sec]" is two fields: find by joined header.
			if hdr < 0 {
				hdr = 3
			}
			continue
		}
		if hdr >= 0 && len(f) > 3 {
			if _, err := strconv.Atoi(f[0]); err == nil {
				return strconv.ParseFloat(f[3], 64)
			}
		}
	}
	return 0, fmt.Errorf("bench: no bandwidth line in perftest output:\n%s", out)
}

// ParsePerftestLat reads t_typical and t_avg (µs) from ib_*_lat output.
func ParsePerftestLat(out string) (typical, avg float64, err error) {
	seen := false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if f[0] == "#bytes" {
			seen = true
			continue
		}
		if seen && len(f) >= 6 {
			if _, err := strconv.Atoi(f[0]); err == nil {
				typical, err1 := strconv.ParseFloat(f[4], 64)
				avg, err2 := strconv.ParseFloat(f[5], 64)
				if err1 != nil || err2 != nil {
					return 0, 0, fmt.Errorf("bench: bad latency line %q", line)
				}
				return typical, avg, nil
			}
		}
	}
	return 0, 0, fmt.Errorf("bench: no latency line in perftest output:\n%s", out)
}

// FioResult is what the bed reads from fio's JSON output.
type FioResult struct {
	ReadMiBps, WriteMiBps float64
	ReadIOPS, WriteIOPS   float64
	IOs                   int64 // I/Os completed, reads and writes
	Errors                int
}

// ParseFio reads fio --output-format=json output (all jobs summed).
func ParseFio(out []byte) (FioResult, error) {
	var doc struct {
		Jobs []struct {
			Error int `json:"error"`
			Read  struct {
				BW   float64 `json:"bw"` // KiB/s
				IOPS float64 `json:"iops"`
				IOs  int64   `json:"total_ios"`
			} `json:"read"`
			Write struct {
				BW   float64 `json:"bw"`
				IOPS float64 `json:"iops"`
				IOs  int64   `json:"total_ios"`
			} `json:"write"`
		} `json:"jobs"`
	}
	if err := unmarshalFio(out, &doc); err != nil {
		return FioResult{}, err
	}
	if len(doc.Jobs) == 0 {
		return FioResult{}, fmt.Errorf("bench: fio reported no jobs")
	}
	var r FioResult
	for _, j := range doc.Jobs {
		r.ReadMiBps += j.Read.BW / 1024
		r.WriteMiBps += j.Write.BW / 1024
		r.ReadIOPS += j.Read.IOPS
		r.WriteIOPS += j.Write.IOPS
		r.IOs += j.Read.IOs + j.Write.IOs
		if j.Error != 0 {
			r.Errors++
		}
	}
	return r, nil
}

// FioLatency is a job's completion latency, submission included (fio's
// lat_ns with lat_percentiles=1), over its reads and writes.
type FioLatency struct {
	Median, Mean time.Duration
}

// ParseFioLatency reads the first job's total latency from fio's JSON
// output of a job run with --lat_percentiles=1.
func ParseFioLatency(out []byte) (FioLatency, error) {
	type lat struct {
		N          int64              `json:"N"`
		Mean       float64            `json:"mean"`
		Percentile map[string]float64 `json:"percentile"`
	}
	var doc struct {
		Jobs []struct {
			Error int `json:"error"`
			Read  struct {
				Lat lat `json:"lat_ns"`
			} `json:"read"`
			Write struct {
				Lat lat `json:"lat_ns"`
			} `json:"write"`
		} `json:"jobs"`
	}
	if err := unmarshalFio(out, &doc); err != nil {
		return FioLatency{}, err
	}
	if len(doc.Jobs) == 0 {
		return FioLatency{}, fmt.Errorf("bench: fio reported no jobs")
	}
	j := doc.Jobs[0]
	if j.Error != 0 {
		return FioLatency{}, fmt.Errorf("bench: fio job error %d", j.Error)
	}
	l := j.Read.Lat
	if l.N == 0 {
		l = j.Write.Lat
	}
	med, ok := l.Percentile["50.000000"]
	if l.N == 0 || !ok {
		return FioLatency{}, fmt.Errorf("bench: fio reported no latency percentiles (run with --lat_percentiles=1)")
	}
	return FioLatency{Median: time.Duration(med), Mean: time.Duration(l.Mean)}, nil
}

// unmarshalFio decodes fio's JSON output into doc, past the warnings fio
// may print before it.
func unmarshalFio(out []byte, doc any) error {
	if i := strings.IndexByte(string(out), '{'); i > 0 {
		out = out[i:]
	}
	if err := json.Unmarshal(out, doc); err != nil {
		return fmt.Errorf("bench: fio JSON: %w", err)
	}
	return nil
}
