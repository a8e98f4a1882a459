package bench

import (
	"bufio"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// OpCount is one procedure's calls and the bytes of their call and reply
// messages (bulk data included), as the client counts them.
type OpCount struct {
	Calls uint64 `json:"calls"`
	Sent  uint64 `json:"sent,omitempty"`
	Recv  uint64 `json:"recv,omitempty"`
}

// RPCCounts are the RPCs a client sent, by procedure name ("READ",
// "GETATTR"...), as counted by the client itself.
type RPCCounts map[string]OpCount

// Sub returns c less an earlier snapshot (procedures whose calls did not
// grow are left out).
func (c RPCCounts) Sub(before RPCCounts) RPCCounts {
	d := RPCCounts{}
	for op, n := range c {
		b := before[op]
		if n.Calls > b.Calls {
			d[op] = OpCount{Calls: n.Calls - b.Calls, Sent: n.Sent - min(b.Sent, n.Sent), Recv: n.Recv - min(b.Recv, n.Recv)}
		}
	}
	return d
}

// Total is the calls of every procedure.
func (c RPCCounts) Total() uint64 {
	var t uint64
	for _, n := range c {
		t += n.Calls
	}
	return t
}

// Payload is the mean bytes per call that carry a data procedure's data:
// a READ's reply, a WRITE's call; 0 for other procedures.
func (c RPCCounts) Payload(op string) float64 {
	n := c[op]
	if n.Calls == 0 {
		return 0
	}
	switch op {
	case "READ":
		return float64(n.Recv) / float64(n.Calls)
	case "WRITE":
		return float64(n.Sent) / float64(n.Calls)
	}
	return 0
}

// Ops are the procedure names, the most called first.
func (c RPCCounts) Ops() []string {
	ops := slices.Collect(maps.Keys(c))
	slices.SortFunc(ops, func(a, b string) int {
		if c[a].Calls != c[b].Calls {
			if c[a].Calls > c[b].Calls {
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

// FUSECounts are the FUSE requests a mount server answered, by kind
// ("LOOKUP", "GETATTR"...).
type FUSECounts map[string]uint64

// ParseOurFUSE returns the FUSE requests by kind from the output of
// `nfsrdma-mount stats DIR` (its "nfsrdma-fuse:" line: name, requests and
// mean microseconds per kind); none when the line is missing.
func ParseOurFUSE(text string) (FUSECounts, error) {
	c := FUSECounts{}
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "nfsrdma-fuse:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f)%3 != 0 {
			return nil, fmt.Errorf("bench: FUSE request line %q: not name, requests, mean", line)
		}
		for i := 0; i < len(f); i += 3 {
			n, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("bench: FUSE request line %q: %v", line, err)
			}
			c[f[i]] += n
		}
	}
	return c, nil
}

// Sub returns c less an earlier snapshot (kinds that did not grow are left
// out).
func (c FUSECounts) Sub(before FUSECounts) FUSECounts {
	d := FUSECounts{}
	for k, n := range c {
		if n > before[k] {
			d[k] = n - before[k]
		}
	}
	return d
}

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
		num := func(i int) (uint64, bool) {
			if i >= len(f) {
				return 0, false
			}
			n, err := strconv.ParseUint(f[i], 10, 64)
			return n, err == nil
		}
		var n OpCount
		if calls, ok := num(0); ok {
			// mountstats: ops transmissions timeouts bytes_sent
			// bytes_recv queue rtt execute [errors]
			n.Calls = calls
			n.Sent, _ = num(3)
			n.Recv, _ = num(4)
		} else {
			found := false
			for i := 0; i+1 < len(f); i++ {
				v, ok := num(i + 1)
				if !ok {
					continue
				}
				switch f[i] {
				case "calls":
					n.Calls, found = v, true
				case "sent":
					n.Sent = v
				case "recv":
					n.Recv = v
				}
			}
			if !found {
				return nil, fmt.Errorf("bench: per-op line without a count: %q", line)
			}
		}
		c[name] = OpCount{Calls: c[name].Calls + n.Calls, Sent: c[name].Sent + n.Sent, Recv: c[name].Recv + n.Recv}
	}
	if !in {
		return nil, fmt.Errorf("bench: no per-op statistics in:\n%s", text)
	}
	return c, nil
}
