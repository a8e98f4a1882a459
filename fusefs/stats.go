package fusefs

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"sync"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// RTTBuckets is the number of round-trip-time histogram buckets: bucket i
// counts round trips shorter than 2^i microseconds (the last one counts the
// rest).
const RTTBuckets = 24

// OpStats is one RPC procedure's counters, in the spirit of the per-op lines
// of /proc/self/mountstats: how many calls went out, how many failed at the
// transport, the bytes each way and the round-trip times.
type OpStats struct {
	Prog, Proc uint32
	Name       string // "READ", "GETATTR"... or "prog/proc" for other programs
	Calls      uint64 // RoundTrips (a retransmission by the RPC layer's retry policy counts again)
	Errors     uint64 // RoundTrips that returned an error (timeouts included)
	Timeouts   uint64 // RoundTrips ended by a deadline (retransmitted or given up)
	BytesSent  uint64 // call messages as sent inline (head, bulk, pad, tail)
	BytesRecv  uint64 // reply messages (inline part plus bulk data)
	RTTTotal   time.Duration
	RTTMax     time.Duration
	RTTHist    [RTTBuckets]uint64 // by log2 of the round trip in microseconds
}

// MeanRTT returns the mean round-trip time.
func (s *OpStats) MeanRTT() time.Duration {
	if s.Calls == 0 {
		return 0
	}
	return s.RTTTotal / time.Duration(s.Calls)
}

// MeteredTransport is a sunrpc.Transport that counts and times every call by
// program and procedure, read from the call header (RFC 5531 §9: xid,
// msg_type, rpcvers, prog, vers, proc). It is safe for concurrent use.
type MeteredTransport struct {
	sunrpc.Transport

	mu  sync.Mutex
	ops map[uint64]*OpStats // by prog<<32 | proc
}

// NewMeteredTransport wraps t. Close closes t.
func NewMeteredTransport(t sunrpc.Transport) *MeteredTransport {
	return &MeteredTransport{Transport: t, ops: make(map[uint64]*OpStats)}
}

// RoundTrip times req's round trip on the wrapped transport.
func (m *MeteredTransport) RoundTrip(ctx context.Context, req *sunrpc.Request) (*sunrpc.Reply, error) {
	prog, proc, ok := callProc(req.Head)
	start := time.Now()
	rep, err := m.Transport.RoundTrip(ctx, req)
	rtt := time.Since(start)
	if !ok {
		return rep, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	key := uint64(prog)<<32 | uint64(proc)
	s := m.ops[key]
	if s == nil {
		s = &OpStats{Prog: prog, Proc: proc, Name: procName(prog, proc)}
		m.ops[key] = s
	}
	s.Calls++
	s.BytesSent += uint64(req.Len())
	if err != nil {
		s.Errors++
		if errors.Is(err, context.DeadlineExceeded) {
			s.Timeouts++
		}
	} else if rep != nil {
		s.BytesRecv += uint64(len(rep.Inline) + len(rep.Bulk))
	}
	s.RTTTotal += rtt
	s.RTTMax = max(s.RTTMax, rtt)
	s.RTTHist[rttBucket(rtt)]++
	return rep, err
}

// Stats returns a snapshot of the counters of every procedure called so
// far, by program and procedure number.
func (m *MeteredTransport) Stats() []OpStats {
	m.mu.Lock()
	out := make([]OpStats, 0, len(m.ops))
	for _, s := range m.ops {
		out = append(out, *s)
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b OpStats) int {
		if a.Prog != b.Prog {
			return int(a.Prog) - int(b.Prog)
		}
		return int(a.Proc) - int(b.Proc)
	})
	return out
}

// callProc reads prog and proc from an RPC call header.
func callProc(head []byte) (prog, proc uint32, ok bool) {
	if len(head) < 24 || binary.BigEndian.Uint32(head[4:]) != uint32(sunrpc.MsgCall) {
		return 0, 0, false
	}
	return binary.BigEndian.Uint32(head[12:]), binary.BigEndian.Uint32(head[20:]), true
}

func procName(prog, proc uint32) string {
	switch prog {
	case nfs3.Program:
		return nfs3.ProcName(proc)
	case nfs3.MountProgram:
		return fmt.Sprintf("MOUNT/%d", proc)
	case nfs3.ACLProgram:
		switch proc {
		case nfs3.ACLProcGetacl:
			return "NFSACL/GETACL"
		case nfs3.ACLProcSetacl:
			return "NFSACL/SETACL"
		}
		return fmt.Sprintf("NFSACL/%d", proc)
	}
	return fmt.Sprintf("%d/%d", prog, proc)
}

func rttBucket(d time.Duration) int {
	us := uint64(max(d.Microseconds(), 0))
	return min(bits.Len64(us), RTTBuckets-1)
}

// BucketBound returns the exclusive upper bound of histogram bucket i (the
// last bucket has none: 0).
func BucketBound(i int) time.Duration {
	if i >= RTTBuckets-1 {
		return 0
	}
	return time.Duration(1<<i) * time.Microsecond
}

// WriteStats formats ops one procedure a line: calls, errors, timeouts,
// bytes each way, mean and max round trip, and the non-empty histogram
// buckets as "<bound:count".
func WriteStats(w io.Writer, ops []OpStats) error {
	for i := range ops {
		s := &ops[i]
		if s.Calls == 0 {
			continue
		}
		if _, err := fmt.Fprintf(w, "%12s: calls %d errors %d timeouts %d sent %d recv %d rtt_mean %v rtt_max %v hist",
			s.Name, s.Calls, s.Errors, s.Timeouts, s.BytesSent, s.BytesRecv,
			s.MeanRTT().Round(time.Microsecond), s.RTTMax.Round(time.Microsecond)); err != nil {
			return err
		}
		for b, n := range s.RTTHist {
			if n == 0 {
				continue
			}
			bound := "inf"
			if d := BucketBound(b); d > 0 {
				bound = d.String()
			}
			if _, err := fmt.Fprintf(w, " <%s:%d", bound, n); err != nil {
				return err
			}
		}
		if _, err := fmt.Fprintln(w); err != nil {
			return err
		}
	}
	return nil
}
