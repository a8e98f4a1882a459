package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nfsrdma/nfsrdma/fusefs"
	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/nlm"
	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/faulty"
	"github.com/nfsrdma/nfsrdma/verbs/ibv"
	"github.com/nfsrdma/nfsrdma/xprt"
	"github.com/nfsrdma/nfsrdma/xprt/memlock"
)

// attemptTimeout bounds one attempt to reach the server (MOUNT and the NFS
// connection), which timeo= shortens down to 5 s; retry= decides how long
// attempts go on.
const attemptTimeout = 30 * time.Second

// mountServer is one live mount: the NFS client and its transport, the FUSE
// server and the control socket.
type mountServer struct {
	inv          *invocation
	opts         *mountOptions
	host, export string
	dir          string // canonical mount point
	log          *slog.Logger
	started      time.Time

	// onRetry, when set, is called when an attempt to reach the server
	// failed and another follows (bg hands the mount to the background).
	onRetry func(error)

	cred    sunrpc.OpaqueAuth
	addr    netip.Addr             // the server's address, for NFS
	rdma    []*xprt.Transport      // proto=rdma: nconnect of them
	pool    memlock.Pool           // proto=rdma: their pool, sized to RLIMIT_MEMLOCK
	tcp     []*sunrpc.TCPTransport // proto=tcp
	metered *sunrpc.MeteredTransport
	client  *nfs3.Client
	fsys    *fusefs.FS
	locks   *nlm.Locker // nil: nolock or local_lock=all
	fuse    *fuse.Server
	ctl     *controlServer
	// faults decorates the RDMA fabric when NFSRDMA_FAULT_INJECT=1 (tests
	// only, see fault.go); nil otherwise.
	faults *faulty.Fabric
}

// MountError is a mount that failed, with the reason a user can act on.
type MountError struct {
	Spec, Dir string
	Err       error
}

func (e *MountError) Error() string {
	return fmt.Sprintf("mount %s on %s: %v", e.Spec, e.Dir, e.Err)
}

func (e *MountError) Unwrap() error { return e.Err }

// checkMountPoint checks that dir exists and is a directory.
func checkMountPoint(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("mount point %s does not exist", dir)
	case err != nil:
		return fmt.Errorf("mount point %s: %w", dir, err)
	case !fi.IsDir():
		return fmt.Errorf("mount point %s is not a directory", dir)
	}
	return nil
}

// checkFUSE checks that this process can mount a FUSE file system: /dev/fuse
// exists, and it is root or fusermount is at hand.
func checkFUSE() error {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("no /dev/fuse (%v): load the fuse module with 'modprobe fuse'", err)
	}
	if os.Geteuid() == 0 {
		return nil
	}
	if _, err := fusermountPath(); err != nil {
		return fmt.Errorf("not root, and %v: install fuse3, or mount as root", err)
	}
	return nil
}

// credential returns the AUTH_SYS credential: the caller's, or uid=/gid=.
func credential(o *mountOptions) (sunrpc.OpaqueAuth, error) {
	if o.UID == nil && o.GID == nil {
		return nfs3.ProcessCred()
	}
	host, _ := os.Hostname()
	if len(host) > sunrpc.MaxMachineName {
		host = host[:sunrpc.MaxMachineName]
	}
	a := sunrpc.AuthSys{Stamp: uint32(time.Now().Unix()), MachineName: host, UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}
	if o.UID != nil {
		a.UID = *o.UID
	}
	if o.GID != nil {
		a.GID = *o.GID
	}
	a.GIDs = []uint32{a.GID}
	return a.Credential()
}

// errNoRDMA is what a mount over RDMA says without an RDMA device: first
// the run-time packages (without ibverbs-providers, libibverbs finds no
// device even where the kernel has one), then Soft-RoCE for a machine
// without RDMA hardware.
var errNoRDMA = errors.New("no RDMA device: install rdma-core's run-time packages (apt-get install libibverbs1 librdmacm1 ibverbs-providers) and load the adapter's driver; without RDMA hardware create a Soft-RoCE device with `rdma link add rxe0 type rxe netdev IFACE` (IFACE: the network interface to the server); or mount with proto=tcp")

