// Package nfsrdma is the front door of the NFS-over-RDMA client: Mount
// mounts "host:/export" over RPC-over-RDMA (RFC 8166, RFC 8267) in one call
// and returns an nfs3.Target, the export as a path API and an io/fs file
// system. The packages below it are the NFSv3 client (nfs3), the RDMA
// transport (xprt) and rdma-core's binding (verbs/ibv); the mount helper
// (cmd/nfsrdma-mount) puts an export in the local file system through FUSE.
//
// RDMA needs cgo on Linux: with cgo the package links rdma-core (its
// headers, libibverbs-dev and librdmacm-dev, to build; its libraries and a
// device's provider to run). Built with CGO_ENABLED=0 it mounts over TCP
// only (Options.TCP), and Mount over RDMA fails with an error wrapping
// verbs.ErrNoRDMA that says how to build with RDMA.
package nfsrdma

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/ibv"
	"github.com/nfsrdma/nfsrdma/xprt"
	"github.com/nfsrdma/nfsrdma/xprt/memlock"
)

// Port is the port of NFS over RPC-over-RDMA (IANA's "nfsrdma"), which
// Options.NFSPort 0 means over RDMA, as for the Linux client: RDMA services
// are not registered with the port mapper.
const Port = 20049

// defaultMaxIO is an RDMA mount's largest READ or WRITE, and the size of its
// registered I/O buffers, when neither Rsize nor Wsize says: knfsd's
// largest (RPCSVC_MAXPAYLOAD).
const defaultMaxIO = 1 << 20

