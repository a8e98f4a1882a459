package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The cost of each operation, counted: around every workload on every
// client the matrix reads what the guest's CPUs did, and what the server
// process of a FUSE client (nfsrdma-mount, the floor's loopback) did, so
// that a row says what an operation costs in units that carry over from
// the emulated bed (CPU time, system calls, context switches,
// allocations), beside its ratio:
//
//   - the guest's CPU time, all tasks: the "cpu" line of /proc/stat,
//     user+nice+system+irq+softirq, in clock ticks (USER_HZ, 10 ms). It is
//     the fair comparison with the kernel client, whose work runs in
//     kernel threads, in softirq and in the application's own system
//     calls;
//   - the kernel threads' run time (/proc/PID/schedstat of every task
//     with PF_KTHREAD), nfsd's apart: nfsd serves both clients in the same
//     guest, the rest (kworkers running rpciod's and xprtiod's work,
//     ksoftirqd, rxe) is mostly the client's;
//   - the server process's run time, summed over its threads
//     (/proc/PID/task/*/schedstat, nanoseconds, where /proc/PID/stat's
//     utime+stime count 10 ms ticks), and its voluntary and involuntary
//     context switches (/proc/PID/task/*/status);
//   - its system calls: an ftrace histogram trigger on
//     raw_syscalls:sys_enter keyed by thread (counted in the kernel, no
//     trace buffer; read before and after), installed for the whole
//     matrix so that both clients run with the same tracepoint cost;
//   - its Go heap allocations: runtime/metrics, read through
//     `nfsrdma-mount stats` (its "nfsrdma-go:" line), before and after.
//
// Every count is divided by the row's units of work (MatrixRow.Per).

// clockTick is USER_HZ, the unit of /proc/stat's times (100 on Linux).
const clockTick = 10 * time.Millisecond

// pfKthread is PF_KTHREAD in the flags of /proc/PID/stat.
const pfKthread = 0x00200000

// procRoot is where the counters are read (tests point it elsewhere).
var procRoot = "/proc"

// parseProcStatBusy returns the guest's busy CPU time, all CPUs, from
// /proc/stat's "cpu" line: user+nice+system+irq+softirq, in clock ticks
// (guest and guest_nice are in user and nice already; idle, iowait and
// steal are not work of the guest's tasks).
func parseProcStatBusy(text string) (uint64, error) {
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "cpu" {
			continue
		}
		if len(f) < 8 {
			return 0, fmt.Errorf("bench: /proc/stat: short cpu line %q", line)
		}
		var busy uint64
		for _, i := range []int{1, 2, 3, 6, 7} { // user nice system irq softirq
			n, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("bench: /proc/stat: %q: %v", line, err)
			}
			busy += n
		}
		return busy, nil
	}
	return 0, errors.New("bench: /proc/stat has no cpu line")
}

// parseSchedstat returns the run time in nanoseconds from a
// /proc/PID/schedstat ("run_ns wait_ns timeslices").
func parseSchedstat(text string) (uint64, error) {
	f := strings.Fields(text)
	if len(f) != 3 {
		return 0, fmt.Errorf("bench: schedstat %q: not three fields", text)
	}
	return strconv.ParseUint(f[0], 10, 64)
}

// parseCtxSwitches returns a task's voluntary and involuntary context
// switches from its /proc/PID/task/TID/status.
func parseCtxSwitches(text string) (vol, invol uint64, err error) {
	found := 0
	for _, line := range strings.Split(text, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		var dst *uint64
		switch k {
		case "voluntary_ctxt_switches":
			dst = &vol
		case "nonvoluntary_ctxt_switches":
			dst = &invol
		default:
			continue
		}
		if *dst, err = strconv.ParseUint(strings.TrimSpace(v), 10, 64); err != nil {
			return 0, 0, fmt.Errorf("bench: status line %q: %v", line, err)
		}
		found++
	}
	if found != 2 {
		return 0, 0, errors.New("bench: status has no context switch counts")
	}
	return vol, invol, nil
}

