package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nfsrdma/nfsrdma/fusefs"
	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/ibv"
	"github.com/nfsrdma/nfsrdma/xprt"
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

	cred    sunrpc.OpaqueAuth
	rdma    *xprt.Transport      // proto=rdma
	tcp     *sunrpc.TCPTransport // proto=tcp
	metered *fusefs.MeteredTransport
	client  *nfs3.Client
	fsys    *fusefs.FS
	fuse    *fuse.Server
	ctl     *controlServer
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
	for _, name := range []string{"fusermount3", "fusermount"} {
		if _, err := exec.LookPath(name); err == nil {
			return nil
		}
	}
	return errors.New("not root, and neither fusermount3 nor fusermount is installed (install fuse3, or mount as root)")
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

// errNoRDMA is what a mount over RDMA says without an RDMA device.
var errNoRDMA = errors.New("no RDMA device: create one with `rdma link add rxe0 type rxe netdev IFACE` (Soft-RoCE on network interface IFACE), or mount with proto=tcp")

// openFabric opens rdma-core, translating its "no device" errors.
func openFabric() (verbs.Fabric, error) {
	fab, err := ibv.Open()
	if err != nil {
		var oe *verbs.OpError
		switch {
		case errors.Is(err, verbs.ErrNoRDMA):
			return nil, fmt.Errorf("%w (%v)", errNoRDMA, err)
		case errors.Is(err, syscall.ENODEV) || errors.As(err, &oe) && oe.Verb == "ibv_get_device_list":
			return nil, errNoRDMA
		}
		return nil, err
	}
	return fab, nil
}

// resolve returns an address of host.
func resolve(ctx context.Context, host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a, nil
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

// retryable reports whether a failed attempt to reach the server may
// succeed later (the server or its network not up yet).
func retryable(err error) bool {
	var nr *sunrpc.NotRegisteredError
	var ne net.Error
	var ce *xprt.ConnectError
	switch {
	case errors.As(err, new(nfs3.MountStatus)), errors.Is(err, errNoRDMA):
		return false
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ETIMEDOUT), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.As(err, &nr), errors.As(err, &ne), errors.As(err, &ce):
		return true
	}
	return false
}

