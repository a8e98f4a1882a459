package verbstest

import (
	"context"
	"net/netip"
	"testing"

	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/rcpair"
)

// The pair and buffer helpers are package rcpair's (which programs may
// import: it does not import testing); these names keep them at hand for
// tests.
type (
	PairConfig = rcpair.PairConfig
	Side       = rcpair.Side
	Pair       = rcpair.Pair
	Buffer     = rcpair.Buffer
)

// DefaultConnParam is rcpair.DefaultConnParam.
func DefaultConnParam() verbs.ConnParam { return rcpair.DefaultConnParam() }

// Connect is rcpair.Connect.
func Connect(ctx context.Context, f verbs.Fabric, listen, connect netip.AddrPort, cfg PairConfig) (*Pair, error) {
	return rcpair.Connect(ctx, f, listen, connect, cfg)
}

// NewBuffer is rcpair.NewBuffer.
func NewBuffer(pd verbs.PD, n int, access verbs.Access) (*Buffer, error) {
	return rcpair.NewBuffer(pd, n, access)
}

// Reap is rcpair.Reap.
func Reap(ctx context.Context, cq verbs.CQ, n int) ([]verbs.Completion, error) {
	return rcpair.Reap(ctx, cq, n)
}

// NewPair is Connect for tests: it fails the test on error and closes the
// pair in t.Cleanup.
func NewPair(t testing.TB, env Env, cfg PairConfig) *Pair {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), env.timeout())
	defer cancel()
	p, err := Connect(ctx, env.Fabric, env.ListenAddr, env.ConnectAddr, cfg)
	if err != nil {
		t.Fatalf("connecting a pair: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("closing the pair: %v", err)
		}
	})
	return p
}

// MustBuffer is NewBuffer for tests: it closes the buffer in t.Cleanup.
func MustBuffer(t testing.TB, pd verbs.PD, n int, access verbs.Access) *Buffer {
	t.Helper()
	b, err := NewBuffer(pd, n, access)
	if err != nil {
		t.Fatalf("registering %d bytes: %v", n, err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("closing a buffer: %v", err)
		}
	})
	return b
}