// errNoRDMABuild is what a mount over RDMA says in a build without cgo.
var errNoRDMABuild = errors.New("this nfsrdma-mount was built without RDMA support (no cgo): rebuild it with CGO_ENABLED=1, a C compiler and rdma-core's headers (apt-get install gcc libibverbs-dev librdmacm-dev; see `nfsrdma-mount --version`), or mount with proto=tcp")

// openFabric opens rdma-core, translating its "no device" errors.
func openFabric() (verbs.Fabric, error) {
	if !rdmaBuiltIn {
		return nil, errNoRDMABuild
	}
	fab, err := ibv.Open()
	if err != nil {
		var oe *verbs.OpError
		switch {
		case errors.Is(err, verbs.ErrNoRDMA):
			return nil, fmt.Errorf("%w (%v)", errNoRDMABuild, err)
		case errors.Is(err, syscall.ENODEV) || errors.As(err, &oe) && oe.Verb == "ibv_get_device_list":
			return nil, errNoRDMA
		}
		return nil, err
	}
	return fab, nil
}

// resolve returns an address of host: IPv4 preferred, or IPv6 only (proto
// tcp6 or rdma6).
func resolve(ctx context.Context, host string, v6 bool) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		if v6 && a.Unmap().Is4() {
			return netip.Addr{}, fmt.Errorf("%s is an IPv4 address, and the protocol is IPv6 (tcp6 or rdma6)", host)
		}
		return a, nil
	}
	network := "ip"
	if v6 {
		network = "ip6"
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, network, host)
	if err != nil {
		return netip.Addr{}, err
	}
	for _, a := range addrs {
		if !v6 && a.Unmap().Is4() {
			return a.Unmap(), nil
		}
	}
	if len(addrs) == 0 {
		return netip.Addr{}, fmt.Errorf("%s has no address", host)
	}
	return addrs[0], nil
}

// retryable reports whether a failed attempt to reach the server may
// succeed later (the server or its network not up yet).
func retryable(err error) bool {
	var nr *sunrpc.NotRegisteredError
	var ne net.Error
	var ce *xprt.ConnectError
	switch {
	case errors.As(err, new(nfs3.MountStatus)), errors.Is(err, errNoRDMA), errors.Is(err, errNoRDMABuild),
		errors.As(err, new(*memlock.Error)), errors.Is(err, errDeviceAccess):
		return false
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ETIMEDOUT), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.As(err, &nr), errors.As(err, &ne), errors.As(err, &ce):
		return true
	}
	return false
}

// explainMount makes MOUNT's refusals say what they mean. port is the
// source port the MOUNT request came from (0: unknown), noResv whether
// noresvport asked for an ordinary one.
func explainMount(export string, err error, port int, noResv bool) error {
	var ms nfs3.MountStatus
	if !errors.As(err, &ms) {
		return err
	}
	switch ms {
	case nfs3.MountErrNoEnt:
		return fmt.Errorf("the server has no export %s (%w)", export, err)
	case nfs3.MountErrAcces, nfs3.MountErrPerm:
		if port >= 1024 {
			// exports(5)'s default "secure" makes mountd refuse a
			// MOUNT from a port above 1023 with MNT3ERR_ACCES.
			why := "this process may not bind a port below 1024 (it is not root and has no cap_net_bind_service)"
			fix := "mount as root, give nfsrdma-mount the capability (`make install` does: setcap cap_net_bind_service+ep on the installed binary)"
			if noResv {
				why, fix = "noresvport was given", "mount without noresvport"
			}
			return fmt.Errorf("the server denied access to %s (%w); the request came from the ordinary source port %d because %s, and an export with exports(5)'s default `secure` accepts only ports below 1024: %s, or export it with `insecure`",
				export, err, port, why, fix)
		}
		return fmt.Errorf("the server denied access to %s (%w)", export, err)
	case nfs3.MountErrNotDir:
		return fmt.Errorf("%s is not a directory on the server (%w)", export, err)
	}
	return fmt.Errorf("the server refused to mount %s (%w)", export, err)
}

