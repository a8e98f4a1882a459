package bench

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// WriteLibMatrix writes the report's library matrix as Markdown (nothing
// without one): the targets and whether they are met, then a table per
// group.
func (r *Report) WriteLibMatrix(w io.Writer) {
	if r.LibMatrix != nil {
		writeLibMatrix(w, r.LibMatrix)
	}
}

func writeLibMatrix(w io.Writer, m *LibMatrix) {
	fmt.Fprintf(w, "## Library matrix: a Go program with the library against the same program with os on the kernel's mount\n\n")
	fmt.Fprintln(w, "The same Go code, written once, run with the library (nfsrdma.Mount: nfs3.Target's path API and Files over")
	fmt.Fprintln(w, "RPC-over-RDMA, one client, default options, goroutines for concurrency) and with os calls on the kernel's")
	fmt.Fprintln(w, "NFSv3/RDMA mount of the same export, one right after the other (which goes first alternates by round). The")
	fmt.Fprintln(w, "random I/O opens the kernel's file with O_DIRECT (the page cache would answer repeated reads and absorb the")
	fmt.Fprintln(w, "writes); a cold row gets a fresh kernel mount and dropped caches (the library keeps none). Ratio: above 1")
	fmt.Fprintln(w, "means the library is better (throughput library/kernel, or time kernel/library), the median of the per-round")
	fmt.Fprintln(w, "ratios; spread: their min-max; figures: medians of the rounds. RPCs: per unit of work (I/O, file, entry), each")
	fmt.Fprintln(w, "side's, over all rounds, as knfsd counted them (/proc/net/rpc/nfsd; one side runs at a time): the total, then")
	fmt.Fprintln(w, "the four most frequent procedures.")
	fmt.Fprintln(w)
	rowT, geoT := m.RowTarget, m.GeoTarget
	if rowT == 0 {
		rowT = LibRowTarget
	}
	if geoT == 0 {
		geoT = LibGeoTarget
	}
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**not met**"
	}
	below := m.Below()
	unmeasured := 0
	for _, x := range m.Rows {
		if x.Ratio <= 0 {
			unmeasured++
		}
	}
	fmt.Fprintf(w, "Targets: no row below %.1fx (%s", rowT, verdict(len(below) == 0 && unmeasured == 0 && m.GeoRows > 0))
	if len(below) > 0 {
		var names []string
		for _, x := range below {
			names = append(names, fmt.Sprintf("%s %.2fx", x.Name, x.Ratio))
		}
		fmt.Fprintf(w, ": %d below, %s", len(below), strings.Join(names, "; "))
	}
	if unmeasured > 0 {
		fmt.Fprintf(w, "; %d not measured", unmeasured)
	}
	fmt.Fprintf(w, "); geometric mean of the %d ratios **%.2fx**, at least %.1fx (%s).\n\n", m.GeoRows, m.GeoMean, geoT, verdict(m.GeoRows > 0 && m.GeoMean >= geoT))
	var groups []string
	for _, x := range m.Rows {
		if !slices.Contains(groups, x.Group) {
			groups = append(groups, x.Group)
		}
	}
	for _, g := range groups {
		fmt.Fprintf(w, "### Library: %s\n\n", g)
		fmt.Fprintln(w, "| work | unit | kernel mount (os) | library | ratio | spread | target | met | RPCs, kernel mount | RPCs, library | how |")
		fmt.Fprintln(w, "|---|---|---:|---:|---:|---|---:|---|---|---|---|")
		for _, x := range m.Rows {
			if x.Group != g {
				continue
			}
			ratio, spread, met := "-", "-", "not measured"
			if x.Ratio > 0 {
				ratio = fmt.Sprintf("%.2fx", x.Ratio)
				spread = fmt.Sprintf("%.2f-%.2f", x.Min, x.Max)
				met = "yes"
				if !x.Met {
					met = "**no**"
				}
			}
			var rpcs [2]string
			for side := range 2 {
				rpcs[side] = "-"
				if x.RPCs[side] != nil {
					rpcs[side] = fmtRPCsPerUnit(x.RPCs[side], x.RPCTotal[side]) + " per " + x.Per
				}
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | >= %.1fx | %s | %s | %s | %s |\n", x.Name, x.Unit,
				fmtFigure(x.KernelMedian()), fmtFigure(x.LibraryMedian()), ratio, spread, x.Target, met, rpcs[0], rpcs[1], x.Note)
		}
		fmt.Fprintln(w)
	}
	if slices.ContainsFunc(m.Rows, func(x LibRow) bool { return len(x.Kernel) > 1 }) {
		fmt.Fprintln(w, "Every round's figures (kernel mount / library):")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| work | kernel mount (os) | library |")
		fmt.Fprintln(w, "|---|---|---|")
		for _, x := range m.Rows {
			fmt.Fprintf(w, "| %s | %s | %s |\n", x.Name, fmtList(x.Kernel), fmtList(x.Library))
		}
		fmt.Fprintln(w)
	}
}

// fmtRPCsPerUnit is "total: OP n, OP n..." with the four most frequent
// procedures.
func fmtRPCsPerUnit(per map[string]float64, total float64) string {
	ops := slices.Collect(maps.Keys(per))
	slices.SortFunc(ops, func(a, b string) int {
		if per[a] != per[b] {
			return cmp.Compare(per[b], per[a])
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, op := range ops[:min(len(ops), 4)] {
		parts = append(parts, fmt.Sprintf("%s %s", op, fmtRate(per[op])))
	}
	return fmt.Sprintf("%s: %s", fmtRate(total), strings.Join(parts, ", "))
}
