package sunrpc

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// clockTransport answers every call after advancing a fake clock by delay,
// or fails: the round trips the meter sees take exactly delay.
type clockTransport struct {
	now   time.Time
	delay time.Duration
	err   error
}

func (f *clockTransport) RoundTrip(ctx context.Context, req *Request) (*Reply, error) {
	f.now = f.now.Add(f.delay)
	if f.err != nil {
		return nil, f.err
	}
	return NewReply(make([]byte, 100), nil, nil), nil
}

func (f *clockTransport) Close() error { return nil }

func callHead(prog, proc uint32) []byte {
	return AppendCall(nil, &CallHeader{XID: 1, Prog: prog, Vers: 3, Proc: proc})
}

// testNames names program 100003's procedure 6 "READ" and 1 "GETATTR",
// and any procedure of 100005 "MOUNT/n", as nfs3.ProgramProcName does.
func testNames(prog, proc uint32) (string, bool) {
	switch {
	case prog == 100003 && proc == 6:
		return "READ", true
	case prog == 100003 && proc == 1:
		return "GETATTR", true
	case prog == 100005:
		return fmt.Sprintf("MOUNT/%d", proc), true
	}
	return "", false
}

func TestMeteredTransport(t *testing.T) {
	ft := &clockTransport{now: time.Unix(1000, 0), delay: 2 * time.Millisecond}
	m := NewMeteredTransport(ft, testNames)
	m.now = func() time.Time { return ft.now }
	ctx := context.Background()
	for range 3 {
		if _, err := m.RoundTrip(ctx, &Request{Head: callHead(100003, 6), Bulk: make([]byte, 10)}); err != nil {
			t.Fatal(err)
		}
	}
	ft.err = &CallError{Err: context.DeadlineExceeded}
	ft.delay = 3 * time.Second
	m.RoundTrip(ctx, &Request{Head: callHead(100003, 1)})
	m.RoundTrip(ctx, &Request{Head: callHead(100005, 1)})
	m.RoundTrip(ctx, &Request{Head: callHead(100021, 7)}) // a program the namer does not know
	m.RoundTrip(ctx, &Request{Head: []byte{1, 2, 3}})     // not a call: not counted

	st := m.Stats()
	if len(st) != 4 {
		t.Fatalf("%d procedures: %+v", len(st), st)
	}
	get, read, mnt, nlm := st[0], st[1], st[2], st[3]
	if get.Name != "GETATTR" || read.Name != "READ" || mnt.Name != "MOUNT/1" || nlm.Name != "100021/7" {
		t.Fatalf("names %q %q %q %q", get.Name, read.Name, mnt.Name, nlm.Name)
	}
	if read.Calls != 3 || read.Errors != 0 || read.BytesRecv != 300 || read.BytesSent != uint64(3*(len(callHead(0, 0))+12)) {
		t.Errorf("READ %+v", read)
	}
	if read.RTTMax != 2*time.Millisecond || read.RTTTotal != 6*time.Millisecond || read.MeanRTT() != 2*time.Millisecond {
		t.Errorf("READ times: max %v total %v mean %v, want 2ms 6ms 2ms", read.RTTMax, read.RTTTotal, read.MeanRTT())
	}
	// 2 ms = 2000 us: bucket 11 (under 2048 us).
	if read.RTTHist[11] != 3 {
		t.Errorf("READ histogram %v, want 3 in bucket 11", read.RTTHist)
	}
	if get.Errors != 1 || get.Timeouts != 1 || get.BytesRecv != 0 || get.RTTHist[RTTBuckets-1] != 0 || get.RTTHist[22] != 1 {
		t.Errorf("GETATTR %+v", get)
	}
	var sb strings.Builder
	if err := WriteStats(&sb, st); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sb.String(), "READ: calls 3 errors 0 timeouts 0 sent 156 recv 300 rtt_mean 2ms rtt_max 2ms hist <2.048ms:3\n") {
		t.Errorf("WriteStats:\n%s", sb.String())
	}
	if n := NewMeteredTransport(ft, nil); n.procName(100003, 6) != "100003/6" {
		t.Errorf("no namer: %q", n.procName(100003, 6))
	}
}

func TestRTTBuckets(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int
	}{
		{0, 0}, {-time.Second, 0}, {time.Microsecond, 1}, {1023 * time.Microsecond, 10},
		{1024 * time.Microsecond, 11}, {time.Hour, RTTBuckets - 1},
	} {
		if got := rttBucket(tc.d); got != tc.want {
			t.Errorf("rttBucket(%v) = %d, want %d", tc.d, got, tc.want)
		}
		if b := BucketBound(tc.want); tc.want < RTTBuckets-1 && tc.d >= b {
			t.Errorf("%v is in bucket %d, bounded by %v", tc.d, tc.want, b)
		}
	}
	if BucketBound(1) != 2*time.Microsecond || BucketBound(RTTBuckets-1) != 0 {
		t.Error("BucketBound")
	}
}

func TestCallProcedure(t *testing.T) {
	prog, proc, ok := CallProcedure(callHead(100003, 7))
	if !ok || prog != 100003 || proc != 7 {
		t.Errorf("CallProcedure = %d, %d, %v", prog, proc, ok)
	}
	reply := AppendReply(nil, &ReplyHeader{XID: 1, Stat: MsgAccepted})
	for _, h := range [][]byte{nil, callHead(1, 2)[:23], append(reply, make([]byte, 24)...)} {
		if _, _, ok := CallProcedure(h); ok {
			t.Errorf("CallProcedure(% x) took it for a call", h)
		}
	}
}
