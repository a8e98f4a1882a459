// Package bench runs the test bed's benchmarks inside the guest and
// reports them: perftest (the RDMA ceiling), fio on the kernel's own
// NFSv3/RDMA client, and nfsrdma's own figures beside them (Guest.Compare),
// each measured right after its reference in several rounds, because the
// guest's CPUs are threads of a shared host whose load changes by the
// second. Figures from one guest run are comparable; absolute numbers from
// the emulated bed are not: every CPU of the guest is emulated.
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
	// Rounds are the values of a figure measured once per round of a
	// paired run (Value is their median).
	Rounds []float64 `json:"rounds,omitempty"`
}

// Ratio is one figure of this project against a reference measured in the
// same guest run: Value is always ours/theirs. When Better is "higher" the
// target is a floor (throughput: 0.9 means at least 90% of the reference);
// when it is "lower" the target is a ceiling (latency: 1.2 means at most
// 20% slower than the reference).
type Ratio struct {
	Name   string  `json:"name"`
	Ours   string  `json:"ours"`
	Theirs string  `json:"theirs"`
	Value  float64 `json:"ratio"`
	Target float64 `json:"target,omitempty"`
	Better string  `json:"better"` // "higher" or "lower"
	Met    bool    `json:"met"`    // Value is on the right side of Target (true without a target)
	// Rounds are the ratios within each round when both figures were
	// measured in the same rounds; Value is then their median.
	Rounds []float64 `json:"rounds,omitempty"`
}

// Miss says by how much a ratio misses its target, as a fraction of the
// target (0.25: 25% short of a floor, or 25% over a ceiling); 0 when met.
func (x Ratio) Miss() float64 {
	if x.Met || x.Target == 0 {
		return 0
	}
	if x.Better == "lower" {
		return x.Value/x.Target - 1
	}
	return 1 - x.Value/x.Target
}