// Options configures Mount. The zero value (or nil) is usable.
type Options struct {
	// MountOptions are nfs3.Mount's: the credential (Cred; nil sends
	// AUTH_SYS with the process's ids), NConnect, the MOUNT and NFS ports
	// (NFSPort 0 is Port over RDMA), READ and WRITE sizes (Client.Rsize,
	// Client.Wsize), the TCP options of MOUNT. Mount sets Dial and Release
	// (over RDMA); Transport must be nil.
	nfs3.MountOptions
	// TCP sends the NFS calls over TCP instead of RDMA (nfs3.MountTCP).
	TCP bool
	// RDMA configures each RDMA connection. Addr is set from the host and
	// NFSPort. A nil Fabric opens rdma-core (verbs/ibv), which the Target
	// then owns; a Fabric given stays the caller's. MaxIO defaults to the
	// larger of Client.Rsize and Client.Wsize, or 1 MiB, and caps them.
	// Logger defaults to Client.Logger.
	RDMA xprt.Config
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

// memlockLimit is the process's locked-memory limit; a variable so that
// tests can set one.
var memlockLimit = memlock.Limit

// Mount mounts spec, "host:/export" as mount(8) writes it ("[v6addr]:/export"
// for an IPv6 literal), with the NFS calls over RPC-over-RDMA, or over TCP
// with opts.TCP. host may be a name (net.DefaultResolver; an IPv4 address
// preferred) or an address. MOUNT goes over TCP to it (through the port
// mapper unless MountPort says; from a reserved port when the process may
// bind one, as exports(5)'s default "secure" needs), the NFS calls over
// NConnect RDMA connections to Port unless NFSPort says.
//
// The Target owns everything Mount opened, the connections and the fabric:
// Close or Unmount releases it all, and reports a verbs resource left on a
// fabric Mount opened.
//
// The RDMA buffers are registered, locked memory: with xprt's defaults about
// 42 MiB per connection, counted against RLIMIT_MEMLOCK (ulimit -l) unless
// the process has CAP_IPC_LOCK (root has). Over rdma-core, before
// anything is dialed, Mount sizes the pool to that limit as the mount
// helper does (package xprt/memlock): where the defaults do not fit and
// RDMA leaves Slots, IOBuffers, RegisterAhead and SendQueue zero, each
// connection gets fewer buffers, and smaller I/Os (down to 64 KiB) unless
// Rsize, Wsize or RDMA.MaxIO fixed the size; a pool set in RDMA is
// checked as it is. When nothing fits, Mount fails at once with a
// *memlock.Error that names the fix (ulimit -l, memlock in
// /etc/security/limits.conf, LimitMEMLOCK= for a systemd unit).
func Mount(ctx context.Context, spec string, opts *Options) (*nfs3.Target, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	host, export, err := nfs3.SplitSpec(spec)
	if err != nil {
		return nil, err
	}
	if o.TCP {
		return nfs3.Mount(ctx, host, export, &o.MountOptions)
	}
	if o.Transport != nil || o.Dial != nil || o.Release != nil {
		return nil, errors.New("nfsrdma: Mount over RDMA makes the NFS connections itself: leave MountOptions.Transport, Dial and Release nil (or use nfs3.Mount)")
	}
	cfg := o.RDMA
	if cfg.Logger == nil {
		cfg.Logger = o.Client.Logger
	}
	ioFixed := cfg.MaxIO > 0 || o.Client.Rsize != 0 || o.Client.Wsize != 0
	if cfg.MaxIO <= 0 {
		cfg.MaxIO = int(max(o.Client.Rsize, o.Client.Wsize))
		if cfg.MaxIO == 0 {
			cfg.MaxIO = defaultMaxIO
		}
	}
	dial, release, err := rdmaDialer(spec, &cfg, max(o.NConnect, 1), ioFixed, o.NFSPort)
	if err != nil {
		return nil, err
	}
	o.Dial, o.Release = dial, release
	// The RDMA buffers hold a READ's or WRITE's data: no larger ones.
	limit := uint32(cfg.MaxIO)
	if o.Client.Rsize == 0 || o.Client.Rsize > limit {
		o.Client.Rsize = limit
	}
	if o.Client.Wsize == 0 || o.Client.Wsize > limit {
		o.Client.Wsize = limit
	}
	return nfs3.Mount(ctx, host, export, &o.MountOptions)
}

// rdmaDialer prepares the RDMA side of a one-call mount (Mount, MountV4):
// the fabric, opened here unless cfg names one (release then lets it go
// once the Target's connections are closed; nil otherwise); over
// rdma-core, which pins what it registers, cfg's buffer pool fitted to the
// locked-memory limit for nconnect connections (smaller I/Os too unless
// ioFixed), or a *memlock.Error before the server is asked anything; and
// the dialer of the server's RPC-over-RDMA port (Port when port is 0),
// which reports a registration the kernel refuses for want of locked
// memory as the same error.
func rdmaDialer(spec string, cfg *xprt.Config, nconnect int, ioFixed bool, port int) (dial func(context.Context, netip.Addr) (sunrpc.Transport, error), release func() error, err error) {
	_, pins := cfg.Fabric.(*ibv.Fabric)
	if cfg.Fabric == nil {
		// The local prerequisite first: without RDMA there is no point in
		// asking the server for anything.
		fab, err := openFabric()
		if err != nil {
			return nil, nil, fmt.Errorf("nfsrdma: mount %s: %w", spec, err)
		}
		cfg.Fabric, pins = fab, true
		release = func() error { return releaseFabric(fab) }
	}
	if pins {
		limit, err := memlockLimit()
		var pool memlock.Pool
		if err == nil {
			pool, err = memlock.Fit(cfg, nconnect, limit, ioFixed)
		}
		if err != nil {
			if release != nil {
				err = errors.Join(err, release())
			}
			return nil, nil, fmt.Errorf("nfsrdma: mount %s: %w", spec, err)
		}
		if pool.Sized && cfg.Logger != nil {
			cfg.Logger.Warn("nfsrdma: the locked-memory limit (ulimit -l) sizes the RDMA buffer pool: fewer I/Os in flight; raise memlock for the full pool",
				"limit_kib", limit>>10, "io_buffers", pool.IOBuffers, "slots", pool.Slots, "max_io", pool.MaxIO, "nconnect", nconnect)
		}
	}
	if port == 0 {
		port = Port
	}
	c := *cfg
	dial = func(ctx context.Context, addr netip.Addr) (sunrpc.Transport, error) {
		c := c
		c.Addr = netip.AddrPortFrom(addr, uint16(port))
		t, err := xprt.Dial(ctx, c)
		if merr := memlock.FromRegistration(err, nconnect, c.MaxIO); merr != nil {
			// The kernel refused below the limit as read (a
			// provider's own pinned memory, or another registration
			// of this process): the same fix.
			return nil, merr
		}
		return t, err
	}
	return dial, release, nil
}

// releaseFabric releases a fabric Mount opened, once the Target's
// connections are closed: it must then hold no verbs resource (rdma-core's
// fabric holds nothing else), and one with a Close of its own (the
// simulated fabric's engine) is closed.
func releaseFabric(f verbs.Fabric) error {
	var err error
	if live := f.Live(); !live.Zero() {
		err = fmt.Errorf("nfsrdma: verbs resources still live after close: %+v", live)
	}
	if c, ok := f.(io.Closer); ok {
		err = errors.Join(err, c.Close())
	}
	return err
}
