package xprt

import (
	"bytes"
	"testing"
	"time"
)

// With Config.BusyPoll the reply loop spins on the receive CQ while calls
// await replies, and replies that come within the spin are reaped by it;
// calls complete exactly as without. Without it the loop never spins.
func TestBusyPoll(t *testing.T) {
	for _, spin := range []time.Duration{0, 200 * time.Millisecond} {
		s := newStack(t, stackOpts{client: Config{BusyPoll: spin}})
		fh, data := s.file("f", 64<<10)
		ctx := s.ctx(20 * time.Second)
		buf := make([]byte, 4096)
		for i := range 20 {
			off := (i * 4096) % len(data)
			if r, err := s.c.Read(ctx, fh, uint64(off), buf); err != nil || !bytes.Equal(buf[:r.Count], data[off:off+4096]) {
				t.Fatalf("BusyPoll %v: READ %d: %v", spin, i, err)
			}
		}
		c := s.tr.Counters()
		switch {
		case spin == 0 && c.BusyPolls != 0:
			t.Errorf("BusyPoll off: %d spins", c.BusyPolls)
		case spin > 0 && (c.BusyPollHits == 0 || c.BusyPollHits > c.BusyPolls):
			t.Errorf("BusyPoll %v: %d spins, %d found a completion: want some hits", spin, c.BusyPolls, c.BusyPollHits)
		}
	}
}
