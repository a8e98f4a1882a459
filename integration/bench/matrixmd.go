package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// WriteMatrix writes the report's matrix as Markdown (as WriteMarkdown
// does, without the rest).
func (r *Report) WriteMatrix(w io.Writer) {
	if len(r.Matrix) > 0 {
		writeMatrix(w, r.Matrix)
	}
}

// writeMatrix writes the matrix: a summary against the targets, a table per
// group, and the RPC counts of every workload.
func writeMatrix(w io.Writer, rows []MatrixRow) {
	fmt.Fprintf(w, "## Workload matrix: nfsrdma-mount against the kernel's NFSv3/RDMA mount\n\n")
	fmt.Fprintln(w, "Ratio: above 1 means nfsrdma-mount is better (throughput ours/kernel, or time kernel/ours); it is the median")
	fmt.Fprintln(w, "of the per-round ratios, the spread their min-max. Kernel and nfsrdma-mount figures are medians of their rounds.")
	fmt.Fprintln(w, "RPCs: per unit of work (I/O, file, directory, entry, MiB), each client's own count (the kernel's from")
	fmt.Fprintln(w, "/proc/self/mountstats, nfsrdma-mount's from `nfsrdma-mount stats`), over all rounds; \"each\" is the mean size of")
	fmt.Fprintln(w, "a READ reply or a WRITE call, headers included (read amplification and small WRITEs show there).")
	fmt.Fprintln(w, "FUSE requests: nfsrdma-mount's, per unit, by kind (its `nfsrdma-fuse:` counters): each is a round trip between")
	fmt.Fprintln(w, "the application and the mount server, with or without an RPC, that the kernel client does not make.")
	hasFloor := slices.ContainsFunc(rows, func(x MatrixRow) bool { return x.FloorRatio > 0 })
	if hasFloor {
		fmt.Fprintln(w, "FUSE floor: the same work on a go-fuse loopback of the export's directory in the guest (no network, no NFS),")
		fmt.Fprintln(w, "mounted with nfsrdma-mount's FUSE settings; its ratio against the kernel mount, oriented as the others, is the")
		fmt.Fprintln(w, "most a FUSE file system reaches on that work on this bed.")
	}
	hasCost := slices.ContainsFunc(rows, func(x MatrixRow) bool { return len(x.Cost) > 0 })
	if hasCost {
		fmt.Fprintln(w, "Cost per unit (the table under each group's): what the work cost, counted, in units that carry over from the")
		fmt.Fprintln(w, "emulated bed, over all rounds, per unit of work. CPU: the guest's CPU time, all tasks (/proc/stat user+nice+system+irq+")
		fmt.Fprintln(w, "softirq, 10 ms ticks), in µs; of it the kernel threads' (kworkers running rpciod's and xprtiod's work, ksoftirqd, rxe)")
		fmt.Fprintln(w, "and nfsd's (the NFS server, in the same guest). Mount server: nfsrdma-mount's process, all threads: its run time")
		fmt.Fprintln(w, "(schedstat), its system calls (an ftrace histogram on raw_syscalls:sys_enter, installed for the whole matrix),")
		fmt.Fprintln(w, "its voluntary + involuntary context switches and its Go heap allocations (runtime/metrics via `nfsrdma-mount stats`).")
		fmt.Fprintln(w, "A change that saves work shows in these; one that only moves it shows in the ratio alone.")
	}
	fmt.Fprintln(w)
	gm, n := GeoMean(rows)
	var below []string
	for _, x := range rows {
		if x.Ratio > 0 && !x.Met {
			below = append(below, fmt.Sprintf("%s %.2fx (< %.1f)", x.Name, x.Ratio, x.Target))
		}
	}
	met := "met"
	if gm < 1 {
		met = "not met"
	}
	fmt.Fprintf(w, "Geometric mean of the %d ratios: **%.2fx** (target >= 1.0x: %s).", n, gm, met)
	if len(below) == 0 {
		fmt.Fprintf(w, " Every workload at or above its floor.\n\n")
	} else {
		fmt.Fprintf(w, " Below their floor (%d): %s.\n\n", len(below), strings.Join(below, "; "))
	}
	if hasFloor {
		var fl []MatrixRow
		var out []string
		for _, x := range rows {
			if x.FloorRatio > 0 {
				fl = append(fl, MatrixRow{Ratio: x.FloorRatio})
				if x.FloorRatio < x.Target {
					out = append(out, fmt.Sprintf("%s %.2fx", x.Name, x.FloorRatio))
				}
			}
		}
		fgm, fn := GeoMean(fl)
		fmt.Fprintf(w, "The FUSE floor's geometric mean over its %d ratios: **%.2fx**.", fn, fgm)
		if len(out) > 0 {
			fmt.Fprintf(w, " Workloads whose target even the floor misses (%d): %s.", len(out), strings.Join(out, "; "))
		}
		fmt.Fprintf(w, "\n\n")
	}
	var groups []string
	for _, x := range rows {
		if !slices.Contains(groups, x.Group) {
			groups = append(groups, x.Group)
		}
	}
	for _, g := range groups {
		fmt.Fprintf(w, "### %s\n\n", g)
		floorHead, floorRule := "", ""
		if hasFloor {
			floorHead, floorRule = " FUSE floor | floor ratio |", "---:|---:|"
		}
		fmt.Fprintln(w, "| workload | kernel | nfsrdma-mount | unit | ratio | spread | target |"+floorHead+" RPCs per unit: kernel | nfsrdma-mount | FUSE requests per unit: nfsrdma-mount |")
		fmt.Fprintln(w, "|---|---:|---:|---|---:|---|---|"+floorRule+"---|---|---|")
		var notes []string
		for _, x := range rows {
			if x.Group != g {
				continue
			}
			ratio, spread, target := "-", "", fmt.Sprintf(">= %.1f", x.Target)
			if x.Ratio > 0 {
				ratio = fmt.Sprintf("**%.2fx**", x.Ratio)
				spread = fmt.Sprintf("%.2f-%.2f", x.Min, x.Max)
				if !x.Met {
					target += " (missed)"
				}
			}
			ours := fmtFigure(x.OursMedian())
			if x.Unsupprt != "" {
				ours, ratio = x.Unsupprt, "-"
			}
			name := x.Name
			if x.Note != "" {
				notes = append(notes, fmt.Sprintf("%s: %s", x.Name, x.Note))
			}
			floorCols := ""
			if hasFloor {
				fr := "-"
				if x.FloorRatio > 0 {
					fr = fmt.Sprintf("%.2fx", x.FloorRatio)
				}
				floorCols = fmt.Sprintf(" %s | %s |", fmtFigure(x.FloorMedian()), fr)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |%s %s | %s | %s |\n", name, fmtFigure(x.KernelMedian()), ours, x.Unit,
				ratio, spread, target, floorCols, fmtPerOp(x.RPCs[0], x.Per), fmtPerOp(x.RPCs[1], x.Per), fmtPerOp(RowRPC{PerOp: x.FUSE, Total: x.FUSETotal}, x.Per))
		}
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
		if len(notes) > 0 {
			fmt.Fprintln(w)
		}
		if hasCost {
			writeCostTable(w, rows, g, hasFloor)
		}
	}
	fmt.Fprintf(w, "### Per-round figures and RPC counts of the last round\n\n")
	floorHead, floorRule := "", ""
	if hasFloor {
		floorHead, floorRule = " FUSE floor rounds |", "---|"
	}
	fmt.Fprintln(w, "| workload | kernel rounds | nfsrdma-mount rounds |"+floorHead+" ratios | kernel RPCs (last round) | nfsrdma-mount RPCs (last round) |")
	fmt.Fprintln(w, "|---|---|---|"+floorRule+"---|---|---|")
	for _, x := range rows {
		floorCol := ""
		if hasFloor {
			floorCol = " " + fmtList(x.Floor) + " |"
		}
		fmt.Fprintf(w, "| %s: %s | %s | %s |%s %s | %s | %s |\n", x.Group, x.Name, fmtList(x.Kernel), fmtList(x.Ours), floorCol, fmtList(x.Rounds),
			fmtCounts(x.RPCs[0]), fmtCounts(x.RPCs[1]))
	}
	fmt.Fprintln(w)
}