// parseStatFlags returns the command name and the flags of a
// /proc/PID/stat (the name may hold spaces and parentheses: it ends at the
// last ')').
func parseStatFlags(text string) (comm string, flags uint64, err error) {
	i, j := strings.IndexByte(text, '('), strings.LastIndexByte(text, ')')
	if i < 0 || j < i {
		return "", 0, fmt.Errorf("bench: stat %.60q: no command name", text)
	}
	f := strings.Fields(text[j+1:])
	// state ppid pgrp session tty_nr tpgid flags
	if len(f) < 7 {
		return "", 0, fmt.Errorf("bench: stat %.60q: short", text)
	}
	flags, err = strconv.ParseUint(f[6], 10, 64)
	return text[i+1 : j], flags, err
}

// parseSyscallHist returns the system calls per thread from the hist file
// of a "hist:keys=common_pid" trigger on raw_syscalls:sys_enter: lines
// "{ common_pid:       1234 } hitcount:       5678".
func parseSyscallHist(text string) (map[int]uint64, error) {
	m := map[int]uint64{}
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "{ common_pid:")
		if !ok {
			continue
		}
		key, val, ok := strings.Cut(rest, "}")
		f := strings.Fields(val)
		if !ok || len(f) < 2 || f[0] != "hitcount:" {
			return nil, fmt.Errorf("bench: syscall histogram line %q", line)
		}
		tid, err := strconv.Atoi(strings.TrimSpace(key))
		if err != nil {
			return nil, fmt.Errorf("bench: syscall histogram line %q: %v", line, err)
		}
		n, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bench: syscall histogram line %q: %v", line, err)
		}
		m[tid] += n
	}
	return m, nil
}

// ParseOurGo returns the mount server's PID and its Go heap allocations so
// far from the output of `nfsrdma-mount stats DIR` (its "pid:" and
// "nfsrdma-go:" lines); allocs is -1 when the server does not report them
// (an older binary).
func ParseOurGo(text string) (pid int, allocs int64, err error) {
	allocs = -1
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "pid:"); ok {
			if pid, err = strconv.Atoi(strings.TrimSpace(v)); err != nil {
				return 0, 0, fmt.Errorf("bench: stats line %q: %v", line, err)
			}
		}
		if v, ok := strings.CutPrefix(line, "nfsrdma-go:"); ok {
			f := strings.Fields(v)
			if len(f) < 2 || f[0] != "heap_alloc_objects" {
				return 0, 0, fmt.Errorf("bench: stats line %q: not heap_alloc_objects N", line)
			}
			if allocs, err = strconv.ParseInt(f[1], 10, 64); err != nil {
				return 0, 0, fmt.Errorf("bench: stats line %q: %v", line, err)
			}
		}
	}
	if pid == 0 {
		return 0, 0, errors.New("bench: the stats name no server pid")
	}
	return pid, allocs, nil
}

// procCounts are one server process's counters, summed over its threads.
type procCounts struct {
	runNS, vol, invol uint64
	syscalls          uint64
	syscallsOK        bool
	allocs            int64 // -1: not reported
}

// costSnap is one reading of the counters around a workload.
type costSnap struct {
	busyTicks uint64
	kthreads  map[int]kthreadRun // by PID
	server    *procCounts        // nil: no server process (the kernel client)
}

type kthreadRun struct {
	nfsd  bool
	runNS uint64
}

// readKthreads reads the run time of every kernel thread.
func readKthreads() (map[int]kthreadRun, error) {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, err
	}
	m := map[int]kthreadRun{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "stat"))
		if err != nil {
			continue // gone
		}
		comm, flags, err := parseStatFlags(string(st))
		if err != nil || flags&pfKthread == 0 {
			continue
		}
		ss, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "schedstat"))
		if err != nil {
			continue
		}
		run, err := parseSchedstat(string(ss))
		if err != nil {
			return nil, err
		}
		m[pid] = kthreadRun{nfsd: strings.HasPrefix(comm, "nfsd"), runNS: run}
	}
	return m, nil
}

