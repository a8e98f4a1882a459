package sunrpc

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// countingTransport records the XIDs it carried and answers nothing.
type countingTransport struct {
	mu     sync.Mutex
	xids   []uint32
	closed bool
	err    error
}

func (c *countingTransport) RoundTrip(ctx context.Context, req *Request) (*Reply, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.xids = append(c.xids, req.XID)
	return NewReply(nil, nil, nil), nil
}

func (c *countingTransport) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	return c.err
}

func TestMultiTransportSpread(t *testing.T) {
	ts := []*countingTransport{{}, {}, {}}
	m, err := NewMultiTransport(ts[0], ts[1], ts[2])
	if err != nil {
		t.Fatal(err)
	}
	src := NewXIDSource()
	first := map[uint32]int{}
	for range 300 {
		xid := src.Next()
		if _, err := m.RoundTrip(context.Background(), &Request{XID: xid}); err != nil {
			t.Fatal(err)
		}
		// A retransmission (same XID) goes where the call went.
		m.RoundTrip(context.Background(), &Request{XID: xid})
		first[xid] = 0
	}
	for i, tr := range ts {
		if len(tr.xids) < 180 || len(tr.xids) > 220 {
			t.Errorf("transport %d carried %d calls, want about 200 (100 calls and their retransmissions)", i, len(tr.xids))
		}
		for j := 0; j+1 < len(tr.xids); j += 2 {
			if tr.xids[j] != tr.xids[j+1] {
				t.Fatalf("transport %d: the retransmission of %#x went elsewhere", i, tr.xids[j])
			}
			if m.Pick(tr.xids[j]) != Transport(tr) {
				t.Fatalf("Pick(%#x) is not the transport that carried it", tr.xids[j])
			}
		}
	}
	// Every regular subset of the calls spreads too: every p-th call (a
	// WRITE among a file's calls) takes each of n transports for about a
	// n-th of them (within a quarter), wherever the XIDs start.
	for n := 2; n <= 4; n++ {
		mt, _ := NewMultiTransport(make([]Transport, n)...)
		idx := map[Transport]int{}
		for i := range n {
			mt.ts[i] = &countingTransport{}
			idx[mt.ts[i]] = i
		}
		for _, base := range []uint32{0, 1, 0xfffffff0, src.Next()} {
			for p := uint32(1); p <= 6; p++ {
				for j := range p {
					cnt := make([]int, n)
					for k := range uint32(300) {
						cnt[idx[mt.Pick(base+p*k+j)]]++
					}
					for i, c := range cnt {
						if d := float64(c) - 300/float64(n); d > 75/float64(n) || d < -75/float64(n) {
							t.Errorf("%d transports, every %d-th XID from %#x: transport %d carried %d of 300", n, p, base+j, i, c)
						}
					}
				}
			}
		}
	}
	ts[1].err = errors.New("boom")
	if err := m.Close(); err == nil || err.Error() != "boom" {
		t.Errorf("Close: %v, want boom", err)
	}
	for i, tr := range ts {
		if !tr.closed {
			t.Errorf("transport %d not closed", i)
		}
	}
	if _, err := NewMultiTransport(); err == nil {
		t.Error("NewMultiTransport() with no transport succeeded")
	}
}

// TestMultiTransportTCP: a Client over two TCP connections to one server
// gets every reply (the spread itself is TestMultiTransportSpread's).
func TestMultiTransportTCP(t *testing.T) {
	s := startFake(t, echo)
	m, err := NewMultiTransport(dial(t, s.addr(), nil), dial(t, s.addr(), nil))
	if err != nil {
		t.Fatal(err)
	}
	c := newTestClient(t, m)
	echoConcurrently(t, c, 64)
	if n := s.count.Load(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
	for i, tr := range m.Transports() {
		if st := tr.(*TCPTransport).Stats(); st.Connects != 1 {
			t.Errorf("transport %d: %d connects", i, st.Connects)
		}
	}
}