func fmtFigure(v float64) string {
	switch {
	case v == 0:
		return "-"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func fmtList(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmtFigure(x)
	}
	return strings.Join(s, " ")
}

// fmtPerOp is "total/unit: OP n, OP n" with the four most frequent
// procedures.
func fmtPerOp(r RowRPC, per string) string {
	if len(r.PerOp) == 0 {
		return "-"
	}
	ops := make([]string, 0, len(r.PerOp))
	for op := range r.PerOp {
		ops = append(ops, op)
	}
	slices.SortFunc(ops, func(a, b string) int {
		if r.PerOp[a] != r.PerOp[b] {
			if r.PerOp[a] > r.PerOp[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for i, op := range ops {
		if i == 4 {
			parts = append(parts, "...")
			break
		}
		part := fmt.Sprintf("%s %s", op, fmtRate(r.PerOp[op]))
		if b := r.Payload[op]; b > 0 {
			part += fmt.Sprintf(" (%s each)", fmtBytes(b))
		}
		parts = append(parts, part)
	}
	return fmt.Sprintf("%s/%s: %s", fmtRate(r.Total), per, strings.Join(parts, ", "))
}

func fmtRate(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 0.01:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

// fmtCounts is the raw counts of the last round: "N units; OP n, OP n...".
func fmtCounts(r RowRPC) string {
	if r.Last == nil {
		return "-"
	}
	var parts []string
	for _, op := range r.Last.Ops() {
		part := fmt.Sprintf("%s %d", op, r.Last[op].Calls)
		if b := r.Last.Payload(op); b > 0 {
			part += fmt.Sprintf(" (%s each)", fmtBytes(b))
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		parts = []string{"none"}
	}
	return fmt.Sprintf("%d units: %s", r.Units, strings.Join(parts, ", "))
}

// fmtBytes is a byte count in B, KiB or MiB.
func fmtBytes(b float64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.2f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}

// writeCostTable writes the cost per unit of group g's rows.
func writeCostTable(w io.Writer, rows []MatrixRow, g string, hasFloor bool) {
	floorHead, floorRule := "", ""
	if hasFloor {
		floorHead, floorRule = " FUSE floor |", "---:|"
	}
	fmt.Fprintln(w, "| cost per unit | ratio | CPU µs: kernel | nfsrdma-mount |"+floorHead+" kernel threads + nfsd µs: kernel | nfsrdma-mount | mount server: CPU µs | system calls | context switches (vol + invol) | Go allocations |")
	fmt.Fprintln(w, "|---|---:|---:|---:|"+floorRule+"---:|---:|---:|---:|---:|---:|")
	for _, x := range rows {
		if x.Group != g {
			continue
		}
		k, o, f := x.CostOf("kernel"), x.CostOf("nfsrdma-mount"), x.CostOf(floorName)
		ratio := "-"
		if x.Ratio > 0 {
			ratio = fmt.Sprintf("%.2fx", x.Ratio)
		}
		floorCol := ""
		if hasFloor {
			floorCol = " " + fmtCPU(f) + " |"
		}
		srv, sys, csw, allocs := "-", "-", "-", "-"
		if o != nil && o.Server != nil {
			s := o.Server
			srv = fmtRate(s.CPUUS)
			sys, allocs = fmtCount(s.Syscalls), fmtCount(s.Allocs)
			csw = fmt.Sprintf("%s + %s", fmtRate(s.VolCSW), fmtRate(s.InvolCSW))
		}
		fmt.Fprintf(w, "| %s (per %s) | %s | %s | %s |%s %s | %s | %s | %s | %s | %s |\n", x.Name, x.Per, ratio, fmtCPU(k), fmtCPU(o), floorCol,
			fmtKthreads(k), fmtKthreads(o), srv, sys, csw, allocs)
	}
	fmt.Fprintln(w)
}

// fmtCPU is a client's guest CPU µs per unit ("-": not measured).
func fmtCPU(c *OpCost) string {
	if c == nil {
		return "-"
	}
	return fmtRate(c.CPUUS)
}

// fmtKthreads is "kernel threads + nfsd" µs per unit.
func fmtKthreads(c *OpCost) string {
	if c == nil {
		return "-"
	}
	return fmt.Sprintf("%s + %s", fmtRate(c.KThreadUS), fmtRate(c.NfsdUS))
}

// fmtCount is a count per unit, "-" when not measured (negative).
func fmtCount(v float64) string {
	if v < 0 {
		return "-"
	}
	return fmtRate(v)
}
