package bench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/rcpair"
)

// nfsrdma's own figures at the verbs layer, measured the way perftest
// measures the bed's ceiling (a connected pair in one process here, two
// processes there): a SEND/RECV ping-pong beside ib_send_lat and a stream
// of RDMA WRITEs beside ib_write_bw. They run on any verbs.Fabric: ibv on
// rxe0 in the guest, sim in this package's tests.

// Latency is a set of latency samples, sorted.
type Latency struct {
	Samples []time.Duration
}

func newLatency(s []time.Duration) Latency {
	slices.Sort(s)
	return Latency{Samples: s}
}

// Median is the middle sample (perftest's t_typical).
func (l Latency) Median() time.Duration { return l.Percentile(50) }

// Percentile is the sample below which p percent of them fall.
func (l Latency) Percentile(p float64) time.Duration {
	if len(l.Samples) == 0 {
		return 0
	}
	i := int(p / 100 * float64(len(l.Samples)-1))
	return l.Samples[min(max(i, 0), len(l.Samples)-1)]
}

// Mean is the average sample (perftest's t_avg).
func (l Latency) Mean() time.Duration {
	if len(l.Samples) == 0 {
		return 0
	}
	var sum time.Duration
	for _, s := range l.Samples {
		sum += s
	}
	return sum / time.Duration(len(l.Samples))
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// PingPongConfig shapes a SEND/RECV ping-pong.
type PingPongConfig struct {
	Size   int  // message size in bytes (ib_send_lat -s 2)
	Warmup int  // round trips not measured
	Iters  int  // round trips measured (ib_send_lat: 1000)
	Spin   bool // both sides busy-poll their CQs, as perftest does; false: poll, then wait on the completion channel
}

// Ping-pong queue shapes: receives are replenished in batches and sends
// signaled selectively, as a transport would do them.
const (
	ppDepth       = 64 // send and receive queue depth of each side
	ppSignalEvery = 16 // one send in this many is signaled
	ppRecvBatch   = 8  // receives reposted per post
	ppMaxInline   = 32 // inline size asked for small messages (rxe's limit in the bed)
)

// ppSide is one end of the ping-pong.
type ppSide struct {
	s         *rcpair.Side
	buf       *rcpair.Buffer // ppDepth receive slots, then the send slot
	slot      int
	spin      bool
	sendWR    [1]verbs.SendWR
	sends     int
	signaled  int // signaled sends not yet reaped
	repost    []verbs.RecvWR
	recvWCs   [1]verbs.Completion
	sendWCs   [ppDepth]verbs.Completion
	recvSlots [ppDepth][1]verbs.SGE
}

func newPPSide(s *rcpair.Side, size int, spin bool) (*ppSide, error) {
	slot := max(size, 64)
	buf, err := rcpair.NewBuffer(s.PD, slot*(ppDepth+1), verbs.AccessLocalWrite)
	if err != nil {
		return nil, err
	}
	x := &ppSide{s: s, buf: buf, slot: slot, spin: spin, repost: make([]verbs.RecvWR, 0, ppDepth)}
	flags := verbs.SendFlags(0)
	if size <= s.QP.Caps().MaxInlineData {
		flags = verbs.SendInline
	}
	x.sendWR[0] = verbs.SendWR{Opcode: verbs.OpSend, Flags: flags, SGL: []verbs.SGE{buf.SGE(uint64(slot*ppDepth), size)}}
	for i := range ppDepth {
		x.recvSlots[i][0] = buf.SGE(uint64(i*slot), slot)
		x.repost = append(x.repost, verbs.RecvWR{ID: uint64(i), SGL: x.recvSlots[i][:]})
	}
	if _, err := s.QP.PostRecv(x.repost); err != nil {
		buf.Close()
		return nil, err
	}
	x.repost = x.repost[:0]
	return x, nil
}

// poll reaps at least one completion into wcs: busy-polling, or waiting on
// the CQ between polls.
func (x *ppSide) poll(ctx context.Context, cq verbs.CQ, wcs []verbs.Completion) (int, error) {
	sp, _ := cq.(verbs.SpinPoller)
	for i := 1; ; i++ {
		var n int
		var err error
		if x.spin && sp != nil {
			n, err = sp.PollSpin(wcs, 100*time.Millisecond)
		} else {
			n, err = cq.Poll(wcs)
		}
		if err != nil || n > 0 {
			for _, wc := range wcs[:n] {
				if wc.Status != verbs.StatusSuccess {
					return n, &verbs.CompletionError{Completion: wc}
				}
			}
			return n, err
		}
		if !x.spin {
			if err := cq.Wait(ctx); err != nil {
				return 0, err
			}
		} else if i%1024 == 0 || sp != nil {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
		}
	}
}

// send posts the message, reaping signaled sends first when two are
// outstanding (at most 47 unreaped WRs in a queue of 64).
func (x *ppSide) send(ctx context.Context) error {
	for x.signaled >= 2 {
		n, err := x.poll(ctx, x.s.SendCQ, x.sendWCs[:])
		if err != nil {
			return err
		}
		x.signaled -= n
	}
	wr := &x.sendWR[0]
	wr.Flags &^= verbs.SendSignaled
	if x.sends%ppSignalEvery == ppSignalEvery-1 {
		wr.Flags |= verbs.SendSignaled
		x.signaled++
	}
	wr.ID = uint64(x.sends)
	x.sends++
	_, err := x.s.QP.PostSend(x.sendWR[:])
	return err
}

// recv waits for one message and queues its receive for reposting.
func (x *ppSide) recv(ctx context.Context) error {
	if _, err := x.poll(ctx, x.s.RecvCQ, x.recvWCs[:]); err != nil {
		return err
	}
	id := x.recvWCs[0].ID
	x.repost = append(x.repost, verbs.RecvWR{ID: id, SGL: x.recvSlots[id][:]})
	if len(x.repost) == ppRecvBatch {
		if _, err := x.s.QP.PostRecv(x.repost); err != nil {
			return err
		}
		x.repost = x.repost[:0]
	}
	return nil
}

// connectPair connects a pair, asking for inline sends when size allows
// and falling back to none when the device refuses.
func connectPair(ctx context.Context, f verbs.Fabric, listen, connect netip.AddrPort, cfg rcpair.PairConfig, size int) (*rcpair.Pair, error) {
	if size <= ppMaxInline {
		c := cfg
		c.MaxInlineData = ppMaxInline
		if p, err := rcpair.Connect(ctx, f, listen, connect, c); err == nil {
			return p, nil
		}
	}
	return rcpair.Connect(ctx, f, listen, connect, cfg)
}

// PingPong measures SEND/RECV round trips between a connected pair: the
// client sends, the server answers each message with one of its own. It
// returns one-way latencies, half of each round trip less the cost of the
// clock read that timed it (ClockCost), as ib_send_lat reports them.
func PingPong(ctx context.Context, f verbs.Fabric, listen, connect netip.AddrPort, cfg PingPongConfig) (Latency, error) {
	if cfg.Size <= 0 || cfg.Iters <= 0 {
		return Latency{}, fmt.Errorf("bench: ping-pong of %d bytes, %d round trips", cfg.Size, cfg.Iters)
	}
	pcfg := rcpair.PairConfig{SendDepth: ppDepth, RecvDepth: ppDepth, SendSGE: 1, RecvSGE: 1}
	p, err := connectPair(ctx, f, listen, connect, pcfg, cfg.Size)
	if err != nil {
		return Latency{}, err
	}
	defer p.Close()
	cli, err := newPPSide(p.Client, cfg.Size, cfg.Spin)
	if err != nil {
		return Latency{}, err
	}
	defer cli.buf.Close()
	srv, err := newPPSide(p.Server, cfg.Size, cfg.Spin)
	if err != nil {
		return Latency{}, err
	}
	defer srv.buf.Close()

	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() {
		for {
			if err := srv.recv(sctx); err != nil {
				served <- err
				return
			}
			if err := srv.send(sctx); err != nil {
				served <- err
				return
			}
		}
	}()
	total := cfg.Warmup + cfg.Iters
	stamps := make([]time.Time, total+1)
	var cerr error
	for i := range total {
		stamps[i] = time.Now()
		if cerr = cli.send(ctx); cerr != nil {
			break
		}
		if cerr = cli.recv(ctx); cerr != nil {
			break
		}
	}
	stamps[total] = time.Now()
	stop()
	serr := <-served
	if errors.Is(serr, context.Canceled) && ctx.Err() == nil {
		serr = nil
	}
	if err := errors.Join(cerr, serr); err != nil {
		return Latency{}, fmt.Errorf("bench: ping-pong: %w", err)
	}
	// Each round trip includes one clock read; perftest reads the TSC,
	// Go's clock may be a system call (HPET in the guest: ~3 µs).
	clock := ClockCost()
	samples := make([]time.Duration, cfg.Iters)
	for i := range samples {
		j := cfg.Warmup + i
		samples[i] = max(stamps[j+1].Sub(stamps[j])-clock, 0) / 2
	}
	return newLatency(samples), nil
}

// ClockCost is the median cost of one time.Now, which every latency
// sample here pays once and PingPong subtracts.
func ClockCost() time.Duration {
	const n = 1001
	var stamps [n]time.Time
	for i := range stamps {
		stamps[i] = time.Now()
	}
	d := make([]time.Duration, n-1)
	for i := range d {
		d[i] = stamps[i+1].Sub(stamps[i])
	}
	return newLatency(d).Median()
}

// BandwidthConfig shapes a stream of RDMA WRITEs.
type BandwidthConfig struct {
	Size  int  // bytes per WRITE (ib_write_bw -s 65536)
	Depth int  // WRITEs outstanding (ib_write_bw's tx depth is 128)
	Iters int  // WRITEs measured (ib_write_bw: 5000)
	Spin  bool // busy-poll the send CQ, as perftest does; false: poll, then wait
}

// Stream shapes: WRs are posted in chains of up to bwChain (one crossing
// each), one in Depth/4 signaled.
const bwChain = 16

// WriteBandwidth streams RDMA WRITEs of cfg.Size bytes from the client into
// the server's memory, keeping cfg.Depth outstanding, and returns MiB/s
// (2^20 bytes, as perftest's MB/sec).
func WriteBandwidth(ctx context.Context, f verbs.Fabric, listen, connect netip.AddrPort, cfg BandwidthConfig) (float64, error) {
	if cfg.Size <= 0 || cfg.Depth <= 0 || cfg.Iters <= 0 {
		return 0, fmt.Errorf("bench: %d WRITEs of %d bytes at depth %d", cfg.Iters, cfg.Size, cfg.Depth)
	}
	p, err := rcpair.Connect(ctx, f, listen, connect, rcpair.PairConfig{SendDepth: cfg.Depth, RecvDepth: 4, SendSGE: 1, RecvSGE: 1})
	if err != nil {
		return 0, err
	}
	defer p.Close()
	src, err := rcpair.NewBuffer(p.Client.PD, cfg.Size, verbs.AccessLocalWrite)
	if err != nil {
		return 0, err
	}
	defer src.Close()
	slots := min(cfg.Depth, 16)
	dst, err := rcpair.NewBuffer(p.Server.PD, cfg.Size*slots, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		return 0, err
	}
	defer dst.Close()
	rkey := dst.MR.RKey()

	signalEvery := max(cfg.Depth/4, 1)
	sgl := []verbs.SGE{src.SGE(0, cfg.Size)}
	chain := make([]verbs.SendWR, min(bwChain, cfg.Depth))
	wcs := make([]verbs.Completion, cfg.Depth)
	x := &ppSide{spin: cfg.Spin}
	posted, done := 0, 0
	start := time.Now()
	for done < cfg.Iters {
		for posted < cfg.Iters && posted-done < cfg.Depth {
			n := min(len(chain), cfg.Iters-posted, cfg.Depth-(posted-done))
			for i := range n {
				id := posted + i
				w := &chain[i]
				*w = verbs.SendWR{ID: uint64(id), Opcode: verbs.OpRDMAWrite, SGL: sgl,
					RemoteAddr: dst.Addr(uint64(id%slots) * uint64(cfg.Size)), RKey: rkey}
				if id%signalEvery == signalEvery-1 || id == cfg.Iters-1 {
					w.Flags = verbs.SendSignaled
				}
			}
			if _, err := p.Client.QP.PostSend(chain[:n]); err != nil {
				return 0, err
			}
			posted += n
		}
		n, err := x.poll(ctx, p.Client.SendCQ, wcs)
		if err != nil {
			return 0, fmt.Errorf("bench: RDMA WRITE stream: %w", err)
		}
		// A signaled completion retires every WR posted before it.
		for _, wc := range wcs[:n] {
			done = max(done, int(wc.ID)+1)
		}
	}
	el := time.Since(start)
	return float64(cfg.Iters) * float64(cfg.Size) / (1 << 20) / el.Seconds(), nil
}
