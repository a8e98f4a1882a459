package sunrpc

import (
	"context"
	"errors"
)

// MultiTransport spreads calls across several transports to one server, as
// the Linux client's nconnect mount option does: each call goes to the
// transport chosen by its XID, so a retransmission of a call (same XID)
// goes where the first transmission went, whose connection the server's
// duplicate request cache knows. The choice is the XID's Fibonacci hash
// (the fraction of XID/φ), not the XID modulo the transports: consecutive
// XIDs from an XIDSource then spread evenly, and so does every regular
// subset of them. Modulo, a workload whose calls come in a cycle as long
// as the transports (CREATE, WRITE, SETATTR for each file over three
// connections) put every WRITE on one connection.
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
	h := xid * 0x9E3779B9 // 2^32/φ: h/2^32 is the fraction of xid/φ
	return m.ts[int(uint64(h)*uint64(len(m.ts))>>32)]
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
