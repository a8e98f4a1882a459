package nfsrdma

import (
	"context"
	"errors"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/nfs4"
	"github.com/nfsrdma/nfsrdma/xprt"
)

// OptionsV4 configures MountV4. The zero value (or nil) is usable.
type OptionsV4 struct {
	// MountOptions are nfs4.Mount's: the client's options (Client: the
	// credential, slots, MaxIO), Port (0 is Port over RDMA, 2049 over
	// TCP), the TCP options. MountV4 sets Dial and Release over RDMA;
	// Transport must be nil.
	nfs4.MountOptions
	// TCP sends the calls over TCP instead of RDMA (nfs4.MountTCP).
	TCP bool
	// RDMA configures the RDMA connection as in Options. MaxIO defaults to
	// Client.MaxIO, or 1 MiB, and caps it.
	RDMA xprt.Config
}

// MountV4 mounts spec, "host:/export", with NFSv4.1 (package nfs4) over
// RPC-over-RDMA, or over TCP with opts.TCP: Mount's NFSv4 twin, returning
// an nfs4.Target, the same path API and io/fs file system as nfs3.Target.
// NFSv4 needs no MOUNT protocol: the export is looked up from the server's
// root. The Target owns the connection and the fabric it opened. Over
// rdma-core the buffer pool is fitted to the locked-memory limit as for
// Mount, or MountV4 fails at once with a *memlock.Error naming the fix.
func MountV4(ctx context.Context, spec string, opts *OptionsV4) (*nfs4.Target, error) {
	var o OptionsV4
	if opts != nil {
		o = *opts
	}
	host, export, err := nfs3.SplitSpec(spec)
	if err != nil {
		return nil, err
	}
	if o.TCP {
		return nfs4.Mount(ctx, host, export, &o.MountOptions)
	}
	if o.Transport != nil || o.Dial != nil || o.Release != nil {
		return nil, errors.New("nfsrdma: MountV4 over RDMA makes the connection itself: leave MountOptions.Transport, Dial and Release nil (or use nfs4.Mount)")
	}
	cfg := o.RDMA
	ioFixed := cfg.MaxIO > 0 || o.Client.MaxIO > 0
	if cfg.MaxIO <= 0 {
		cfg.MaxIO = o.Client.MaxIO
		if cfg.MaxIO <= 0 {
			cfg.MaxIO = defaultMaxIO
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = o.Client.Logger
	}
	dial, release, err := rdmaDialer(spec, &cfg, 1, ioFixed, o.Port)
	if err != nil {
		return nil, err
	}
	o.Dial, o.Release = dial, release
	// The RDMA buffers hold a READ's or WRITE's data: no larger ones.
	if o.Client.MaxIO <= 0 || o.Client.MaxIO > cfg.MaxIO {
		o.Client.MaxIO = cfg.MaxIO
	}
	return nfs4.Mount(ctx, host, export, &o.MountOptions)
}