// readProcess sums the run time and context switches of pid's threads,
// and, with a syscall histogram, their system calls.
func readProcess(pid int, hist map[int]uint64) (*procCounts, error) {
	dir := filepath.Join(procRoot, strconv.Itoa(pid), "task")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("bench: the server process %d: %w", pid, err)
	}
	p := &procCounts{syscallsOK: hist != nil, allocs: -1}
	for _, e := range ents {
		ss, err1 := os.ReadFile(filepath.Join(dir, e.Name(), "schedstat"))
		st, err2 := os.ReadFile(filepath.Join(dir, e.Name(), "status"))
		if err1 != nil || err2 != nil {
			continue // the thread ended
		}
		run, err := parseSchedstat(string(ss))
		if err != nil {
			return nil, err
		}
		vol, invol, err := parseCtxSwitches(string(st))
		if err != nil {
			return nil, err
		}
		p.runNS += run
		p.vol += vol
		p.invol += invol
		if tid, err := strconv.Atoi(e.Name()); err == nil && hist != nil {
			p.syscalls += hist[tid]
		}
	}
	return p, nil
}

// syscallHist is the matrix's histogram trigger counting every thread's
// system calls.
type syscallHist struct {
	dir string // the event's directory in tracefs
}

const syscallTrigger = "hist:keys=common_pid:vals=hitcount:size=8192"

// startSyscallHist installs the trigger.
func startSyscallHist() (*syscallHist, error) {
	const tracefs = "/sys/kernel/tracing"
	if _, err := os.Stat(filepath.Join(tracefs, "events")); err != nil {
		if _, err := command(context.Background(), "mount", "-t", "tracefs", "nodev", tracefs); err != nil {
			return nil, fmt.Errorf("mounting tracefs: %w", err)
		}
	}
	h := &syscallHist{dir: filepath.Join(tracefs, "events/raw_syscalls/sys_enter")}
	if err := os.WriteFile(filepath.Join(h.dir, "trigger"), []byte(syscallTrigger), 0o200); err != nil {
		return nil, fmt.Errorf("installing the system call histogram: %w", err)
	}
	if _, err := h.read(); err != nil {
		h.stop()
		return nil, err
	}
	return h, nil
}

func (h *syscallHist) read() (map[int]uint64, error) {
	if h == nil {
		return nil, nil
	}
	data, err := os.ReadFile(filepath.Join(h.dir, "hist"))
	if err != nil {
		return nil, err
	}
	return parseSyscallHist(string(data))
}

func (h *syscallHist) stop() {
	os.WriteFile(filepath.Join(h.dir, "trigger"), []byte("!"+syscallTrigger), 0o200)
}

