// Package bench runs the test bed's benchmarks inside the guest and
// reports them: perftest (the RDMA ceiling), fio on the kernel's own
// NFSv3/RDMA client, and nfsrdma's own figures beside them. Figures from
// one guest run are comparable; absolute numbers from the emulated bed are
// not (shared/TESTBED.md).
package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// Measure is one benchmark figure.
type Measure struct {
	Group string  `json:"group"` // "perftest", "kernel-nfs-rdma", "nfsrdma", ...
	Name  string  `json:"name"`  // e.g. "ib_write_bw 64KiB", "seq-read 1MiB qd16"
	Value float64 `json:"value"`
	Unit  string  `json:"unit"` // "MiB/s", "Gb/s", "IOPS", "us"
	Note  string  `json:"note,omitempty"`
}

// Ratio is one figure of this project against a reference measured in the
// same guest run.
type Ratio struct {
	Name   string  `json:"name"`
	Ours   string  `json:"ours"`
	Theirs string  `json:"theirs"`
	Value  float64 `json:"ratio"`
	Target float64 `json:"target,omitempty"`
	Better string  `json:"better"` // "higher" or "lower"
}

// Report is a guest run's results.
type Report struct {
	When     time.Time `json:"when"`
	Kernel   string    `json:"kernel"`
	Measures []Measure `json:"measures"`
	Ratios   []Ratio   `json:"ratios,omitempty"`
	Errors   []string  `json:"errors,omitempty"`
}

// Add records a figure.
func (r *Report) Add(m Measure) { r.Measures = append(r.Measures, m) }

// Find returns the figure group/name.
func (r *Report) Find(group, name string) (Measure, bool) {
	for _, m := range r.Measures {
		if m.Group == group && m.Name == name {
			return m, true
		}
	}
	return Measure{}, false
}

// AddRatio records ours/theirs (or theirs/ours when lower is better) when
// both figures exist.
func (r *Report) AddRatio(name string, ours, theirs [2]string, better string, target float64) {
	a, ok1 := r.Find(ours[0], ours[1])
	b, ok2 := r.Find(theirs[0], theirs[1])
	if !ok1 || !ok2 || a.Value == 0 || b.Value == 0 {
		r.Errors = append(r.Errors, fmt.Sprintf("ratio %s: missing figure", name))
		return
	}
	v := a.Value / b.Value
	if better == "lower" {
		v = b.Value / a.Value
	}
	r.Ratios = append(r.Ratios, Ratio{Name: name, Ours: ours[0] + " " + ours[1], Theirs: theirs[0] + " " + theirs[1], Value: v, Target: target, Better: better})
}

// WriteJSON writes the report as JSON.
func (r *Report) WriteJSON(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// ReadJSON reads a report.
func ReadJSON(path string) (*Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("bench: %s: %w", path, err)
	}
	return &r, nil
}

// WriteMarkdown writes the report as Markdown tables.
func (r *Report) WriteMarkdown(w io.Writer) {
	fmt.Fprintf(w, "# Test-bed benchmarks (%s, guest kernel %s)\n\n", r.When.Format(time.RFC3339), r.Kernel)
	fmt.Fprintln(w, "TCG-emulated guest, 2 vCPUs, rxe0 on dummy0 (MTU 9000): compare only figures from the same run.")
	fmt.Fprintln(w)
	groups := map[string][]Measure{}
	var order []string
	for _, m := range r.Measures {
		if _, ok := groups[m.Group]; !ok {
			order = append(order, m.Group)
		}
		groups[m.Group] = append(groups[m.Group], m)
	}
	for _, g := range order {
		fmt.Fprintf(w, "## %s\n\n| measure | value | unit |\n|---|---:|---|\n", g)
		for _, m := range groups[g] {
			fmt.Fprintf(w, "| %s | %.2f | %s |\n", m.Name, m.Value, m.Unit)
		}
		fmt.Fprintln(w)
	}
	if len(r.Ratios) > 0 {
		fmt.Fprintf(w, "## Ratios\n\n| ratio | value | target | ours | reference |\n|---|---:|---:|---|---|\n")
		rs := append([]Ratio(nil), r.Ratios...)
		sort.SliceStable(rs, func(i, j int) bool { return rs[i].Name < rs[j].Name })
		for _, x := range rs {
			t := ""
			if x.Target > 0 {
				t = fmt.Sprintf("%.2fx", x.Target)
			}
			fmt.Fprintf(w, "| %s | %.2fx | %s | %s | %s |\n", x.Name, x.Value, t, x.Ours, x.Theirs)
		}
		fmt.Fprintln(w)
	}
	if len(r.Errors) > 0 {
		fmt.Fprintf(w, "## Errors\n\n")
		for _, e := range r.Errors {
			fmt.Fprintf(w, "- %s\n", strings.ReplaceAll(e, "\n", " "))
		}
	}
}
