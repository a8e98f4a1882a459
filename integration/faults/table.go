// Package faults is the machinery of the fault suite (integration's
// TestFaults*): a results table of fault × workload, a ledger of what the
// workloads wrote with its checksums and the check of it against the
// server's copy, progress meters that time a recovery, snapshots of the
// resources a client holds, and a driver that injects faults at random.
//
// A fault is one Fault value (a name and an Inject function), so a new kind
// of fault (a device removal, say) is one more entry in the driver's list
// and one more row per workload in the table.
package faults

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// Row is one fault × workload measurement.
type Row struct {
	Fault    string // what was injected, e.g. "knfsd restart"
	Workload string // e.g. "library WRITE stream (Read chunks)"
	Ops      int64  // operations the workload completed
	Bytes    int64  // bytes checked byte for byte (written and read back, or read and compared)
	// Errors the application saw: expected (soft timeouts, ENOSPC,
	// ENOTCONN of a killed mount) and unexpected (anything else).
	Expected, Unexpected int
	Errors               string        // the distinct errors, briefly
	Recovery             time.Duration // fault injected → first operation completed after it; 0: none measured
	Resources            string        // resource deltas after recovery, "" when not measured
	Faults               int           // how many times the fault was injected (soak)
	Pass                 bool
}

// Table collects rows and writes them as Markdown.
type Table struct {
	mu    sync.Mutex
	title string
	path  string // written after every Add; "" keeps it in memory
	rows  []Row
	notes []string
}

// NewTable returns a table written to path (created with its directory)
// after every row, so that a run cut short still leaves what it measured.
func NewTable(title, path string) *Table { return &Table{title: title, path: path} }

// Add adds a row and rewrites the file.
func (t *Table) Add(r Row) error {
	t.mu.Lock()
	t.rows = append(t.rows, r)
	t.mu.Unlock()
	return t.flush()
}

// Note adds a line under the table.
func (t *Table) Note(format string, args ...any) error {
	t.mu.Lock()
	t.notes = append(t.notes, fmt.Sprintf(format, args...))
	t.mu.Unlock()
	return t.flush()
}

// Rows returns a copy of the rows.
func (t *Table) Rows() []Row {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Row(nil), t.rows...)
}

func (t *Table) flush() error {
	if t.path == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(t.path), 0o755); err != nil {
		return err
	}
	tmp := t.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(t.Markdown()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, t.path)
}

// Markdown renders the table.
func (t *Table) Markdown() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", t.title)
	b.WriteString("| fault | workload | ops | bytes verified | errors expected | errors unexpected | recovery | resource deltas | result |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|---|---|\n")
	for _, r := range t.rows {
		fault := r.Fault
		if r.Faults > 1 {
			fault = fmt.Sprintf("%s (×%d)", r.Fault, r.Faults)
		}
		rec := "–"
		if r.Recovery > 0 {
			rec = r.Recovery.Round(10 * time.Millisecond).String()
		}
		res := r.Resources
		if res == "" {
			res = "–"
		}
		unexp := fmt.Sprint(r.Unexpected)
		if r.Errors != "" {
			unexp += " (" + r.Errors + ")"
		}
		result := "pass"
		if !r.Pass {
			result = "**FAIL**"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %d | %s | %s | %s | %s |\n",
			esc(fault), esc(r.Workload), r.Ops, HumanBytes(r.Bytes), r.Expected, esc(unexp), rec, esc(res), result)
	}
	if len(t.notes) > 0 {
		b.WriteString("\n")
		for _, n := range t.notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

func esc(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// HumanBytes formats a byte count in binary units.
func HumanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// ErrorSet counts distinct error messages.
type ErrorSet struct {
	mu sync.Mutex
	m  map[string]int
}

// Add counts err (nil is ignored).
func (s *ErrorSet) Add(err error) {
	if err == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]int{}
	}
	msg := err.Error()
	if len(msg) > 80 {
		msg = msg[:80] + "…"
	}
	s.m[msg]++
}

// Len is the number of errors counted.
func (s *ErrorSet) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.m {
		n += c
	}
	return n
}

// String lists the distinct errors with their counts.
func (s *ErrorSet) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var parts []string
	for msg, c := range s.m {
		parts = append(parts, fmt.Sprintf("%d× %s", c, msg))
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}
