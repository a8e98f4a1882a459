package fusefs

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// slowLink makes a transport look like the test bed's emulated RDMA link:
// calls share a link of bw bytes per second (their bytes go over it one
// call after another) and each round trip takes rtt more, overlapping
// freely, so throughput depends on how many calls are in flight as it does
// in the guest.
type slowLink struct {
	sunrpc.Transport
	bw  float64
	rtt time.Duration

	mu   sync.Mutex
	busy time.Time // the link is taken until then
}

func (l *slowLink) RoundTrip(ctx context.Context, req *sunrpc.Request) (*sunrpc.Reply, error) {
	n := len(req.Head) + len(req.Bulk) + len(req.Tail) + len(req.ReplyBulk)
	l.mu.Lock()
	start := time.Now()
	if start.Before(l.busy) {
		start = l.busy
	}
	l.busy = start.Add(time.Duration(float64(n) / l.bw * float64(time.Second)))
	done := l.busy.Add(l.rtt)
	l.mu.Unlock()
	time.Sleep(time.Until(done))
	return l.Transport.RoundTrip(ctx, req)
}

// TestFioThroughput measures fio's 1 MiB sequential write and read (direct
// I/O, libaio, queue depth 16, as the bed's kernel-client jobs; and
// buffered) through a mount of go-nfs over TCP on this host, over a link
// like the bed's (FUSEFS_FIO_RTT, default 20ms; FUSEFS_FIO_MIBPS, default
// 50; FUSEFS_FIO_RTT=0 for none). The figures only compare versions of
// this package on one machine. It runs with FUSEFS_FIO=1 and fio installed.
func TestFioThroughput(t *testing.T) {
	if os.Getenv("FUSEFS_FIO") == "" {
		t.Skip("set FUSEFS_FIO=1 to measure fio throughput through the mount")
	}
	if _, err := exec.LookPath("fio"); err != nil {
		t.Skip("no fio")
	}
	rtt, mibps := 20*time.Millisecond, 50.0
	if s := os.Getenv("FUSEFS_FIO_RTT"); s != "" {
		var err error
		rtt, err = time.ParseDuration(s)
		check(t, err)
	}
	if s := os.Getenv("FUSEFS_FIO_MIBPS"); s != "" {
		var err error
		mibps, err = strconv.ParseFloat(s, 64)
		check(t, err)
	}
	var wrap func(sunrpc.Transport) sunrpc.Transport
	if rtt > 0 {
		wrap = func(tr sunrpc.Transport) sunrpc.Transport {
			return &slowLink{Transport: tr, bw: mibps * (1 << 20), rtt: rtt}
		}
		t.Logf("link: %.0f MiB/s, round trip %v", mibps, rtt)
	}
	srv := startGoNFS(t, backendDisk)
	m := mountGoNFSVia(t, srv, nil, wrap)
	file := m.path("fio")
	size := os.Getenv("FUSEFS_FIO_SIZE")
	if size == "" {
		size = "64M"
	}
	for _, job := range []struct{ name, rw, direct string }{
		{"layout", "write", "1"},
		{"seq-write direct", "write", "1"},
		{"seq-read direct", "read", "1"},
		{"seq-write buffered", "write", "0"},
		{"seq-read buffered", "read", "0"},
	} {
		out, err := exec.Command("fio", "--name=j", "--filename="+file, "--rw="+job.rw, "--bs=1M", "--size="+size,
			"--direct="+job.direct, "--ioengine=libaio", "--iodepth=16", "--output-format=json").Output()
		if err != nil {
			t.Fatalf("fio %s: %v\n%s", job.name, err, out)
		}
		var r struct {
			Jobs []struct {
				Read, Write struct {
					BW float64 `json:"bw"`
				}
			} `json:"jobs"`
		}
		if err := json.Unmarshal(out, &r); err != nil || len(r.Jobs) == 0 {
			t.Fatalf("fio %s: %v\n%s", job.name, err, out)
		}
		t.Logf("%-20s %7.1f MiB/s", job.name, (r.Jobs[0].Read.BW+r.Jobs[0].Write.BW)/1024)
	}
	var sb strings.Builder
	check(t, sunrpc.WriteStats(&sb, m.metered.Stats()))
	t.Logf("per-operation statistics:\n%s", sb.String())
}
