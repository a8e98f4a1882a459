package bench

import (
	"bufio"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// RPCCounts are the RPCs a client sent, by procedure name ("READ",
// "GETATTR"...), as counted by the client itself.
type RPCCounts map[string]uint64

// Sub returns c less an earlier snapshot (counts that did not grow are
// left out).
func (c RPCCounts) Sub(before RPCCounts) RPCCounts {
	d := RPCCounts{}
	for op, n := range c {
		if n > before[op] {
			d[op] = n - before[op]
		}
	}
	return d
}

// Total is the sum over every procedure.
func (c RPCCounts) Total() uint64 {
	var t uint64
	for _, n := range c {
		t += n
	}
	return t
}

// Ops are the procedure names, the most called first.
func (c RPCCounts) Ops() []string {
	ops := slices.Collect(maps.Keys(c))
	slices.SortFunc(ops, func(a, b string) int {
		if c[a] != c[b] {
			if c[a] > c[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	return ops
}

// The per-operation blocks of /proc/self/mountstats and of `nfsrdma-mount
// stats` are read by one parser, parsePerOp: a header line "per-op
// statistics", then one line per procedure, "NAME: ...". What follows the
// colon is either mountstats' numbers (the first is the operation count)
// or nfsrdma-mount's "calls N errors N ..." pairs; both are understood, so
// that the mount helper may change to the mountstats layout without the
// bench noticing.

// ParseMountstats returns the per-operation counts of the NFS mount on dir
// from the text of /proc/self/mountstats.
func ParseMountstats(text, dir string) (RPCCounts, error) {
	var block []string
	in := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "device ") {
			f := strings.Fields(line)
			// device SPEC mounted on DIR with fstype TYPE ...
			in = len(f) >= 5 && f[2] == "mounted" && f[3] == "on" && f[4] == dir
			continue
		}
		if in {
			block = append(block, line)
		}
	}
	if block == nil {
		return nil, fmt.Errorf("bench: no mount on %s in mountstats", dir)
	}
	return parsePerOp(strings.Join(block, "\n"))
}

// ParseOurStats returns the per-operation counts from the output of
// `nfsrdma-mount stats DIR`.
func ParseOurStats(text string) (RPCCounts, error) { return parsePerOp(text) }

// parsePerOp reads the per-op block of one mount's statistics.
func parsePerOp(text string) (RPCCounts, error) {
	c := RPCCounts{}
	in := false
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "per-op statistics") {
			in = true
			continue
		}
		if !in || line == "" {
			continue
		}
		name, rest, ok := strings.Cut(line, ":")
		if !ok || strings.ContainsAny(name, " \t") {
			// The end of the block (mountstats may go on with other
			// sections after it).
			if len(c) > 0 {
				break
			}
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		var s string
		if _, err := strconv.ParseUint(f[0], 10, 64); err == nil {
			s = f[0] // mountstats: ops transmissions timeouts bytes...
		} else {
			for i := 0; i+1 < len(f); i++ {
				if f[i] == "calls" {
					s = f[i+1]
					break
				}
			}
		}
		if s == "" {
			return nil, fmt.Errorf("bench: per-op line without a count: %q", line)
		}
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bench: per-op line %q: %w", line, err)
		}
		c[name] += n
	}
	if !in {
		return nil, fmt.Errorf("bench: no per-op statistics in:\n%s", text)
	}
	return c, nil
}
