package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/metrics"
	"strings"
	"syscall"
	"time"

	"github.com/nfsrdma/nfsrdma/fusefs"
	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/xprt"
)

// A server answers "stats-json" with a snapshot of its counters; the
// command prints it as JSON, or in the format of /proc/self/mountstats
// (which mountstats(8) and nfsiostat(8) from nfs-common parse), or, with an
// interval, as per-interval rates in the manner of nfsiostat.

// snapshot is one mount's counters at one time.
type snapshot struct {
	Device     string    `json:"device"`
	MountPoint string    `json:"mount_point"`
	Type       string    `json:"type"`
	PID        int       `json:"pid"`
	Time       time.Time `json:"time"`
	AgeSeconds int64     `json:"age_seconds"`
	Options    []string  `json:"options"`
	Server     string    `json:"server"`
	Proto      string    `json:"proto"`
	Port       int       `json:"port"`
	Rsize      uint32    `json:"rsize"`
	Wsize      uint32    `json:"wsize"`
	// Transports are the connections to the server (nconnect of them).
	Transports []xprtSnapshot `json:"transports"`
	// Ops are the RPC procedures called so far.
	Ops []opSnapshot `json:"ops"`
	// Events are the VFS event counters, in the order of the "events:"
	// line of /proc/self/mountstats (see fusefs.Events).
	Events []uint64 `json:"events"`
	// Bytes are the application's bytes: read and written through
	// buffered files, then through direct I/O.
	Bytes fusefs.IOBytes `json:"bytes"`
	// FUSE are the FUSE requests answered, by kind (fusefs.FUSEOp): the
	// round trips between the applications and the mount server.
	FUSE []fuseOpSnapshot `json:"fuse"`
	// Go is the mount server's Go runtime: what it has allocated so far.
	Go goSnapshot `json:"go"`
}

// goSnapshot is the Go runtime's cumulative allocation counters
// (runtime/metrics), so that a benchmark can divide their growth by its
// operations. The reading is exact to a span of each size class per P
// (the runtime counts a span's objects when a P takes it).
type goSnapshot struct {
	// HeapAllocObjects is every heap allocation, tiny ones included
	// (/gc/heap/allocs:objects plus /gc/heap/tiny/allocs:objects).
	HeapAllocObjects uint64 `json:"heap_alloc_objects"`
	HeapAllocBytes   uint64 `json:"heap_alloc_bytes"` // /gc/heap/allocs:bytes
	GCCycles         uint64 `json:"gc_cycles"`        // /gc/cycles/total:gc-cycles
}