// explainMount makes MOUNT's refusals say what they mean.
func explainMount(export string, err error) error {
	var ms nfs3.MountStatus
	if !errors.As(err, &ms) {
		return err
	}
	switch ms {
	case nfs3.MountErrNoEnt:
		return fmt.Errorf("the server has no export %s (%w)", export, err)
	case nfs3.MountErrAcces, nfs3.MountErrPerm:
		return fmt.Errorf("the server denied access to %s (%w)", export, err)
	case nfs3.MountErrNotDir:
		return fmt.Errorf("%s is not a directory on the server (%w)", export, err)
	}
	return fmt.Errorf("the server refused to mount %s (%w)", export, err)
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
		if !retryable(err) || time.Now().Add(2*time.Second).After(deadline) || ctx.Err() != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("the server does not answer (%w)", err)
			}
			return nil, err
		}
		m.log.Warn("server not reachable, trying again", "try", try, "err", err)
		select {
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (m *mountServer) connectOnce(ctx context.Context, fab verbs.Fabric) (nfs3.FileHandle, error) {
	tcpOpts := &sunrpc.TCPOptions{Logger: m.log}
	mc, err := nfs3.DialMount(ctx, m.host, m.opts.MountPort, m.cred, tcpOpts)
	if err != nil {
		return nil, fmt.Errorf("MOUNT service: %w", err)
	}
	res, err := mc.Mnt(ctx, m.export)
	mc.Close()
	if err != nil {
		return nil, explainMount(m.export, err)
	}
	switch m.opts.Proto {
	case "rdma":
		ip, err := resolve(ctx, m.host)
		if err != nil {
			return nil, err
		}
		maxIO := max(m.opts.Rsize, m.opts.Wsize)
		if maxIO == 0 {
			maxIO = maxIOSize
		}
		t, err := xprt.Dial(ctx, xprt.Config{
			Fabric:  fab,
			Addr:    netip.AddrPortFrom(ip, uint16(m.opts.Port)),
			MaxIO:   int(maxIO),
			Timeout: m.opts.Timeo,
			Logger:  m.log,
		})
		if err != nil {
			return nil, err
		}
		m.rdma = t
		m.metered = fusefs.NewMeteredTransport(t)
	case "tcp":
		port := m.opts.Port
		if port == 0 {
			if port, err = sunrpc.LookupPort(ctx, m.host, nfs3.Program, nfs3.Version, tcpOpts); err != nil {
				return nil, fmt.Errorf("NFS service port: %w", err)
			}
		}
		t, err := sunrpc.DialTCP(ctx, net.JoinHostPort(m.host, strconv.Itoa(port)), tcpOpts)
		if err != nil {
			return nil, err
		}
		m.tcp = t
		m.metered = fusefs.NewMeteredTransport(t)
	}
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
	if err := checkMountPoint(m.inv.dir); err != nil {
		return err
	}
	if err := checkFUSE(); err != nil {
		return err
	}
	if _, err := controlRequest(m.dir, "ping", 2*time.Second); err == nil {
		return fmt.Errorf("%s: %w", m.dir, ErrAlreadyServed)
	}
	if m.cred, err = credential(m.opts); err != nil {
		return err
	}
	var fab verbs.Fabric
	if m.opts.Proto == "rdma" {
		if fab, err = openFabric(); err != nil {
			return err
		}
	}
	root, err := m.connect(ctx, fab)
	if err != nil {
		return err
	}
	rsize, wsize := m.opts.Rsize, m.opts.Wsize
	if m.rdma != nil {
		rsize, wsize = cmp(rsize, maxIOSize), cmp(wsize, maxIOSize)
	}
	retry := sunrpc.RetryPolicy{Timeout: m.opts.Timeo, Retrans: m.opts.Retrans, Hard: m.opts.Hard}
	if m.rdma != nil && m.opts.Hard {
		// Over RDMA the transport itself retransmits: after timeo it
		// resets the connection and sends the call again on a new one
		// (a same-xid resend on the old connection would leave the
		// first attempt's windows exposed until then).
		retry = sunrpc.RetryPolicy{}
	}
	m.client, err = nfs3.NewClient(m.metered, &nfs3.ClientOptions{
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
	actx, cancel := context.WithTimeout(ctx, attemptTimeout)
	m.fsys, err = fusefs.New(actx, m.client, root, &fsOpts)
	cancel()
	if err != nil {
		return err
	}
	root0 := os.Geteuid() == 0
	mc := fusefs.MountConfig{
		FsName:     m.inv.spec,
		AllowOther: root0,
		// As root, mount(2) directly; else through fusermount.
		DirectMount: root0,
		MountFlags:  m.opts.MountFlags,
		Debug:       m.inv.verbose && os.Getenv("NFSRDMA_FUSE_DEBUG") != "",
	}
	if m.fuse, err = fusefs.Mount(m.dir, m.fsys, mc); err != nil {
		return fmt.Errorf("FUSE mount: %w", err)
	}
	if m.ctl, err = listenControl(m.dir, m.statsText, m.unmount); err != nil {
		return err
	}
	m.started = time.Now()
	return nil
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
	m.log.Warn("mount busy: detaching it (lazy unmount)", "dir", m.dir)
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
	if m.client != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if mc, err := nfs3.DialMount(ctx, m.host, m.opts.MountPort, m.cred, &sunrpc.TCPOptions{Logger: m.log}); err == nil {
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

// statsText is the answer to "stats": in the spirit of /proc/self/mountstats.
func (m *mountServer) statsText() string {
	var b strings.Builder
	fmt.Fprintf(&b, "device %s mounted on %s with fstype fuse.nfsrdma\n", m.inv.spec, m.dir)
	fmt.Fprintf(&b, "\topts:\t%s\n", m.opts)
	fmt.Fprintf(&b, "\tage:\t%d\n", int(time.Since(m.started).Seconds()))
	fmt.Fprintf(&b, "\tpid:\t%d\n", os.Getpid())
	rsize, wsize := m.fsys.IOSizes()
	fmt.Fprintf(&b, "\tcaps:\trsize=%d,wsize=%d\n", rsize, wsize)
	switch {
	case m.rdma != nil:
		fmt.Fprintf(&b, "\txprt:\trdma %s:%d %s\n", m.host, m.opts.Port, m.rdma.Counters().String())
	case m.tcp != nil:
		s := m.tcp.Stats()
		fmt.Fprintf(&b, "\txprt:\ttcp %s connects %d connection_losses %d retransmits %d unmatched_replies %d malformed_records %d\n",
			m.tcp.Addr(), s.Connects, s.ConnectionLosses, s.Retransmits, s.UnmatchedReplies, s.MalformedRecords)
	}
	b.WriteString("\tper-op statistics\n")
	fusefs.WriteStats(&b, m.metered.Stats())
	return b.String()
}