// sizePool sizes the RDMA transports' registered memory to the process's
// locked-memory limit before anything is dialed (xprt/memlock): the
// defaults where they fit; else fewer buffers, and smaller rsize and wsize
// when the user gave neither; else the mount fails now, naming the fix.
func (m *mountServer) sizePool() error {
	limit, err := memlockLimit()
	if err != nil {
		return err
	}
	maxIO := int(max(m.opts.Rsize, m.opts.Wsize))
	fixed := maxIO != 0
	if !fixed {
		maxIO = maxIOSize
	}
	if m.pool, err = memlock.Size(limit, m.opts.NConnect, maxIO, fixed, m.opts.Inline); err != nil {
		return err
	}
	if m.pool.Sized {
		if !fixed {
			m.opts.Rsize, m.opts.Wsize = uint32(m.pool.MaxIO), uint32(m.pool.MaxIO)
		}
		m.log.Warn("the locked-memory limit (ulimit -l) sizes the RDMA buffer pool: fewer I/Os in flight; raise memlock for the full pool",
			"limit_kib", limit>>10, "io_buffers", m.pool.IOBuffers, "slots", m.pool.Slots,
			"rsize", m.opts.Rsize, "wsize", m.opts.Wsize, "nconnect", m.opts.NConnect, "registered_kib", m.pool.Locked>>10)
	}
	return nil
}