// readGoSnapshot reads the runtime's counters.
func readGoSnapshot() goSnapshot {
	ms := []metrics.Sample{
		{Name: "/gc/heap/allocs:objects"}, {Name: "/gc/heap/tiny/allocs:objects"},
		{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/cycles/total:gc-cycles"},
	}
	metrics.Read(ms)
	v := func(i int) uint64 {
		if ms[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return ms[i].Value.Uint64()
	}
	return goSnapshot{HeapAllocObjects: v(0) + v(1), HeapAllocBytes: v(2), GCCycles: v(3)}
}

type fuseOpSnapshot struct {
	Name     string `json:"name"`
	Requests uint64 `json:"requests"`
	TimeUS   int64  `json:"time_us"` // in the mount server's handlers, NFS calls included
}

type xprtSnapshot struct {
	Proto string           `json:"proto"`
	RDMA  *xprt.Counters   `json:"rdma,omitempty"`
	TCP   *sunrpc.TCPStats `json:"tcp,omitempty"`
	// InlineSend and InlineRecv are an RDMA connection's negotiated
	// inline sizes (RFC 8797: the smaller of each side's offer).
	InlineSend int `json:"inline_send,omitempty"`
	InlineRecv int `json:"inline_recv,omitempty"`
}

type opSnapshot struct {
	Name       string `json:"name"`
	Prog       uint32 `json:"prog"`
	Proc       uint32 `json:"proc"`
	Calls      uint64 `json:"calls"`
	Errors     uint64 `json:"errors"`
	Timeouts   uint64 `json:"timeouts"`
	BytesSent  uint64 `json:"bytes_sent"`
	BytesRecv  uint64 `json:"bytes_recv"`
	RTTTotalUS int64  `json:"rtt_total_us"`
	RTTMaxUS   int64  `json:"rtt_max_us"`
	// RTTHist[i] counts round trips under 2^i µs (the last: the rest).
	RTTHist []uint64 `json:"rtt_hist"`
}

// snapshot takes the mount's counters.
func (m *mountServer) snapshot() *snapshot {
	s := &snapshot{
		Go:     readGoSnapshot(),
		Device: m.inv.spec, MountPoint: m.dir, Type: fsType, PID: os.Getpid(),
		Time: time.Now(), AgeSeconds: int64(time.Since(m.started).Seconds()),
		Options: append([]string(nil), m.opts.canonical...),
		Server:  m.addr.String(), Proto: m.opts.Proto, Port: m.opts.Port,
	}
	s.Rsize, s.Wsize = m.fsys.IOSizes()
	ev := m.fsys.Events()
	s.Events = ev[:]
	s.Bytes = m.fsys.IOBytes()
	for _, o := range m.fsys.FUSERequests() {
		s.FUSE = append(s.FUSE, fuseOpSnapshot{Name: o.Name, Requests: o.Requests, TimeUS: o.Time.Microseconds()})
	}
	for _, t := range m.rdma {
		c := t.Counters()
		send, recv := t.InlineSizes()
		s.Transports = append(s.Transports, xprtSnapshot{Proto: "rdma", RDMA: &c, InlineSend: send, InlineRecv: recv})
	}
	for _, t := range m.tcp {
		st := t.Stats()
		s.Transports = append(s.Transports, xprtSnapshot{Proto: "tcp", TCP: &st})
	}
	for _, o := range m.metered.Stats() {
		s.Ops = append(s.Ops, opSnapshot{
			Name: o.Name, Prog: o.Prog, Proc: o.Proc, Calls: o.Calls, Errors: o.Errors, Timeouts: o.Timeouts,
			BytesSent: o.BytesSent, BytesRecv: o.BytesRecv,
			RTTTotalUS: o.RTTTotal.Microseconds(), RTTMaxUS: o.RTTMax.Microseconds(),
			RTTHist: append([]uint64(nil), o.RTTHist[:]...),
		})
	}
	return s
}

// statsAnswer is the control socket's answer to "stats" and "stats-json".
func (m *mountServer) statsAnswer(asJSON bool) string {
	s := m.snapshot()
	if asJSON {
		b, _ := json.Marshal(s)
		return string(b) + "\n"
	}
	var b strings.Builder
	writeMountstats(&b, s)
	return b.String()
}

// nfsOp returns the counters of NFS procedure proc (zero when never
// called).
func (s *snapshot) nfsOp(proc uint32) opSnapshot {
	for _, o := range s.Ops {
		if o.Prog == nfs3.Program && o.Proc == proc {
			return o
		}
	}
	return opSnapshot{Name: nfs3.ProcName(proc), Prog: nfs3.Program, Proc: proc}
}

// nfsProcs is the number of NFSv3 procedures (NULL to COMMIT).
const nfsProcs = nfs3.ProcCommit + 1

// writeMountstats writes s as the kernel writes an NFS mount in
// /proc/self/mountstats (statvers 1.1). The type is "nfs", as the tools
// want; "nfsrdma:" names the real one. What the kernel counts and this
// client does not (some VFS events, queue times) is 0; the RPC execute time is the round trip. Lines the tools skip (they
// come before "RPC iostats") add this client's own counters.
func writeMountstats(w io.Writer, s *snapshot) {
	fmt.Fprintf(w, "device %s mounted on %s with fstype nfs statvers=1.1\n", s.Device, s.MountPoint)
	opts := append([]string(nil), s.Options...)
	if s.Server != "" && s.Server != "invalid IP" {
		opts = append(opts, "addr="+s.Server)
	}
	fmt.Fprintf(w, "\topts:\t%s\n", strings.Join(opts, ","))
	fmt.Fprintf(w, "\tage:\t%d\n", s.AgeSeconds)
	fmt.Fprintf(w, "\tpid:\t%d\n", s.PID)
	fmt.Fprintf(w, "\tcaps:\tcaps=0x0,wtmult=4096,dtsize=%d,bsize=0,rsize=%d,wsize=%d\n", s.Rsize, s.Rsize, s.Wsize)
	fmt.Fprintf(w, "\tsec:\tflavor=1,pseudoflavor=1\n")
	ev := make([]string, fusefs.NumEvents)
	for i := range ev {
		ev[i] = "0"
		if i < len(s.Events) {
			ev[i] = fmt.Sprint(s.Events[i])
		}
	}
	fmt.Fprintf(w, "\tevents:\t%s\n", strings.Join(ev, " "))
	read, write := s.nfsOp(nfs3.ProcRead), s.nfsOp(nfs3.ProcWrite)
	// normal and direct read and write, server read and write, pages
	// (the pages as the READ and WRITE calls' 4 KiB pages).
	fmt.Fprintf(w, "\tbytes:\t%d %d %d %d %d %d %d %d\n", s.Bytes.NormalRead, s.Bytes.NormalWrite, s.Bytes.DirectRead, s.Bytes.DirectWrite,
		read.BytesRecv, write.BytesSent, (read.BytesRecv+4095)/4096, (write.BytesSent+4095)/4096)
	fmt.Fprintf(w, "\tnfsrdma:\tfstype=%s\n", s.Type)
	for _, t := range s.Transports {
		switch {
		case t.RDMA != nil:
			fmt.Fprintf(w, "\tnfsrdma-xprt:\trdma %s:%d inline_send %d inline_recv %d %s\n", s.Server, s.Port, t.InlineSend, t.InlineRecv, t.RDMA.String())
		case t.TCP != nil:
			fmt.Fprintf(w, "\tnfsrdma-xprt:\ttcp %s:%d connects %d connection_losses %d retransmits %d unmatched_replies %d malformed_records %d\n",
				s.Server, s.Port, t.TCP.Connects, t.TCP.ConnectionLosses, t.TCP.Retransmits, t.TCP.UnmatchedReplies, t.TCP.MalformedRecords)
		}
	}
	if len(s.FUSE) > 0 {
		// name, requests, mean time in the handler (us), per kind
		var b strings.Builder
		for i, o := range s.FUSE {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%s %d %d", o.Name, o.Requests, o.TimeUS/int64(o.Requests))
		}
		fmt.Fprintf(w, "\tnfsrdma-fuse:\t%s\n", b.String())
	}
	fmt.Fprintf(w, "\tnfsrdma-go:\theap_alloc_objects %d heap_alloc_bytes %d gc_cycles %d\n", s.Go.HeapAllocObjects, s.Go.HeapAllocBytes, s.Go.GCCycles)
	fmt.Fprintf(w, "\tnfsrdma-rtt:\tper op: calls, errors, timeouts, bytes, mean and max round trip, histogram\n")
	var ops []sunrpc.OpStats
	for _, o := range s.Ops {
		st := sunrpc.OpStats{Prog: o.Prog, Proc: o.Proc, Name: o.Name, Calls: o.Calls, Errors: o.Errors, Timeouts: o.Timeouts,
			BytesSent: o.BytesSent, BytesRecv: o.BytesRecv, RTTTotal: time.Duration(o.RTTTotalUS) * time.Microsecond,
			RTTMax: time.Duration(o.RTTMaxUS) * time.Microsecond}
		copy(st.RTTHist[:], o.RTTHist)
		ops = append(ops, st)
	}
	var rtt bytes.Buffer
	sunrpc.WriteStats(&rtt, ops)
	for _, line := range strings.Split(strings.TrimRight(rtt.String(), "\n"), "\n") {
		if line != "" {
			fmt.Fprintf(w, "\t%s\n", line)
		}
	}

	fmt.Fprintf(w, "\tRPC iostats version: 1.1  p/v: %d/%d (nfs)\n", nfs3.Program, nfs3.Version)
	var sends, recvs uint64
	for _, o := range s.Ops {
		sends += o.Calls
		recvs += o.Calls - o.Errors
	}
	for _, t := range s.Transports {
		switch {
		case t.RDMA != nil:
			c := t.RDMA
			// port bind_count connect_count connect_time idle_time sends
			// recvs bad_xids req_u bklog_u, the chunk and copy counts,
			// then the memory registration counts.
			fmt.Fprintf(w, "\txprt:\trdma 0 0 %d 0 0 %d %d %d 0 0 %d %d %d 0 0 %d 0 %d 0 %d %d %d 0 0 %d %d %d\n",
				c.Reconnects+1, c.Calls+c.Retransmits, c.Receives, c.BadXIDs,
				c.ReadChunks, c.WriteChunks, c.ReplyChunks, c.PullUpBytes, c.Registrations,
				c.MalformedReplies, c.PositionZero, c.WindowsReplaced, c.LocalInvalidations, c.CongestionWaits, c.ReplyBeforeSend)
		case t.TCP != nil:
			n := uint64(len(s.Transports))
			fmt.Fprintf(w, "\txprt:\ttcp 0 0 %d 0 0 %d %d %d 0 0 0 0 0\n",
				t.TCP.Connects, sends/n+t.TCP.Retransmits, recvs/n, t.TCP.UnmatchedReplies)
		}
	}
	fmt.Fprintf(w, "\tper-op statistics\n")
	for p := uint32(0); p < nfsProcs; p++ {
		o := s.nfsOp(p)
		ms := o.RTTTotalUS / 1000
		fmt.Fprintf(w, "\t%12s: %d %d %d %d %d 0 %d %d %d\n", nfs3.ProcName(p), o.Calls, o.Calls, o.Timeouts, o.BytesSent, o.BytesRecv, ms, ms, o.Errors)
	}
	fmt.Fprintln(w)
}

// statsCommand is "nfsrdma-mount stats".
func statsCommand(name string, inv *invocation, stdout, stderr io.Writer) int {
	dirs := inv.dirs
	all := len(dirs) == 0
	if all {
		seen := map[string]bool{}
		for _, e := range nfsrdmaMounts() {
			if !seen[e.Point] {
				seen[e.Point] = true
				dirs = append(dirs, e.Point)
			}
		}
		if len(dirs) == 0 {
			fmt.Fprintf(stderr, "%s: stats: no nfsrdma mounts\n", name)
			return exitUsage
		}
	}
	fetch := func() ([]*snapshot, bool) {
		var snaps []*snapshot
		ok := true
		for _, d := range dirs {
			s, err := fetchSnapshot(d)
			if err != nil {
				fmt.Fprintf(stderr, "%s: stats: %v\n", name, err)
				ok = false
				continue
			}
			snaps = append(snaps, s)
		}
		return snaps, ok
	}
	print := func(snaps, prev []*snapshot) {
		for _, s := range snaps {
			switch {
			case inv.json:
				b, _ := json.Marshal(s)
				fmt.Fprintf(stdout, "%s\n", b)
			case inv.interval > 0:
				writeIostat(stdout, s, findSnapshot(prev, s.MountPoint, s.PID))
			default:
				writeMountstats(stdout, s)
			}
		}
	}
	snaps, ok := fetch()
	print(snaps, nil)
	if all && len(snaps) > 0 {
		// Of every mount, those no server of ours answers for (another
		// user's, a program's own) are only noted.
		ok = true
	}
	if inv.interval == 0 {
		if !ok {
			return exitMountErr
		}
		return exitOK
	}
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigc)
	for n := 1; inv.count == 0 || n < inv.count; n++ {
		select {
		case <-time.After(inv.interval):
		case <-sigc:
			return exitOK
		}
		next, nok := fetch()
		if len(next) == 0 && !nok {
			return exitMountErr
		}
		print(next, snaps)
		snaps = next
	}
	return exitOK
}

func findSnapshot(snaps []*snapshot, dir string, pid int) *snapshot {
	for _, s := range snaps {
		if s.MountPoint == dir && s.PID == pid {
			return s
		}
	}
	return nil
}

// fetchSnapshot asks dir's server for its counters.
func fetchSnapshot(dir string) (*snapshot, error) {
	c, err := canonicalDir(dir)
	if err != nil {
		return nil, err
	}
	reply, err := controlRequest(c, "stats-json", 10*time.Second)
	var nse *NoServerError
	if errors.As(err, &nse) && topMount(c) != nil && isDead(c) {
		return nil, fmt.Errorf("%s: a dead mount (its server is gone): nfsrdma-mount -u %s removes it", c, c)
	}
	if err != nil {
		return nil, err
	}
	s := new(snapshot)
	if err := json.Unmarshal([]byte(reply), s); err != nil {
		return nil, fmt.Errorf("%s: the server's stats: %v (%.80q)", c, err, reply)
	}
	return s, nil
}

// writeIostat writes the rates of cur since prev (since the mount when
// prev is nil), as nfsiostat does: RPC ops/s, then per procedure called:
// ops/s, kB/s, kB/op, retransmissions, mean RTT and execute time, errors.
func writeIostat(w io.Writer, cur, prev *snapshot) {
	secs := float64(cur.AgeSeconds)
	if prev != nil {
		secs = cur.Time.Sub(prev.Time).Seconds()
	}
	if secs <= 0 {
		secs = 1
	}
	diff := func(o opSnapshot) opSnapshot {
		if prev == nil {
			return o
		}
		for _, p := range prev.Ops {
			if p.Prog == o.Prog && p.Proc == o.Proc {
				o.Calls -= p.Calls
				o.Errors -= p.Errors
				o.Timeouts -= p.Timeouts
				o.BytesSent -= p.BytesSent
				o.BytesRecv -= p.BytesRecv
				o.RTTTotalUS -= p.RTTTotalUS
			}
		}
		return o
	}
	var total uint64
	var ops []opSnapshot
	for _, o := range cur.Ops {
		d := diff(o)
		total += d.Calls
		if d.Calls > 0 && o.Prog == nfs3.Program {
			ops = append(ops, d)
		}
	}
	fmt.Fprintf(w, "\n%s mounted on %s:\n\n", cur.Device, cur.MountPoint)
	fmt.Fprintf(w, "%16s%16s\n%16.3f%16.3f\n\n", "ops/s", "rpc bklog", float64(total)/secs, 0.0)
	fmt.Fprintf(w, "%-12s%12s%16s%16s%16s%16s%16s%16s\n", "op:", "ops/s", "kB/s", "kB/op", "retrans", "avg RTT (ms)", "avg exe (ms)", "errors")
	for _, o := range ops {
		n := float64(o.Calls)
		kb := float64(o.BytesSent+o.BytesRecv) / 1024
		rtt := float64(o.RTTTotalUS) / 1000 / n
		fmt.Fprintf(w, "%-12s%12.3f%16.3f%16.3f%16s%16.3f%16.3f%16s\n", strings.ToLower(o.Name)+":", n/secs, kb/secs, kb/n,
			"0 (0.0%)", rtt, rtt, fmt.Sprintf("%d (%.1f%%)", o.Errors, 100*float64(o.Errors)/n))
	}
}