// readCost reads the counters: pid is the server process (0: none), allocs
// its allocations so far (-1: unknown). /proc/stat is read last before a
// workload and first after it (after says which), so that reading the rest
// falls outside the window.
func readCost(pid int, allocs int64, h *syscallHist, after bool) (*costSnap, error) {
	s := &costSnap{}
	busy := func() error {
		data, err := os.ReadFile(filepath.Join(procRoot, "stat"))
		if err != nil {
			return err
		}
		s.busyTicks, err = parseProcStatBusy(string(data))
		return err
	}
	if after {
		if err := busy(); err != nil {
			return nil, err
		}
	}
	var err error
	if s.kthreads, err = readKthreads(); err != nil {
		return nil, err
	}
	if pid > 0 {
		hist, err := h.read()
		if err != nil {
			return nil, err
		}
		if s.server, err = readProcess(pid, hist); err != nil {
			return nil, err
		}
		s.server.allocs = allocs
	}
	if !after {
		if err := busy(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// costDelta is what one client's workload cost in one round.
type costDelta struct {
	busyNS            uint64
	kthreadNS, nfsdNS uint64
	server            *procCounts // the growth; nil without a server
}

// sub is what happened between b and a. A kernel thread that ended in
// between is lost; one that started counts whole.
func (a *costSnap) sub(b *costSnap) *costDelta {
	d := &costDelta{busyNS: uint64(time.Duration(sat(a.busyTicks, b.busyTicks)) * clockTick)}
	for pid, k := range a.kthreads {
		n := sat(k.runNS, b.kthreads[pid].runNS)
		if k.nfsd {
			d.nfsdNS += n
		} else {
			d.kthreadNS += n
		}
	}
	if a.server != nil && b.server != nil {
		s := &procCounts{runNS: sat(a.server.runNS, b.server.runNS), vol: sat(a.server.vol, b.server.vol),
			invol: sat(a.server.invol, b.server.invol), syscalls: sat(a.server.syscalls, b.server.syscalls),
			syscallsOK: a.server.syscallsOK && b.server.syscallsOK, allocs: -1}
		if a.server.allocs >= 0 && b.server.allocs >= 0 {
			s.allocs = max(a.server.allocs-b.server.allocs, 0)
		}
		d.server = s
	}
	return d
}

func sat(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// OpCost is what a client's work cost per unit of it (MatrixRow.Per),
// over every round that measured it.
type OpCost struct {
	Client string `json:"client"`
	Units  int64  `json:"units"` // the work it is divided by, all rounds
	// CPUUS is the guest's CPU time, all tasks, in µs per unit; KThreadUS
	// the kernel threads' but nfsd's, NfsdUS nfsd's (the NFS server).
	CPUUS     float64 `json:"cpu_us"`
	KThreadUS float64 `json:"kthread_us"`
	NfsdUS    float64 `json:"nfsd_us"`
	// Server is the FUSE server process's; nil for the kernel client.
	Server *ServerCost `json:"server,omitempty"`
}

// ServerCost is a server process's cost per unit: a count that was not
// measured is -1.
type ServerCost struct {
	CPUUS    float64 `json:"cpu_us"`
	Syscalls float64 `json:"syscalls"`
	VolCSW   float64 `json:"csw_voluntary"`
	InvolCSW float64 `json:"csw_involuntary"`
	Allocs   float64 `json:"allocs"`
}

// rowCost sums a client's costs over the rounds and divides them by its
// units; nil when no round measured them.
func rowCost(name string, ss []*sample) *OpCost {
	var units int64
	var busy, kth, nfsd float64
	var srv struct {
		run, vol, invol, sys, allocs float64
		n, sysOK, allocsOK           int
	}
	rounds := 0
	for _, s := range ss {
		if s == nil || s.cost == nil || s.units <= 0 {
			continue
		}
		rounds++
		units += s.units
		busy += float64(s.cost.busyNS)
		kth += float64(s.cost.kthreadNS)
		nfsd += float64(s.cost.nfsdNS)
		if p := s.cost.server; p != nil {
			srv.n++
			srv.run += float64(p.runNS)
			srv.vol += float64(p.vol)
			srv.invol += float64(p.invol)
			if p.syscallsOK {
				srv.sys += float64(p.syscalls)
				srv.sysOK++
			}
			if p.allocs >= 0 {
				srv.allocs += float64(p.allocs)
				srv.allocsOK++
			}
		}
	}
	if rounds == 0 {
		return nil
	}
	u := float64(units)
	c := &OpCost{Client: name, Units: units, CPUUS: busy / 1e3 / u, KThreadUS: kth / 1e3 / u, NfsdUS: nfsd / 1e3 / u}
	if srv.n > 0 {
		c.Server = &ServerCost{CPUUS: srv.run / 1e3 / u, VolCSW: srv.vol / u, InvolCSW: srv.invol / u, Syscalls: -1, Allocs: -1}
		// A count some round could not take is not divided by all
		// rounds' units.
		if srv.sysOK == srv.n {
			c.Server.Syscalls = srv.sys / u
		}
		if srv.allocsOK == srv.n {
			c.Server.Allocs = srv.allocs / u
		}
	}
	return c
}
