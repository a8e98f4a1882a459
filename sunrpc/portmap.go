package sunrpc

import (
	"context"
	"fmt"
	"net"
	"strconv"
)

// Port mapper program, version 2 (RFC 1833 §3).
const (
	PortmapProg = 100000
	PortmapVers = 2
	PortmapPort = 111

	PmapProcNull    = 0
	PmapProcSet     = 1
	PmapProcUnset   = 2
	PmapProcGetPort = 3
	PmapProcDump    = 4
	PmapProcCallIt  = 5
)

// Protocol numbers of Mapping.Prot (RFC 1833 §3).
const (
	IPProtoTCP = 6
	IPProtoUDP = 17
)

// Mapping is a port mapper mapping (RFC 1833 §3: struct mapping).
type Mapping struct {
	Prog, Vers, Prot, Port uint32
}

// AppendMapping appends m.
func AppendMapping(b []byte, m *Mapping) []byte {
	b = AppendUint32(b, m.Prog)
	b = AppendUint32(b, m.Vers)
	b = AppendUint32(b, m.Prot)
	return AppendUint32(b, m.Port)
}

// DecodeMapping reads a mapping.
func DecodeMapping(d *Decoder) Mapping {
	return Mapping{Prog: d.Uint32(), Vers: d.Uint32(), Prot: d.Uint32(), Port: d.Uint32()}
}

// NotRegisteredError is a GETPORT answered with port 0: the program version is
// not registered for the protocol.
type NotRegisteredError struct{ Prog, Vers, Prot uint32 }

func (e *NotRegisteredError) Error() string {
	return fmt.Sprintf("sunrpc: program %d version %d not registered with the port mapper (protocol %d)", e.Prog, e.Vers, e.Prot)
}

// Portmapper is a client of the port mapper version 2 (RFC 1833 §3).
type Portmapper struct{ c *Client }

// NewPortmapper returns a port mapper client over t (AUTH_NONE).
func NewPortmapper(t Transport, xids *XIDSource) *Portmapper {
	c, _ := NewClient(t, ClientConfig{Prog: PortmapProg, Vers: PortmapVers, XIDs: xids})
	return &Portmapper{c: c}
}

// Close closes the transport.
func (p *Portmapper) Close() error { return p.c.Close() }

// GetPort returns the port of prog/vers over prot (PMAPPROC_GETPORT), or a
// *NotRegisteredError.
func (p *Portmapper) GetPort(ctx context.Context, prog, vers, prot uint32) (int, error) {
	m := Mapping{Prog: prog, Vers: vers, Prot: prot}
	res, err := p.c.Call(ctx, PmapProcGetPort, &Args{Head: AppendMapping(nil, &m), MaxResults: 4})
	if err != nil {
		return 0, err
	}
	defer res.Release()
	port := res.Uint32()
	if err := res.Err(); err != nil {
		return 0, fmt.Errorf("sunrpc: portmap GETPORT reply: %w", err)
	}
	if port == 0 {
		return 0, &NotRegisteredError{Prog: prog, Vers: vers, Prot: prot}
	}
	if port > 65535 {
		return 0, fmt.Errorf("sunrpc: portmap GETPORT returned port %d", port)
	}
	return int(port), nil
}

// Dump returns all registered mappings (PMAPPROC_DUMP).
func (p *Portmapper) Dump(ctx context.Context) ([]Mapping, error) {
	res, err := p.c.Call(ctx, PmapProcDump, &Args{MaxResults: 1 << 20})
	if err != nil {
		return nil, err
	}
	defer res.Release()
	var ms []Mapping
	// pmaplist is an XDR optional-data linked list (RFC 1833 §3).
	for res.Bool() {
		ms = append(ms, DecodeMapping(res.Decoder))
	}
	if err := res.Err(); err != nil {
		return nil, fmt.Errorf("sunrpc: portmap DUMP reply: %w", err)
	}
	return ms, nil
}

// LookupPort asks the port mapper at host for the TCP port of prog/vers, over
// TCP. host is "host" (port 111) or "host:port".
func LookupPort(ctx context.Context, host string, prog, vers uint32, opts *TCPOptions) (int, error) {
	addr := host
	if _, _, err := net.SplitHostPort(host); err != nil {
		addr = net.JoinHostPort(host, strconv.Itoa(PortmapPort))
	}
	t, err := DialTCP(ctx, addr, opts)
	if err != nil {
		return 0, err
	}
	defer t.Close()
	return NewPortmapper(t, nil).GetPort(ctx, prog, vers, IPProtoTCP)
}
