package sunrpctest

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The TCP transport keeps the contract.
func TestTCPTransportSuite(t *testing.T) {
	RunTransportSuite(t, func(t *testing.T, h *Handler) Target {
		srv := ServeTCP(t, h)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		tr, err := sunrpc.DialTCP(ctx, srv.Addr(), &sunrpc.TCPOptions{ReconnectDelay: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		return Target{Transport: tr, Server: srv, MaxBulk: 1 << 20}
	})
}