// connect runs MOUNT for the root handle and opens the NFS transport, trying
// again while the server does not answer, until retry= runs out.
func (m *mountServer) connect(ctx context.Context, fab verbs.Fabric) (nfs3.FileHandle, error) {
	deadline := time.Now().Add(m.opts.Retry)
	for try := 1; ; try++ {
		actx, cancel := context.WithTimeout(ctx, min(max(m.opts.Timeo, 5*time.Second), attemptTimeout))
		root, err := m.connectOnce(actx, fab)
		cancel()
		if err == nil {
			return root, nil
		}
		if m.opts.Proto == "rdma" {
			// This machine's own refusal: trying again changes nothing.
			if lerr := localRDMAError(err, m.opts.NConnect, m.pool.MaxIO); lerr != nil {
				return nil, lerr
			}
		}
		if !retryable(err) || time.Now().Add(2*time.Second).After(deadline) || ctx.Err() != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("the server does not answer (%w)", err)
			}
			return nil, err
		}
		m.log.Warn("server not reachable, trying again", "try", try, "err", err)
		if m.onRetry != nil {
			m.onRetry(fmt.Errorf("the server is not reachable (%w); trying again for %d minutes", err, int(time.Until(deadline).Round(time.Minute).Minutes())))
		}
		select {
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (m *mountServer) connectOnce(ctx context.Context, fab verbs.Fabric) (root nfs3.FileHandle, err error) {
	// resvport (the default): MOUNT and NFS over TCP from a port below
	// 1024 when the process may bind one, as exports(5)'s "secure" needs.
	tcpOpts := &sunrpc.TCPOptions{Logger: m.log, NoResvPort: m.opts.NoResvPort}
	ip, err := resolve(ctx, m.host, m.opts.IPv6)
	if err != nil {
		return nil, err
	}
	m.addr = ip
	// MOUNT's connection as the transport would make it, remembering its
	// source port for the explanation of a refusal.
	var mountPort atomic.Int32
	mountOpts := *tcpOpts
	mountOpts.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		var err error
		if m.opts.NoResvPort {
			var d net.Dialer
			c, err = d.DialContext(ctx, network, addr)
		} else {
			c, err = sunrpc.DialResvPort(ctx, network, addr, 0)
		}
		if err == nil {
			if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
				mountPort.Store(int32(a.Port))
			}
		}
		return c, err
	}
	mc, err := nfs3.DialMount(ctx, ip.String(), m.opts.MountPort, m.cred, &mountOpts)
	if err != nil {
		return nil, fmt.Errorf("MOUNT service: %w", err)
	}
	res, err := mc.Mnt(ctx, m.export)
	mc.Close()
	if err != nil {
		return nil, explainMount(m.export, err, int(mountPort.Load()), m.opts.NoResvPort)
	}
	var ts []sunrpc.Transport
	defer func() {
		if err != nil {
			for _, t := range ts {
				t.Close()
			}
			m.rdma, m.tcp = nil, nil
		}
	}()
	switch m.opts.Proto {
	case "rdma":
		maxIO := max(m.opts.Rsize, m.opts.Wsize)
		if maxIO == 0 {
			maxIO = maxIOSize
		}
		for range m.opts.NConnect {
			cfg := xprt.Config{
				Fabric:  fab,
				Addr:    netip.AddrPortFrom(ip, uint16(m.opts.Port)),
				MaxIO:   int(maxIO),
				Timeout: m.opts.Timeo,
				Logger:  m.log,
				Inline:  m.opts.Inline,
			}
			if m.pool.Sized {
				m.pool.Apply(&cfg)
			}
			t, err := xprt.Dial(ctx, cfg)
			if err != nil {
				return nil, err
			}
			m.rdma = append(m.rdma, t)
			ts = append(ts, t)
		}
	case "tcp":
		port := m.opts.Port
		if port == 0 {
			if port, err = sunrpc.LookupPort(ctx, ip.String(), nfs3.Program, nfs3.Version, tcpOpts); err != nil {
				return nil, fmt.Errorf("NFS service port: %w", err)
			}
		}
		for range m.opts.NConnect {
			t, err := sunrpc.DialTCP(ctx, net.JoinHostPort(ip.String(), strconv.Itoa(port)), tcpOpts)
			if err != nil {
				return nil, err
			}
			m.tcp = append(m.tcp, t)
			ts = append(ts, t)
		}
	}
	var t sunrpc.Transport = ts[0]
	if len(ts) > 1 {
		if t, err = sunrpc.NewMultiTransport(ts...); err != nil {
			return nil, err
		}
	}
	m.metered = sunrpc.NewMeteredTransport(t, nfs3.ProgramProcName)
	return res.FH, nil
}

