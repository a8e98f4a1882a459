package faults

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/nfsrdma/nfsrdma/verbs"
)

// Snapshot is what a client holds at one moment: its verbs resources
// (endpoints, QPs, CQs, MRs, memory windows), goroutines and open file
// descriptors.
type Snapshot struct {
	Verbs      verbs.ResourceCounts
	Goroutines int
	Threads    int // of another process (TakeProcess), which has no goroutine count to give
	FDs        int
}

// Take snapshots this process with the verbs resources of fab (nil: none).
func Take(fab verbs.Fabric) Snapshot {
	s := Snapshot{Goroutines: runtime.NumGoroutine(), FDs: countFDs("self")}
	if fab != nil {
		s.Verbs = fab.Live()
	}
	return s
}

// TakeProcess snapshots another process (a mount server): its fds and
// threads.
func TakeProcess(pid int) Snapshot {
	s := Snapshot{FDs: countFDs(strconv.Itoa(pid))}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Threads:"); ok {
				s.Threads, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
	}
	return s
}

func countFDs(pid string) int {
	ents, err := os.ReadDir("/proc/" + pid + "/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

// Delta formats what changed from s to now: "none" when nothing did.
func (s Snapshot) Delta(now Snapshot) string {
	var parts []string
	add := func(name string, a, b int) {
		if a != b {
			parts = append(parts, fmt.Sprintf("%s %+d", name, b-a))
		}
	}
	add("endpoints", s.Verbs.Endpoints, now.Verbs.Endpoints)
	add("QPs", s.Verbs.QPs, now.Verbs.QPs)
	add("CQs", s.Verbs.CQs, now.Verbs.CQs)
	add("PDs", s.Verbs.PDs, now.Verbs.PDs)
	add("MRs", s.Verbs.MRs, now.Verbs.MRs)
	add("MWs", s.Verbs.MWs, now.Verbs.MWs)
	add("goroutines", s.Goroutines, now.Goroutines)
	add("threads", s.Threads, now.Threads)
	add("fds", s.FDs, now.FDs)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// Settle waits up to timeout for the snapshot taken by take to equal base
// (goroutines and connections wind down asynchronously) and returns the
// last one taken.
func Settle(base Snapshot, timeout time.Duration, take func() Snapshot) Snapshot {
	return SettleUntil(timeout, take, func(s Snapshot) bool { return s == base })
}

// SettleUntil takes snapshots with take, 50 ms apart, until done accepts
// one or timeout has passed, and returns the last one taken.
func SettleUntil(timeout time.Duration, take func() Snapshot, done func(Snapshot) bool) Snapshot {
	deadline := time.Now().Add(timeout)
	for {
		now := take()
		if done(now) || time.Now().After(deadline) {
			return now
		}
		time.Sleep(50 * time.Millisecond)
	}
}
