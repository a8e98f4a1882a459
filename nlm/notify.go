package nlm

import (
	"bufio"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// Reboot notifications (NSM). The kernel's lockd learns that a server
// rebooted through this host's rpc.statd: lockd asks it to monitor the
// server (SM_MON, naming an RPC procedure of its own in my_id), and when
// the server's statd sends this host an SM_NOTIFY after its reboot, the
// local statd calls that procedure with the server's name and new NSM
// state (struct status: mon_name, state, priv).
//
// A Locker does the same while it holds locks: it listens for that call
// on a UDP port of 127.0.0.1 (statd calls back over UDP, always to the
// loopback address, finding the port with the port mapper), registers
// the port with this host's rpcbind, and asks the local statd to monitor
// the server (SM_MON); when the last lock goes it asks statd to stop
// (SM_UNMON) and unregisters. A notification starts the same reclaim as
// the poller's checks, at once, with the server known to have restarted.
//
// rpc.statd accepts only the kernel lockd's callback in SM_MON: program
// NLM (100021), procedure 16 or 24. So the Locker registers a version of
// the NLM program that the kernel's lockd does not use (a random one
// above 2^30, another if taken) for its own port, and names it with
// procedure 16 (NLMPROC_NSM_NOTIFY); statd's callback then reaches this
// Locker and the kernel's lockd is not disturbed. rpcbind accepts
// registrations only through its local socket (/run/rpcbind.sock; root);
// without it the port mapper is asked over TCP (PMAPPROC_SET), which an
// rpcbind started with -L or another port mapper accepts.
//
// When no local statd or rpcbind takes the registration, that is logged
// once and the Locker relies on its polling. The polling goes on in any
// case: a lockd restart without a reboot (knfsd restarted) sends no
// notification.

// nsmCallbackProc is the procedure named in SM_MON: the kernel lockd's
// NLMPROC_NSM_NOTIFY, one of the two rpc.statd accepts.
const nsmCallbackProc = 16

// DefaultRpcbindSocket is rpcbind's local socket.
const DefaultRpcbindSocket = "/run/rpcbind.sock"

// rpcbind versions 3 and 4 (RFC 1833 §2).
const (
	rpcbVers      = 4
	rpcbProcSet   = 1
	rpcbProcUnset = 2
)

// notifyState values (Locker.notify).
const (
	notifyNone = iota // not monitoring
	notifyOn          // SM_MON done: notifications come
	notifyOff         // unavailable (logged once)
)

// notifier is the callback listener of a Locker while it monitors the
// server.
type notifier struct {
	conn  *net.UDPConn
	vers  uint32
	priv  [16]byte
	via   string // how the port was registered: the rpcbind socket's path or the port mapper's address
	statd string // the local statd's address
	deliv chan<- int32
	wg    sync.WaitGroup
}

// maxLocalReply bounds the reply of the local rpcbind or statd.
const maxLocalReply = 1 << 16

// oneCall makes one RPC call over a new stream connection to addr
// (network "tcp" or "unix") with AUTH_NONE and returns the results.
func oneCall(ctx context.Context, network, addr string, prog, vers, proc uint32, args []byte) (*sunrpc.Decoder, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	xid := rand.Uint32()
	msg := sunrpc.AppendCall(nil, &sunrpc.CallHeader{XID: xid, Prog: prog, Vers: vers, Proc: proc})
	msg = append(msg, args...)
	if err := sunrpc.WriteRecord(c, msg); err != nil {
		return nil, err
	}
	body, err := sunrpc.ReadRecord(bufio.NewReader(c), maxLocalReply)
	if err != nil {
		return nil, err
	}
	dec := sunrpc.NewDecoder(body)
	h, err := sunrpc.DecodeReply(dec)
	if err != nil {
		return nil, err
	}
	if h.XID != xid {
		return nil, fmt.Errorf("nlm: reply xid %#x to call %#x", h.XID, xid)
	}
	if err := h.Err(); err != nil {
		return nil, err
	}
	return dec, nil
}

// uaddr is the universal address of 127.0.0.1:port (RFC 5665).
func uaddr(port int) string {
	return "127.0.0.1." + strconv.Itoa(port>>8) + "." + strconv.Itoa(port&0xff)
}

// register maps NLM version vers over UDP to port with this host's
// rpcbind: through its local socket, else its port mapper over TCP. It
// returns how, or an error (false: the mapping is taken).
func (l *Locker) register(ctx context.Context, vers uint32, port int, set bool) (string, error) {
	var errs []error
	if sock := l.cfg.RpcbindSocket; sock != "" {
		proc := uint32(rpcbProcSet)
		addr := uaddr(port)
		if !set {
			proc, addr = rpcbProcUnset, ""
		}
		args := sunrpc.AppendUint32(nil, Program)
		args = sunrpc.AppendUint32(args, vers)
		args = sunrpc.AppendString(args, "udp")
		args = sunrpc.AppendString(args, addr)
		args = sunrpc.AppendString(args, "nfsrdma")
		d, err := oneCall(ctx, "unix", sock, sunrpc.PortmapProg, rpcbVers, proc, args)
		if err == nil {
			ok := d.Bool()
			if err := d.Err(); err != nil {
				return "", err
			}
			if !ok {
				return "", errTaken
			}
			return sock, nil
		}
		errs = append(errs, fmt.Errorf("rpcbind at %s: %w", sock, err))
	}
	m := sunrpc.Mapping{Prog: Program, Vers: vers, Prot: sunrpc.IPProtoUDP, Port: uint32(port)}
	proc := uint32(sunrpc.PmapProcSet)
	if !set {
		proc, m.Port = sunrpc.PmapProcUnset, 0
	}
	d, err := oneCall(ctx, "tcp", l.cfg.LocalStatd, sunrpc.PortmapProg, sunrpc.PortmapVers, proc, sunrpc.AppendMapping(nil, &m))
	if err == nil {
		ok := d.Bool()
		if err := d.Err(); err != nil {
			return "", err
		}
		if !ok {
			return "", errTaken
		}
		return l.cfg.LocalStatd, nil
	}
	errs = append(errs, fmt.Errorf("port mapper at %s: %w", l.cfg.LocalStatd, err))
	return "", errors.Join(errs...)
}

var errTaken = errors.New("nlm: the port mapper refused the mapping")

// monArgs appends struct mon_id (SM_UNMON) or struct mon (SM_MON, with
// priv) for the server.
func (l *Locker) monArgs(vers uint32, priv *[16]byte) []byte {
	b := sunrpc.AppendString(nil, l.c.cfg.Server)
	// my_name: statd calls back on the loopback address whatever it
	// says. Not this host's name, which the kernel's lockd sends: statd
	// deletes a host's on-disk record at SM_UNMON by mon_name and my_name,
	// and must not take the kernel's with ours.
	b = sunrpc.AppendString(b, "127.0.0.1")
	b = sunrpc.AppendUint32(b, Program)
	b = sunrpc.AppendUint32(b, vers)
	b = sunrpc.AppendUint32(b, nsmCallbackProc)
	if priv != nil {
		b = sunrpc.AppendFixedOpaque(b, priv[:])
	}
	return b
}

// statdAddr returns the TCP address of this host's statd.
func (l *Locker) statdAddr(ctx context.Context) (string, error) {
	port, err := sunrpc.LookupPort(ctx, l.cfg.LocalStatd, NSMProgram, NSMVersion, &sunrpc.TCPOptions{NoResvPort: true})
	if err != nil {
		return "", err
	}
	host, _, err := net.SplitHostPort(l.cfg.LocalStatd)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(host, strconv.Itoa(port)), nil
}

// startNotify listens for statd's callback, registers it and asks the
// local statd to monitor the server.
func (l *Locker) startNotify(ctx context.Context) (*notifier, error) {
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	n := &notifier{conn: conn, deliv: l.notified}
	crand.Read(n.priv[:])
	port := conn.LocalAddr().(*net.UDPAddr).Port
	for try := 0; ; try++ {
		n.vers = 1<<30 | rand.Uint32()&(1<<30-1)
		n.via, err = l.register(ctx, n.vers, port, true)
		if err == nil {
			break
		}
		if !errors.Is(err, errTaken) || try == 7 {
			conn.Close()
			return nil, fmt.Errorf("registering the callback: %w", err)
		}
	}
	n.wg.Add(1)
	go n.serve()
	fail := func(err error) (*notifier, error) {
		l.stopNotify(n, false)
		return nil, err
	}
	if n.statd, err = l.statdAddr(ctx); err != nil {
		return fail(fmt.Errorf("this host's statd: %w", err))
	}
	d, err := oneCall(ctx, "tcp", n.statd, NSMProgram, NSMVersion, NSMProcMon, l.monArgs(n.vers, &n.priv))
	if err != nil {
		return fail(fmt.Errorf("SM_MON: %w", err))
	}
	res := d.Uint32()
	d.Int32()
	if err := d.Err(); err != nil {
		return fail(fmt.Errorf("SM_MON reply: %w", err))
	}
	if res != NSMSuccess {
		return fail(fmt.Errorf("statd refused SM_MON of %s", l.c.cfg.Server))
	}
	return n, nil
}

// stopNotify asks statd to stop monitoring (when it was asked to start:
// unmon), unregisters the callback and closes it.
func (l *Locker) stopNotify(n *notifier, unmon bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if unmon {
		addr, err := l.statdAddr(ctx) // statd may have moved since
		if err != nil {
			addr = n.statd
		}
		if _, err := oneCall(ctx, "tcp", addr, NSMProgram, NSMVersion, NSMProcUnmon, l.monArgs(n.vers, nil)); err != nil {
			l.log.Debug("SM_UNMON failed", "server", l.c.cfg.Server, "err", err)
		}
	}
	if _, err := l.register(ctx, n.vers, 0, false); err != nil {
		l.log.Debug("unregistering the reboot notification callback failed", "vers", n.vers, "err", err)
	}
	n.conn.Close()
	n.wg.Wait()
}

// serve answers statd's calls until the connection is closed.
func (n *notifier) serve() {
	defer n.wg.Done()
	buf := make([]byte, 4096)
	for {
		sz, from, err := n.conn.ReadFromUDP(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if !from.IP.IsLoopback() {
			continue // statd calls back from this host only
		}
		d := sunrpc.NewDecoder(buf[:sz])
		h, err := sunrpc.DecodeCall(d)
		if err != nil {
			continue
		}
		rh := sunrpc.ReplyHeader{XID: h.XID, Stat: sunrpc.MsgAccepted, Accept: sunrpc.Success}
		switch {
		case h.Prog != Program:
			rh.Accept = sunrpc.ProgUnavail
		case h.Vers != n.vers:
			rh.Accept, rh.Low, rh.High = sunrpc.ProgMismatch, n.vers, n.vers
		case h.Proc == ProcNull:
		case h.Proc == nsmCallbackProc:
			// struct status: mon_name, state, priv.
			d.String(MaxNSMName)
			state := d.Int32()
			priv := d.FixedOpaque(16)
			if d.Err() != nil {
				rh.Accept = sunrpc.GarbageArgs
				break
			}
			if string(priv) != string(n.priv[:]) {
				break // not ours (an old registration of another Locker)
			}
			select {
			case n.deliv <- state:
			default: // one waits already: the reclaim will see it
			}
		default:
			rh.Accept = sunrpc.ProcUnavail
		}
		n.conn.WriteToUDP(sunrpc.AppendReply(nil, &rh), from)
	}
}

// manageNotify starts monitoring the server when locks are held and stops
// when none is; called by the monitor only.
func (l *Locker) manageNotify() {
	holding := l.holding()
	switch {
	case holding && l.nsm == nil && l.notify.Load() == notifyNone:
		ctx, cancel := context.WithTimeout(l.ctx, 5*time.Second)
		n, err := l.startNotify(ctx)
		cancel()
		if err != nil {
			l.notify.Store(notifyOff)
			l.log.Info("reboot notifications unavailable (no local statd or rpcbind takes them): the server is checked every "+
				l.cfg.MonitorInterval.String()+" instead", "err", err)
			return
		}
		l.nsm = n
		l.notify.Store(notifyOn)
		l.log.Debug("statd monitors the server for this mount's locks", "server", l.c.cfg.Server, "callback", n.conn.LocalAddr(), "vers", n.vers, "via", n.via)
	case !holding && l.nsm != nil:
		l.stopNotify(l.nsm, true)
		l.nsm = nil
		l.notify.Store(notifyNone)
	}
}

// kickNotify wakes the monitor to start or stop monitoring.
func (l *Locker) kickNotify() {
	select {
	case l.monKick <- struct{}{}:
	default:
	}
}

// Notifying reports whether the local statd monitors the server for this
// Locker (reboot notifications come).
func (l *Locker) Notifying() bool { return l.notify.Load() == notifyOn }