// mount makes the mount live: MOUNT, the NFS transport, the file system,
// the FUSE mount and the control socket. On failure nothing is left
// mounted or open.
func (m *mountServer) mount(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			m.release()
			err = &MountError{Spec: m.inv.spec, Dir: m.inv.dir, Err: err}
		}
	}()
	if _, err := controlRequest(m.dir, "ping", 2*time.Second); err == nil {
		return fmt.Errorf("%s: %w", m.dir, ErrAlreadyServed)
	}
	if err := clearMountPoint(m.dir, m.log.Warn); err != nil {
		return err
	}
	if err := checkMountPoint(m.inv.dir); err != nil {
		return err
	}
	if err := checkFUSE(); err != nil {
		return err
	}
	shared, err := allowOther(m.opts, os.Geteuid())
	if err != nil {
		return err
	}
	if m.cred, err = credential(m.opts); err != nil {
		return err
	}
	var fab verbs.Fabric
	if m.opts.Proto == "rdma" {
		if fab, err = openFabric(); err != nil {
			return err
		}
		if err := m.sizePool(); err != nil {
			return err
		}
		if faultInjection() {
			m.faults = faulty.New(fab)
			fab = m.faults
			m.log.Warn("fault injection enabled (" + faultInjectEnv + "=1): for testing only")
		}
	}
	root, err := m.connect(ctx, fab)
	if err != nil {
		return err
	}
	rsize, wsize := m.opts.Rsize, m.opts.Wsize
	if len(m.rdma) > 0 {
		rsize, wsize = cmp(rsize, maxIOSize), cmp(wsize, maxIOSize)
	}
	retry := sunrpc.RetryPolicy{Timeout: m.opts.Timeo, Retrans: m.opts.Retrans, Hard: m.opts.Hard}
	if len(m.rdma) > 0 && m.opts.Hard {
		// Over RDMA the transport itself retransmits: after timeo it
		// resets the connection and sends the call again on a new one
		// (a same-xid resend on the old connection would leave the
		// first attempt's windows exposed until then).
		retry = sunrpc.RetryPolicy{}
	}
	// The log's "server OK" after "server not responding"; where the
	// transport retransmits by itself, the "not responding" too.
	watch := &serverWatch{t: m.metered, log: m.log, server: m.host}
	if retry.Timeout == 0 {
		watch.announce = m.opts.Timeo
	}
	m.client, err = nfs3.NewClient(watch, &nfs3.ClientOptions{
		Cred:   m.cred,
		Retry:  retry,
		Logger: m.log,
		Rsize:  rsize,
		Wsize:  wsize,
	})
	if err != nil {
		return err
	}
	fsOpts := m.opts.FS
	fsOpts.Logger = m.log
	if m.opts.UID != nil || m.opts.GID != nil {
		// uid= or gid= name the one identity every call carries.
		fsOpts.CallerIdentity = false
	}
	if err := m.startLocks(m.addr, &sunrpc.TCPOptions{Logger: m.log, NoResvPort: m.opts.NoResvPort}, &fsOpts); err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, attemptTimeout)
	m.fsys, err = fusefs.New(actx, m.client, root, &fsOpts)
	cancel()
	if err != nil {
		return err
	}
	root0 := os.Geteuid() == 0
	mc := fusefs.MountConfig{
		FsName:     m.inv.spec,
		AllowOther: shared,
		// As root, mount(2) directly; else through fusermount.
		DirectMount: root0,
		MountFlags:  m.opts.MountFlags,
		Debug:       m.inv.verbose && os.Getenv("NFSRDMA_FUSE_DEBUG") != "",
	}
	fo := m.fsys.FUSEOptions(mc)
	fo.MountOptions.Options = append(fo.MountOptions.Options, flagOptions(m.opts.MountFlags, !root0)...)
	if m.fuse, err = fusefs.MountWith(m.dir, m.fsys, fo); err != nil {
		if strings.Contains(err.Error(), "fusermount exited") {
			// go-fuse says only that; fusermount's own message went to
			// stderr, which the mount command shows above this one.
			return fmt.Errorf("FUSE mount: %v (fusermount's message above says why)", strings.TrimSpace(err.Error()))
		}
		return fmt.Errorf("FUSE mount: %w", err)
	}
	var inject func(string) string
	if m.faults != nil {
		inject = m.injectFault
	}
	if m.ctl, err = listenControl(m.dir, m.statsAnswer, m.unmount, inject); err != nil {
		return err
	}
	m.started = time.Now()
	return nil
}

// startLocks makes the lock manager client of lock (the default) unless
// nolock or local_lock=all keep every lock local: NLM over TCP to the
// server's lockd, from a reserved port as MOUNT (resvport).
func (m *mountServer) startLocks(ip netip.Addr, tcpOpts *sunrpc.TCPOptions, fsOpts *fusefs.Options) error {
	o := m.opts
	fsOpts.LocalPosix = o.LocalLock == "posix" || o.LocalLock == "all"
	fsOpts.LocalFlock = o.LocalLock == "flock" || o.LocalLock == "all"
	if o.NoLock || o.LocalLock == "all" || m.locks != nil {
		fsOpts.Locker = m.locks
		return nil
	}
	c, err := nlm.NewClient(nlm.Config{Server: ip.String(), TCP: *tcpOpts, Logger: m.log})
	if err != nil {
		return err
	}
	m.locks = nlm.NewLocker(c, nlm.LockerConfig{Logger: m.log})
	fsOpts.Locker = m.locks
	return nil
}

