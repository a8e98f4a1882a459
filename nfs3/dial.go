package nfs3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/ibv"
	"github.com/nfsrdma/nfsrdma/xprt"
)

// Proto is the transport of the NFS calls (nfs(5) "proto=").
type Proto string

// Transports of MountOptions.Proto.
const (
	ProtoTCP  Proto = "tcp"  // RPC over TCP; the zero Proto means this
	ProtoRDMA Proto = "rdma" // RPC-over-RDMA version 1 (RFC 8166, RFC 8267)
)

// RDMAPort is the port of NFS over RPC-over-RDMA (IANA's "nfsrdma"), which
// MountOptions.NFSPort 0 means over RDMA, as for the Linux client: RDMA
// services are not registered with the port mapper.
const RDMAPort = 20049

// MaxNConnect is the most connections MountOptions.NConnect opens, as nfs(5)'s
// nconnect allows.
const MaxNConnect = 16

// defaultRDMAMaxIO is an RDMA mount's largest READ or WRITE (and the size of
// its registered I/O buffers) when neither Rsize nor Wsize says: knfsd's
// largest (RPCSVC_MAXPAYLOAD).
const defaultRDMAMaxIO = 1 << 20

// MountRDMA mounts spec, "host:/export" as mount(8) writes it ("[v6addr]:/export"
// for an IPv6 literal), with the NFS calls over RPC-over-RDMA: it is Mount
// with opts.Proto set to ProtoRDMA. host may be a name (net.DefaultResolver;
// an IPv4 address preferred) or an address; MOUNT goes over TCP to it,
// through the port mapper unless opts.MountPort says, and NFS to port
// RDMAPort unless opts.NFSPort says. Without opts.RDMA.Fabric it opens
// rdma-core (verbs/ibv), which needs a build with cgo on Linux: other builds
// fail with an error wrapping verbs.ErrNoRDMA that says how to build one.
//
// The Target owns everything MountRDMA opened (connections and the fabric):
// Close or Unmount releases it all.
//
// The RDMA buffers are registered, locked memory: with xprt's defaults
// (opts.RDMA nil) over 32 MiB per connection, IOBuffers times MaxIO and the
// inline buffers. Where RLIMIT_MEMLOCK (ulimit -l) is below NConnect times
// that, registering them fails: raise the limit (root has none), or make
// opts.RDMA.IOBuffers or MaxIO smaller.
func MountRDMA(ctx context.Context, spec string, opts *MountOptions) (*Target, error) {
	return mountSpec(ctx, spec, opts, ProtoRDMA)
}

// MountTCP mounts spec ("host:/export") with the NFS calls over TCP: Mount
// with opts.Proto set to ProtoTCP.
func MountTCP(ctx context.Context, spec string, opts *MountOptions) (*Target, error) {
	return mountSpec(ctx, spec, opts, ProtoTCP)
}

func mountSpec(ctx context.Context, spec string, opts *MountOptions, proto Proto) (*Target, error) {
	host, export, err := SplitSpec(spec)
	if err != nil {
		return nil, err
	}
	var o MountOptions
	if opts != nil {
		o = *opts
	}
	o.Proto = proto
	return Mount(ctx, host, export, &o)
}

// SplitSpec splits a mount(8) source, "host:/export" or "[v6addr]:/export",
// into its host and export.
func SplitSpec(spec string) (host, export string, err error) {
	bad := fmt.Errorf("nfs3: %q: want host:/export", spec)
	if rest, ok := strings.CutPrefix(spec, "["); ok {
		var found bool
		host, export, found = strings.Cut(rest, "]:")
		if !found {
			return "", "", bad
		}
	} else {
		var found bool
		// An export begins with "/", which no host name or address holds:
		// the first ":/" ends the host, even an unbracketed IPv6 one.
		i := strings.Index(spec, ":/")
		if host, export, found = spec[:max(i, 0)], spec[max(i+1, 0):], i >= 0; !found {
			return "", "", bad
		}
	}
	if host == "" || !strings.HasPrefix(export, "/") || strings.ContainsAny(host, "/ []") {
		return "", "", bad
	}
	return host, export, nil
}

