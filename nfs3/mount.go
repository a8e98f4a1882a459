package nfs3

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// MOUNT version 3 procedures (RFC 1813 Appendix I).
const (
	MountProcNull    = 0
	MountProcMnt     = 1
	MountProcDump    = 2
	MountProcUmnt    = 3
	MountProcUmntAll = 4
	MountProcExport  = 5
)

// MountClient is a client of the MOUNT version 3 protocol (RFC 1813 Appendix I).
type MountClient struct {
	rpc *sunrpc.Client
}

// NewMountClient returns a MOUNT client over t with credential cred (zero:
// AUTH_NONE).
func NewMountClient(t sunrpc.Transport, cred sunrpc.OpaqueAuth, logger *slog.Logger) (*MountClient, error) {
	c, err := sunrpc.NewClient(t, sunrpc.ClientConfig{Prog: MountProgram, Vers: MountVersion, Cred: cred, Logger: logger})
	if err != nil {
		return nil, err
	}
	return &MountClient{rpc: c}, nil
}

// DialMount connects to the MOUNT service of host over TCP: at port, or, when
// port is 0, at the port the port mapper on host (port 111) gives.
func DialMount(ctx context.Context, host string, port int, cred sunrpc.OpaqueAuth, opts *sunrpc.TCPOptions) (*MountClient, error) {
	t, err := dialService(ctx, host, port, MountProgram, MountVersion, opts)
	if err != nil {
		return nil, err
	}
	var logger *slog.Logger
	if opts != nil {
		logger = opts.Logger
	}
	m, err := NewMountClient(t, cred, logger)
	if err != nil {
		t.Close()
		return nil, err
	}
	return m, nil
}

// dialService dials host:port, asking the port mapper for the port when 0.
func dialService(ctx context.Context, host string, port int, prog, vers uint32, opts *sunrpc.TCPOptions) (*sunrpc.TCPTransport, error) {
	if port == 0 {
		p, err := sunrpc.LookupPort(ctx, host, prog, vers, opts)
		if err != nil {
			return nil, fmt.Errorf("nfs3: port of program %d version %d on %s: %w", prog, vers, host, err)
		}
		port = p
	}
	return sunrpc.DialTCP(ctx, net.JoinHostPort(host, strconv.Itoa(port)), opts)
}

// Close closes the transport.
func (m *MountClient) Close() error { return m.rpc.Close() }

// Null calls MOUNTPROC3_NULL.
func (m *MountClient) Null(ctx context.Context) error {
	r, err := m.rpc.Call(ctx, MountProcNull, &sunrpc.Args{})
	if err != nil {
		return err
	}
	r.Release()
	return nil
}

// MountResult is mountres3_ok (RFC 1813 Appendix I).
type MountResult struct {
	FH          FileHandle
	AuthFlavors []sunrpc.AuthFlavor // the flavors the server accepts for this export
}

// Mnt mounts dirpath (MOUNTPROC3_MNT) and returns the root file handle. A
// refusal is a MountStatus.
func (m *MountClient) Mnt(ctx context.Context, dirpath string) (MountResult, error) {
	if len(dirpath) > MaxPathLen {
		return MountResult{}, MountErrNameTooLong
	}
	r, err := m.rpc.Call(ctx, MountProcMnt, &sunrpc.Args{Head: sunrpc.AppendString(nil, dirpath), MaxResults: 4 + fhSize + 4 + 4*64})
	if err != nil {
		return MountResult{}, err
	}
	defer r.Release()
	st := MountStatus(r.Uint32())
	var res MountResult
	if st == MountOK {
		res.FH = decodeFH(r.Decoder)
		n := r.ArrayLen(-1, 4)
		for range n {
			res.AuthFlavors = append(res.AuthFlavors, sunrpc.AuthFlavor(r.Uint32()))
		}
	}
	if err := r.Err(); err != nil {
		return MountResult{}, fmt.Errorf("nfs3: malformed MNT reply: %w", err)
	}
	if st != MountOK {
		return MountResult{}, st
	}
	return res, nil
}

// Umnt tells the server dirpath is no longer mounted (MOUNTPROC3_UMNT).
func (m *MountClient) Umnt(ctx context.Context, dirpath string) error {
	r, err := m.rpc.Call(ctx, MountProcUmnt, &sunrpc.Args{Head: sunrpc.AppendString(nil, dirpath)})
	if err != nil {
		return err
	}
	r.Release()
	return nil
}

// UmntAll removes all of this client's mount entries (MOUNTPROC3_UMNTALL).
func (m *MountClient) UmntAll(ctx context.Context) error {
	r, err := m.rpc.Call(ctx, MountProcUmntAll, &sunrpc.Args{})
	if err != nil {
		return err
	}
	r.Release()
	return nil
}

// MountEntry is one mountlist entry (RFC 1813 Appendix I: mountbody).
type MountEntry struct {
	Host string
	Dir  string
}

// Dump lists the server's mount entries (MOUNTPROC3_DUMP).
func (m *MountClient) Dump(ctx context.Context) ([]MountEntry, error) {
	r, err := m.rpc.Call(ctx, MountProcDump, &sunrpc.Args{MaxResults: 1 << 20})
	if err != nil {
		return nil, err
	}
	defer r.Release()
	var list []MountEntry
	for r.Bool() {
		list = append(list, MountEntry{Host: r.String(MaxNameLen), Dir: r.String(MaxPathLen)})
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("nfs3: malformed DUMP reply: %w", err)
	}
	return list, nil
}

// Export is one exportnode (RFC 1813 Appendix I): an exported directory and the
// groups allowed to mount it.
type Export struct {
	Dir    string
	Groups []string
}

// Export lists the server's exports (MOUNTPROC3_EXPORT).
func (m *MountClient) Export(ctx context.Context) ([]Export, error) {
	r, err := m.rpc.Call(ctx, MountProcExport, &sunrpc.Args{MaxResults: 1 << 20})
	if err != nil {
		return nil, err
	}
	defer r.Release()
	exports, err := decodeExports(r.Decoder)
	if err != nil {
		return nil, fmt.Errorf("nfs3: malformed EXPORT reply: %w", err)
	}
	return exports, nil
}

func decodeExports(d *sunrpc.Decoder) ([]Export, error) {
	var exports []Export
	for d.Bool() {
		e := Export{Dir: d.String(MaxPathLen)}
		for d.Bool() {
			e.Groups = append(e.Groups, d.String(MaxNameLen))
		}
		exports = append(exports, e)
	}
	return exports, d.Err()
}

func appendExports(b []byte, exports []Export) []byte {
	for _, e := range exports {
		b = sunrpc.AppendBool(b, true)
		b = sunrpc.AppendString(b, e.Dir)
		for _, g := range e.Groups {
			b = sunrpc.AppendString(sunrpc.AppendBool(b, true), g)
		}
		b = sunrpc.AppendBool(b, false)
	}
	return sunrpc.AppendBool(b, false)
}