// stopLocks gives back every lock still held (unmount) and closes the
// lock manager client.
func (m *mountServer) stopLocks() {
	if m.locks == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.locks.Close(ctx); err != nil {
		m.log.Warn("unlocking at unmount", "err", err)
	}
	m.locks.Client().Close()
	m.locks = nil
}

// flagOptions returns the VFS flags as FUSE mount options. go-fuse turns
// [no]suid, [no]dev and [no]exec back into flags for mount(2); fusermount
// takes the atime ones too (for mount(2) they are in the flags already).
// Without root, suid and dev are not asked for: fusermount refuses them.
func flagOptions(flags uintptr, fusermount bool) []string {
	var s []string
	pair := func(bit uintptr, on, off string) {
		if flags&bit != 0 {
			s = append(s, on)
		} else if off != "" {
			s = append(s, off)
		}
	}
	if fusermount {
		pair(syscall.MS_NOSUID, "nosuid", "")
		pair(syscall.MS_NODEV, "nodev", "")
	} else {
		pair(syscall.MS_NOSUID, "nosuid", "suid")
		pair(syscall.MS_NODEV, "nodev", "dev")
	}
	pair(syscall.MS_NOEXEC, "noexec", "exec")
	if fusermount {
		pair(syscall.MS_NOATIME, "noatime", "")
		pair(syscall.MS_NODIRATIME, "nodiratime", "")
		pair(syscall.MS_STRICTATIME, "strictatime", "")
	}
	return s
}

// cmp returns v, or def when v is 0.
func cmp(v, def uint32) uint32 {
	if v == 0 {
		return def
	}
	return min(v, def)
}

// unmount unmounts the FUSE mount (the control socket's "unmount"): busy is
// an error, the mount stays.
func (m *mountServer) unmount() error {
	if m.fuse == nil {
		return errNotMounted
	}
	return m.fuse.Unmount()
}

// unmountForSignal unmounts for SIGINT/SIGTERM: if the mount is busy, it is
// detached (lazy unmount) and served until its last user lets go.
func (m *mountServer) unmountForSignal() {
	for range 5 {
		err := m.fuse.Unmount()
		if err == nil {
			return
		}
		if !errors.Is(err, syscall.EBUSY) {
			m.log.Warn("unmount", "err", err)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	m.log.Warn("mount busy: detaching it (lazy unmount)")
	if err := syscall.Unmount(m.dir, syscall.MNT_DETACH); err != nil {
		m.log.Warn("lazy unmount", "err", err)
	}
}

// release closes everything after the FUSE server stopped (or a mount
// failed): the file system, MOUNTPROC3_UMNT to the server, the transport,
// the control socket (last: its disappearing tells "-u" the server is done).
func (m *mountServer) release() {
	if m.fsys != nil {
		m.fsys.Close()
	}
	m.stopLocks()
	if m.client != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		host := m.host
		if m.addr.IsValid() {
			host = m.addr.String()
		}
		if mc, err := nfs3.DialMount(ctx, host, m.opts.MountPort, m.cred, &sunrpc.TCPOptions{Logger: m.log, NoResvPort: m.opts.NoResvPort}); err == nil {
			if err := mc.Umnt(ctx, m.export); err != nil {
				m.log.Debug("UMNT", "err", err)
			}
			mc.Close()
		}
		cancel()
		m.client.Close() // closes the transport
	} else if m.metered != nil {
		m.metered.Close()
	}
	if m.ctl != nil {
		m.ctl.Close()
	}
}
