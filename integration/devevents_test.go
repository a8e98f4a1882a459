//go:build integration

package integration

import (
	"bytes"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/xprt"
)

// The link under rxe0 goes down while the transport is connected to
// knfsd: rxe raises PORT_ERR, an asynchronous device event that completes
// no work request, and the transport resets its connection on it instead
// of waiting for a call to time out. When the link is back, the next READ
// reconnects and returns the file's bytes.
func TestXprtLinkDownUpAsyncEvent(t *testing.T) {
	n := dialRDMA(t, xprt.Config{})
	data := serverFile(t, "linkdown", 256<<10)
	ctx := ctxT(t, 120*time.Second)
	lr, err := n.c.Lookup(ctx, n.root, "linkdown")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(data))
	if _, err := n.c.ReadAt(ctx, lr.FH, buf, 0); err != nil || !bytes.Equal(buf, data) {
		t.Fatalf("READ before: %v", err)
	}
	run(t, "ip", "link", "set", "dummy0", "down")
	up := false
	defer func() {
		if !up {
			run(t, "ip", "link", "set", "dummy0", "up")
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for n.tr.Counters().Disconnects == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	c := n.tr.Counters()
	if c.AsyncEvents == 0 || c.Disconnects == 0 {
		t.Fatalf("link down: no device event or no reset within 30 s: %s", c)
	}
	run(t, "ip", "link", "set", "dummy0", "up")
	up = true
	clear(buf)
	if _, err := n.c.ReadAt(ctx, lr.FH, buf, 0); err != nil || !bytes.Equal(buf, data) {
		t.Fatalf("READ after the link came back: %v", err)
	}
	if c := n.tr.Counters(); c.Reconnects == 0 {
		t.Fatalf("no reconnect: %s", c)
	}
}