// Report is a guest run's results.
type Report struct {
	When   time.Time `json:"when"`
	Kernel string    `json:"kernel"`
	// Accel is how qemu ran the guest: "TCG" or "KVM", with what decided
	// it (set by the host; empty in reports from before it was recorded,
	// all TCG).
	Accel    string    `json:"accel,omitempty"`
	Measures []Measure `json:"measures"`
	// Matrix is the workload matrix: the kernel's mount against
	// nfsrdma-mount (Guest.Matrix).
	Matrix []MatrixRow `json:"matrix,omitempty"`
	// LibMatrix is the library matrix: a Go program's work with the
	// library against the same with os on the kernel's mount
	// (Guest.LibMatrix).
	LibMatrix *LibMatrix `json:"library_matrix,omitempty"`
	Ratios    []Ratio    `json:"ratios,omitempty"`
	Notes     []string   `json:"notes,omitempty"` // context for the figures (transport counters, settings)
	Errors    []string   `json:"errors,omitempty"`
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

// Note records a line of context.
func (r *Report) Note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// AddRatio records ours/theirs when both figures exist; better is "higher"
// or "lower" and says which side of target (0: none) is met.
func (r *Report) AddRatio(name string, ours, theirs [2]string, better string, target float64) {
	a, ok1 := r.Find(ours[0], ours[1])
	b, ok2 := r.Find(theirs[0], theirs[1])
	if !ok1 || !ok2 || a.Value == 0 || b.Value == 0 {
		var missing []string
		if !ok1 || a.Value == 0 {
			missing = append(missing, ours[0]+" "+ours[1])
		}
		if !ok2 || b.Value == 0 {
			missing = append(missing, theirs[0]+" "+theirs[1])
		}
		r.Errors = append(r.Errors, fmt.Sprintf("ratio %s: missing figure %s", name, strings.Join(missing, ", ")))
		return
	}
	v := a.Value / b.Value
	// Paired rounds: each round's two figures shared the host's load, so
	// the median of the per-round ratios is the better estimate.
	var rounds []float64
	if len(a.Rounds) > 1 && len(a.Rounds) == len(b.Rounds) {
		for i := range a.Rounds {
			if b.Rounds[i] != 0 {
				rounds = append(rounds, a.Rounds[i]/b.Rounds[i])
			}
		}
		if len(rounds) == len(a.Rounds) {
			v = median(rounds)
		} else {
			rounds = nil
		}
	}
	met := true
	switch {
	case target == 0:
	case better == "lower":
		met = v <= target
	default:
		met = v >= target
	}
	r.Ratios = append(r.Ratios, Ratio{Name: name, Ours: ours[0] + " " + ours[1], Theirs: theirs[0] + " " + theirs[1],
		Value: v, Target: target, Better: better, Met: met, Rounds: rounds})
}

// median is the middle of vals (the mean of the middle two for an even
// count).
func median(vals []float64) float64 {
	v := append([]float64(nil), vals...)
	sort.Float64s(v)
	n := len(v)
	if n == 0 {
		return 0
	}
	if n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[n/2]
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
	accel := "TCG-emulated guest"
	if r.Accel != "" {
		accel = "Guest on " + r.Accel
	}
	fmt.Fprintf(w, "%s, 2 vCPUs, rxe0 on dummy0 (MTU 9000): compare only figures from the same run.\n", accel)
	fmt.Fprintln(w)
	h := "##" // the level of the measures' and ratios' headings
	if len(r.Matrix) > 0 || r.LibMatrix != nil {
		h = "###"
		if len(r.Matrix) > 0 {
			writeMatrix(w, r.Matrix)
		}
		r.WriteLibMatrix(w)
		if len(r.Measures) > 0 {
			fmt.Fprintf(w, "## The library and the transport beside their references\n\n")
		}
	}
	groups := map[string][]Measure{}
	var order []string
	for _, m := range r.Measures {
		if _, ok := groups[m.Group]; !ok {
			order = append(order, m.Group)
		}
		groups[m.Group] = append(groups[m.Group], m)
	}
	for _, g := range order {
		fmt.Fprintf(w, "%s %s\n\n| measure | value | unit | note |\n|---|---:|---|---|\n", h, g)
		for _, m := range groups[g] {
			fmt.Fprintf(w, "| %s | %.2f | %s | %s |\n", m.Name, m.Value, m.Unit, m.Note)
		}
		fmt.Fprintln(w)
	}
	if len(r.Ratios) > 0 {
		fmt.Fprintf(w, "%s Ratios (ours/reference)\n\nWith paired rounds, a ratio is the median of the rounds' own ratios.\n\n"+
			"| ratio | value | target | met | rounds | ours | reference |\n|---|---:|---:|---|---|---|---|\n", h)
		rs := append([]Ratio(nil), r.Ratios...)
		sort.SliceStable(rs, func(i, j int) bool { return rs[i].Name < rs[j].Name })
		for _, x := range rs {
			t, met := "", ""
			if x.Target > 0 {
				op := ">="
				if x.Better == "lower" {
					op = "<="
				}
				t = fmt.Sprintf("%s %.2fx", op, x.Target)
				met = "yes"
				if !x.Met {
					met = fmt.Sprintf("no (%.0f%% off)", 100*x.Miss())
				}
			}
			rs := make([]string, len(x.Rounds))
			for i, v := range x.Rounds {
				rs[i] = fmt.Sprintf("%.2f", v)
			}
			fmt.Fprintf(w, "| %s | %.2fx | %s | %s | %s | %s | %s |\n", x.Name, x.Value, t, met, strings.Join(rs, " "), x.Ours, x.Theirs)
		}
		fmt.Fprintln(w)
	}
	if len(r.Notes) > 0 {
		fmt.Fprintf(w, "## Notes\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(w, "- %s\n", strings.ReplaceAll(n, "\n", " "))
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
