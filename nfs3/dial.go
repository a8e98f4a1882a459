package nfs3

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// MaxNConnect is the most connections MountOptions.NConnect opens, as nfs(5)'s
// nconnect allows.
const MaxNConnect = 16

// MountTCP mounts spec, "host:/export" as mount(8) writes it
// ("[v6addr]:/export" for an IPv6 literal), with the NFS calls over TCP: it
// is Mount(ctx, host, export, opts). Package nfsrdma's Mount is the same
// over RDMA.
func MountTCP(ctx context.Context, spec string, opts *MountOptions) (*Target, error) {
	host, export, err := SplitSpec(spec)
	if err != nil {
		return nil, err
	}
	return Mount(ctx, host, export, opts)
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
		// An export begins with "/", which no host name or address holds:
		// the first ":/" ends the host, even an unbracketed IPv6 one.
		i := strings.Index(spec, ":/")
		if i < 0 {
			return "", "", bad
		}
		host, export = spec[:i], spec[i+1:]
	}
	if host == "" || !strings.HasPrefix(export, "/") || strings.ContainsAny(host, "/ []") {
		return "", "", bad
	}
	return host, export, nil
}

// ResolveHost returns an address of host: the address itself, or the first
// IPv4 address net.DefaultResolver gives for the name (as mount.nfs, which
// asks for IPv4 unless told otherwise), else its first address.
func ResolveHost(ctx context.Context, host string) (netip.Addr, error) {
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

// dialNFS opens the NFS transport of a mount: NConnect connections (by
// o.Dial to addr, or over TCP to host, at NFSPort or the port mapper's
// port), one MultiTransport over several.
func dialNFS(ctx context.Context, o *MountOptions, host string, addr netip.Addr) (_ sunrpc.Transport, err error) {
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
	dial := o.Dial
	if dial == nil {
		port := o.NFSPort
		if port == 0 {
			if port, err = sunrpc.LookupPort(ctx, host, Program, Version, o.TCP); err != nil {
				return nil, fmt.Errorf("port of program %d version %d on %s: %w", Program, Version, host, err)
			}
		}
		dial = func(ctx context.Context, _ netip.Addr) (sunrpc.Transport, error) {
			return sunrpc.DialTCP(ctx, net.JoinHostPort(host, strconv.Itoa(port)), o.TCP)
		}
	}
	for range n {
		t, err := dial(ctx, addr)
		if err != nil {
			return nil, err
		}
		ts = append(ts, t)
	}
	if len(ts) == 1 {
		return ts[0], nil
	}
	return sunrpc.NewMultiTransport(ts...)
}