// resolveHost returns an address of host: the address itself, or the first
// IPv4 address net.DefaultResolver gives for the name (as mount.nfs, which
// asks for IPv4 unless told otherwise), else its first address.
func resolveHost(ctx context.Context, host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap(), nil
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.Addr{}, err
	}
	for _, a := range addrs {
		if a.Unmap().Is4() {
			return a.Unmap(), nil
		}
	}
	if len(addrs) == 0 {
		return netip.Addr{}, fmt.Errorf("%s has no address", host)
	}
	return addrs[0], nil
}

// openFabric opens rdma-core; a variable so that tests can put a simulated
// fabric in its place.
var openFabric = func() (verbs.Fabric, error) {
	f, err := ibv.Open()
	if err != nil {
		return nil, err
	}
	return f, nil
}

// dialNFS opens the NFS transport of a mount: NConnect connections over
// o.Proto to host (over RDMA an address; port 0: RDMAPort over RDMA, the
// port mapper's over TCP), one MultiTransport over several.
func dialNFS(ctx context.Context, o *MountOptions, host string) (_ sunrpc.Transport, err error) {
	n := o.NConnect
	if n <= 0 {
		n = 1
	}
	if n > MaxNConnect {
		return nil, fmt.Errorf("nconnect %d: at most %d", n, MaxNConnect)
	}
	var ts []sunrpc.Transport
	defer func() {
		if err != nil {
			for _, t := range ts {
				t.Close()
			}
		}
	}()
	port := o.NFSPort
	switch o.Proto {
	case ProtoRDMA:
		if port == 0 {
			port = RDMAPort
		}
		addr, err := netip.ParseAddr(host)
		if err != nil {
			return nil, err
		}
		cfg := *o.RDMA
		cfg.Addr = netip.AddrPortFrom(addr, uint16(port))
		if cfg.Logger == nil {
			cfg.Logger = o.Client.Logger
		}
		for range n {
			t, err := xprt.Dial(ctx, cfg)
			if err != nil {
				return nil, err
			}
			ts = append(ts, t)
		}
	default:
		if port == 0 {
			if port, err = sunrpc.LookupPort(ctx, host, Program, Version, o.TCP); err != nil {
				return nil, fmt.Errorf("port of program %d version %d on %s: %w", Program, Version, host, err)
			}
		}
		for range n {
			t, err := sunrpc.DialTCP(ctx, net.JoinHostPort(host, strconv.Itoa(port)), o.TCP)
			if err != nil {
				return nil, err
			}
			ts = append(ts, t)
		}
	}
	if len(ts) == 1 {
		return ts[0], nil
	}
	return sunrpc.NewMultiTransport(ts...)
}

// rdmaSizes fills in an RDMA mount's I/O size: the RDMA configuration's
// MaxIO sizes the registered buffers, so READs and WRITEs must not exceed
// it; it defaults to the larger of Rsize and Wsize, or 1 MiB.
func rdmaSizes(o *MountOptions) {
	var cfg xprt.Config
	if o.RDMA != nil {
		cfg = *o.RDMA
	}
	if cfg.MaxIO <= 0 {
		cfg.MaxIO = int(max(o.Client.Rsize, o.Client.Wsize))
		if cfg.MaxIO == 0 {
			cfg.MaxIO = defaultRDMAMaxIO
		}
	}
	limit := uint32(cfg.MaxIO)
	if o.Client.Rsize == 0 || o.Client.Rsize > limit {
		o.Client.Rsize = limit
	}
	if o.Client.Wsize == 0 || o.Client.Wsize > limit {
		o.Client.Wsize = limit
	}
	o.RDMA = &cfg
}

// ownedFabric is a fabric a Target opened, released at Close once the
// Target's connections are: it must then hold no verbs resource (rdma-core's
// fabric holds nothing else), and one with a Close of its own (the
// simulated fabric's engine) is closed.
type ownedFabric struct{ f verbs.Fabric }

func (o ownedFabric) close() error {
	var err error
	if live := o.f.Live(); !live.Zero() {
		err = fmt.Errorf("nfs3: verbs resources still live after close: %+v", live)
	}
	if c, ok := o.f.(io.Closer); ok {
		err = errors.Join(err, c.Close())
	}
	return err
}

// errTransportAndProto is Mount's refusal of a Transport with ProtoRDMA.
var errTransportAndProto = errors.New("nfs3: MountOptions.Transport and Proto rdma both given: the Transport carries the calls, so leave Proto empty")
