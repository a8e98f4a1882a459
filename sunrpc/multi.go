package sunrpc

import (
	"context"
	"errors"
)

// MultiTransport spreads calls across several transports to one server, as
// the Linux client's nconnect mount option does: each call goes to the
// transport chosen by its XID, so consecutive calls (consecutive XIDs from
// an XIDSource) take the transports in turn, and a retransmission of a call
// (same XID) goes where the first transmission went, whose connection the
// server's duplicate request cache knows.
type MultiTransport struct {
	ts []Transport
}

// NewMultiTransport returns a transport over ts (at least one). Close
// closes them all.
func NewMultiTransport(ts ...Transport) (*MultiTransport, error) {
	if len(ts) == 0 {
		return nil, errors.New("sunrpc: MultiTransport needs at least one transport")
	}
	return &MultiTransport{ts: append([]Transport(nil), ts...)}, nil
}

// RoundTrip sends req on the transport its XID chooses.
func (m *MultiTransport) RoundTrip(ctx context.Context, req *Request) (*Reply, error) {
	return m.Pick(req.XID).RoundTrip(ctx, req)
}

// Pick returns the transport that carries the call with the given XID.
func (m *MultiTransport) Pick(xid uint32) Transport {
	return m.ts[int(xid%uint32(len(m.ts)))]
}

// Transports returns the transports, in the order given.
func (m *MultiTransport) Transports() []Transport {
	return append([]Transport(nil), m.ts...)
}

// Close closes every transport and returns their errors joined.
func (m *MultiTransport) Close() error {
	var errs []error
	for _, t := range m.ts {
		errs = append(errs, t.Close())
	}
	return errors.Join(errs...)
}
