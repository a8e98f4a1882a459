package xprttest

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"syscall"
	"testing"

	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
)

// ibvPostLimit is the most WRs the ibv binding takes in one post (its
// per-post scratch arrays).
const ibvPostLimit = 64

// chainLimitFabric wraps a fabric so that every QP created through its
// listeners refuses posts of more than ibvPostLimit WRs with E2BIG, as the
// ibv binding does, and records the longest receive chain posted.
type chainLimitFabric struct {
	verbs.Fabric
	mu          sync.Mutex
	longestRecv int
}

func (f *chainLimitFabric) Listen(addr netip.AddrPort) (verbs.Listener, error) {
	l, err := f.Fabric.Listen(addr)
	if err != nil {
		return nil, err
	}
	return chainLimitListener{l, f}, nil
}

type chainLimitListener struct {
	verbs.Listener
	f *chainLimitFabric
}

func (l chainLimitListener) Accept(ctx context.Context) (verbs.Endpoint, error) {
	ep, err := l.Listener.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return chainLimitEndpoint{ep, l.f}, nil
}

type chainLimitEndpoint struct {
	verbs.Endpoint
	f *chainLimitFabric
}

func (ep chainLimitEndpoint) CreateQP(pd verbs.PD, cfg verbs.QPConfig) (verbs.QP, error) {
	qp, err := ep.Endpoint.CreateQP(pd, cfg)
	if err != nil {
		return nil, err
	}
	return chainLimitQP{qp, ep.f}, nil
}

type chainLimitQP struct {
	verbs.QP
	f *chainLimitFabric
}

func (q chainLimitQP) PostRecv(wrs []verbs.RecvWR) (int, error) {
	q.f.mu.Lock()
	q.f.longestRecv = max(q.f.longestRecv, len(wrs))
	q.f.mu.Unlock()
	if len(wrs) > ibvPostLimit {
		return 0, fmt.Errorf("ibv_post_recv of %d WRs: %w", len(wrs), syscall.E2BIG)
	}
	return q.QP.PostRecv(wrs)
}

func (q chainLimitQP) PostSend(wrs []verbs.SendWR) (int, error) {
	if len(wrs) > ibvPostLimit {
		return 0, fmt.Errorf("ibv_post_send of %d WRs: %w", len(wrs), syscall.E2BIG)
	}
	return q.QP.PostSend(wrs)
}

// The server's receives (96 with the default grant, up to 1056) are
// posted in chains the ibv binding takes: a longer chain would refuse
// every connection on real hardware.
func TestReceivesPostedInShortChains(t *testing.T) {
	for _, credits := range []uint32{DefaultCredits, 1000} {
		t.Run(fmt.Sprint(credits), func(t *testing.T) {
			noLeaks(t)
			base := sim.NewFabric(sim.WithSeed(1))
			defer base.Close()
			f := &chainLimitFabric{Fabric: base}
			srv, err := Start(Config{Fabric: f, Credits: credits})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			c := dialRaw(t, base, srv.Addr(), rawOptions{})
			rep := c.RoundTrip(rawCall{XID: 9, Inline: nfsCall(9, 0)})
			decodeAccepted(t, rep.Inline, 9)
			c.Close()
			f.mu.Lock()
			longest := f.longestRecv
			f.mu.Unlock()
			if longest > 32 || longest == 0 {
				t.Fatalf("longest receive chain %d WRs, want 1..32", longest)
			}
		})
	}
}
