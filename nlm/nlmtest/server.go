// Package nlmtest is a small in-process lock manager for tests: NLM
// version 4 (TEST, LOCK, CANCEL, UNLOCK) with POSIX lock semantics per
// owner (caller name and svid), NSM's SM_STAT, and a port mapper that
// gives their port, all over TCP on 127.0.0.1. Restart simulates a server
// reboot: the locks are forgotten, the NSM state moves on, a grace period
// starts in which only reclaims are granted, and the lock manager moves to
// a new port.
//
// It also stands in for the client host's own rpcbind and rpc.statd, for
// reboot notifications: the port mapper takes registrations (PMAPPROC_SET
// and UNSET over TCP, RPCBPROC_SET and UNSET on the local socket of
// RpcbindSocket), the status monitor takes SM_MON and SM_UNMON (only for
// the kernel lockd's callback, program 100021 procedure 16 or 24, as
// rpc.statd), and Notify calls back the monitors of a host over UDP as
// rpc.statd does when that host's SM_NOTIFY arrives.
package nlmtest

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/nlm"
	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/sunrpc/sunrpctest"
)

// Owner is a lock owner as the server sees it.
type Owner struct {
	Caller string
	Svid   int32
}

// HeldLock is a lock the server holds.
type HeldLock struct {
	FH         string
	Owner      Owner
	Start, End uint64
	Exclusive  bool
}

// Server is the lock manager.
type Server struct {
	t   testing.TB
	pm  net.Listener // the port mapper
	svc net.Listener // NLM and NSM

	mu         sync.Mutex
	locks      []HeldLock
	blocked    map[Owner]nlm.LockArgs
	state      int32
	graceUntil time.Time
	calls      map[uint32]int // NLM procedure counts
	creds      map[uint32]sunrpc.OpaqueAuth
	reclaims   int
	cancels    int
	conns      sunrpctest.Conns
	rpcb       net.Listener // the local rpcbind socket
	rpcbPath   string
	mappings   map[sunrpc.Mapping]uint32 // registered (Port 0) → port
	monitors   []Monitor
	// Grace is the length of the grace period after Restart.
	Grace time.Duration
}

// Serve starts a Server; it is closed when the test ends.
func Serve(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, blocked: map[Owner]nlm.LockArgs{}, state: 1, calls: map[uint32]int{},
		creds: map[uint32]sunrpc.OpaqueAuth{}, Grace: 2 * time.Second,
		mappings: map[sunrpc.Mapping]uint32{}}
	var err error
	if s.pm, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if s.svc, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "nlmtest") // short: a socket's path is at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s.rpcbPath = filepath.Join(dir, "rpcbind.sock")
	if s.rpcb, err = net.Listen("unix", s.rpcbPath); err != nil {
		t.Fatal(err)
	}
	s.conns.Serve(s.pm, s.serve)
	s.conns.Serve(s.svc, s.serve)
	s.conns.Serve(s.rpcb, s.serve)
	t.Cleanup(s.Close)
	return s
}

// Portmapper returns the port mapper's address.
func (s *Server) Portmapper() string { return s.pm.Addr().String() }

// Port returns the port of the lock manager and the status monitor.
func (s *Server) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.svc.Addr().(*net.TCPAddr).Port
}

// Close stops the server.
func (s *Server) Close() { s.conns.Close() }

// Restart forgets every lock, moves the NSM state on, starts a grace
// period of s.Grace and serves NLM on a new port (the old connections
// dropped), as a rebooted server would.
func (s *Server) Restart() {
	s.mu.Lock()
	s.locks = nil
	s.blocked = map[Owner]nlm.LockArgs{}
	s.state += 2
	s.graceUntil = time.Now().Add(s.Grace)
	old := s.svc
	old.Close()
	s.conns.Drop(func(c net.Conn) bool { return c.LocalAddr().String() == old.Addr().String() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.mu.Unlock()
		s.t.Fatal(err)
		return
	}
	s.svc = ln
	s.mu.Unlock()
	s.conns.Serve(ln, s.serve)
}

// Locks returns the locks held.
func (s *Server) Locks() []HeldLock {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]HeldLock(nil), s.locks...)
}

// Calls returns how many calls of NLM procedure proc the server answered.
func (s *Server) Calls(proc uint32) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[proc]
}

// Cred returns the credential of the last call of NLM procedure proc.
func (s *Server) Cred(proc uint32) sunrpc.OpaqueAuth {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.creds[proc]
}

// Reclaims returns the reclaims granted.
func (s *Server) Reclaims() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reclaims
}

// Cancels returns the number of CANCEL calls.
func (s *Server) Cancels() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cancels
}

// Blocked returns the number of blocked LOCKs waiting.
func (s *Server) Blocked() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.blocked)
}

// SetLock gives a lock to owner directly, as another client's would be.
func (s *Server) SetLock(l HeldLock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.apply(l.FH, l.Owner, l.Start, l.End, l.Exclusive, false)
}

// ClearLocks drops the locks of owner, as another client's unlock.
func (s *Server) ClearLocks(o Owner) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var keep []HeldLock
	for _, l := range s.locks {
		if l.Owner != o {
			keep = append(keep, l)
		}
	}
	s.locks = keep
}

// serve answers the calls of c one at a time, in order.
func (s *Server) serve(c net.Conn) { sunrpctest.ServeRecords(c, s.handle) }

func (s *Server) handle(rec []byte) []byte {
	d := sunrpc.NewDecoder(rec)
	h, err := sunrpc.DecodeCall(d)
	if err != nil {
		return nil
	}
	rh := sunrpc.ReplyHeader{XID: h.XID, Stat: sunrpc.MsgAccepted, Accept: sunrpc.Success}
	var res []byte
	switch {
	case h.Prog == sunrpc.PortmapProg && h.Vers == sunrpc.PortmapVers && h.Proc == sunrpc.PmapProcGetPort:
		m := sunrpc.DecodeMapping(d)
		port := 0
		if (m.Prog == nlm.Program && m.Vers == nlm.Version) || (m.Prog == nlm.NSMProgram && m.Vers == nlm.NSMVersion) {
			port = s.Port()
		}
		s.mu.Lock()
		if p, ok := s.mappings[sunrpc.Mapping{Prog: m.Prog, Vers: m.Vers, Prot: m.Prot}]; ok {
			port = int(p)
		}
		s.mu.Unlock()
		res = sunrpc.AppendUint32(nil, uint32(port))
	case h.Prog == sunrpc.PortmapProg && h.Vers == sunrpc.PortmapVers && (h.Proc == sunrpc.PmapProcSet || h.Proc == sunrpc.PmapProcUnset):
		m := sunrpc.DecodeMapping(d)
		res = sunrpc.AppendBool(nil, s.setMapping(m.Prog, m.Vers, m.Prot, m.Port, h.Proc == sunrpc.PmapProcSet))
	case h.Prog == sunrpc.PortmapProg && (h.Vers == 3 || h.Vers == 4) && (h.Proc == 1 || h.Proc == 2):
		// RPCBPROC_SET, UNSET: struct rpcb.
		prog, vers := d.Uint32(), d.Uint32()
		netid, addr := d.String(64), d.String(256)
		d.String(256) // owner
		var prot, port uint32
		switch netid {
		case "udp":
			prot = sunrpc.IPProtoUDP
		case "tcp":
			prot = sunrpc.IPProtoTCP
		}
		if f := strings.Split(addr, "."); len(f) == 6 {
			hi, _ := strconv.Atoi(f[4])
			lo, _ := strconv.Atoi(f[5])
			port = uint32(hi<<8 | lo)
		}
		res = sunrpc.AppendBool(nil, prot != 0 && s.setMapping(prog, vers, prot, port, h.Proc == 1))
	case h.Prog == nlm.NSMProgram && h.Proc == nlm.NSMProcMon:
		m := Monitor{Name: d.String(nlm.MaxNSMName)}
		d.String(nlm.MaxNSMName) // my_name: the callback goes to 127.0.0.1
		m.Prog, m.Vers, m.Proc = d.Uint32(), d.Uint32(), d.Uint32()
		copy(m.Priv[:], d.FixedOpaque(16))
		st := uint32(nlm.NSMFailure)
		s.mu.Lock()
		if d.Err() == nil && m.Prog == nlm.Program && (m.Proc == 16 || m.Proc == 24) {
			st = nlm.NSMSuccess
			s.monitors = append(s.monitors, m)
		}
		res = sunrpc.AppendInt32(sunrpc.AppendUint32(nil, st), s.state)
		s.mu.Unlock()
	case h.Prog == nlm.NSMProgram && h.Proc == nlm.NSMProcUnmon:
		name := d.String(nlm.MaxNSMName)
		d.String(nlm.MaxNSMName)
		prog, vers, proc := d.Uint32(), d.Uint32(), d.Uint32()
		s.mu.Lock()
		var keep []Monitor
		for _, m := range s.monitors {
			if m.Name != name || m.Prog != prog || m.Vers != vers || m.Proc != proc {
				keep = append(keep, m)
			}
		}
		s.monitors = keep
		res = sunrpc.AppendInt32(nil, s.state)
		s.mu.Unlock()
	case h.Prog == nlm.NSMProgram && h.Proc == nlm.NSMProcStat:
		d.String(nlm.MaxNSMName)
		s.mu.Lock()
		res = sunrpc.AppendInt32(sunrpc.AppendUint32(nil, nlm.NSMSuccess), s.state)
		s.mu.Unlock()
	case h.Prog == nlm.NSMProgram && h.Proc == nlm.NSMProcNull:
	case h.Prog == nlm.Program && h.Vers == nlm.Version:
		s.mu.Lock()
		s.creds[h.Proc] = h.Cred
		s.mu.Unlock()
		var ok bool
		res, ok = s.nlm(h.Proc, d)
		if !ok {
			rh.Accept = sunrpc.GarbageArgs
		}
	default:
		rh.Accept = sunrpc.ProcUnavail
	}
	if d.Err() != nil {
		rh.Accept, res = sunrpc.GarbageArgs, nil
	}
	return append(sunrpc.AppendReply(nil, &rh), res...)
}

func (s *Server) nlm(proc uint32, d *sunrpc.Decoder) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[proc]++
	grace := time.Now().Before(s.graceUntil)
	switch proc {
	case nlm.ProcNull:
		return nil, true
	case nlm.ProcTest:
		a := nlm.DecodeTestArgs(d)
		r := nlm.TestRes{Cookie: a.Cookie}
		switch c := s.conflict(string(a.Lock.FH), owner(&a.Lock), a.Lock.Start, a.Lock.End, a.Exclusive); {
		case grace:
			r.Stat = nlm.DeniedGracePeriod
		case c != nil:
			r.Stat = nlm.Denied
			r.Holder = &nlm.Holder{Exclusive: c.Exclusive, Svid: c.Owner.Svid, Start: c.Start, End: c.End}
		}
		return nlm.AppendTestRes(nil, &r), true
	case nlm.ProcLock:
		a := nlm.DecodeLockArgs(d)
		r := nlm.Res{Cookie: a.Cookie}
		o := owner(&a.Lock)
		fh := string(a.Lock.FH)
		switch {
		case grace != a.Reclaim:
			r.Stat = nlm.DeniedGracePeriod
		case s.conflict(fh, o, a.Lock.Start, a.Lock.End, a.Exclusive) != nil:
			r.Stat = nlm.Denied
			if a.Block {
				r.Stat = nlm.Blocked
				s.blocked[o] = a
			}
		default:
			delete(s.blocked, o)
			s.apply(fh, o, a.Lock.Start, a.Lock.End, a.Exclusive, false)
			if a.Reclaim {
				s.reclaims++
			}
		}
		return nlm.AppendRes(nil, &r), true
	case nlm.ProcCancel:
		a := nlm.DecodeCancelArgs(d)
		s.cancels++
		o := owner(&a.Lock)
		r := nlm.Res{Cookie: a.Cookie, Stat: nlm.Denied}
		if _, ok := s.blocked[o]; ok {
			delete(s.blocked, o)
			r.Stat = nlm.Granted
		}
		return nlm.AppendRes(nil, &r), true
	case nlm.ProcUnlock:
		a := nlm.DecodeUnlockArgs(d)
		r := nlm.Res{Cookie: a.Cookie}
		if grace {
			r.Stat = nlm.DeniedGracePeriod
		} else {
			s.apply(string(a.Lock.FH), owner(&a.Lock), a.Lock.Start, a.Lock.End, false, true)
		}
		return nlm.AppendRes(nil, &r), true
	}
	return nil, false
}

// Monitor is a host a client asked the status monitor to watch (SM_MON).
type Monitor struct {
	Name             string
	Prog, Vers, Proc uint32
	Priv             [16]byte
}

// RpcbindSocket returns the path of the port mapper's local socket (as
// rpcbind's /run/rpcbind.sock).
func (s *Server) RpcbindSocket() string { return s.rpcbPath }

// Monitors returns the hosts monitored (SM_MON and not SM_UNMON).
func (s *Server) Monitors() []Monitor {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Monitor(nil), s.monitors...)
}

// Mappings returns the registrations made with the port mapper, by
// program, version and protocol.
func (s *Server) Mappings() map[sunrpc.Mapping]uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[sunrpc.Mapping]uint32{}
	for k, v := range s.mappings {
		m[k] = v
	}
	return m
}

func (s *Server) setMapping(prog, vers, prot, port uint32, set bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := sunrpc.Mapping{Prog: prog, Vers: vers, Prot: prot}
	if !set {
		delete(s.mappings, k)
		return true
	}
	if _, taken := s.mappings[k]; taken || port == 0 {
		return false
	}
	s.mappings[k] = port
	return true
}

// Notify does what rpc.statd does when the SM_NOTIFY of host name (its
// new NSM state state) arrives: it calls back, over UDP on 127.0.0.1, the
// procedure of every client that monitors name, at the port the port
// mapper gives its program and version (UDP), with struct status. It
// returns the number of callbacks answered.
func (s *Server) Notify(name string, state int32) int {
	answered := 0
	for i, m := range s.Monitors() {
		if m.Name != name {
			continue
		}
		s.mu.Lock()
		port, ok := s.mappings[sunrpc.Mapping{Prog: m.Prog, Vers: m.Vers, Prot: sunrpc.IPProtoUDP}]
		s.mu.Unlock()
		if !ok {
			continue
		}
		c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: int(port)})
		if err != nil {
			continue
		}
		xid := uint32(0x5e000000 + i)
		b := sunrpc.AppendCall(nil, &sunrpc.CallHeader{XID: xid, Prog: m.Prog, Vers: m.Vers, Proc: m.Proc})
		b = sunrpc.AppendString(b, m.Name)
		b = sunrpc.AppendInt32(b, state)
		b = sunrpc.AppendFixedOpaque(b, m.Priv[:])
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write(b); err == nil {
			buf := make([]byte, 512)
			if n, err := c.Read(buf); err == nil {
				h, err := sunrpc.DecodeReply(sunrpc.NewDecoder(buf[:n]))
				if err == nil && h.XID == xid && h.Err() == nil {
					answered++
				}
			}
		}
		c.Close()
	}
	return answered
}

// State returns the server's NSM state.
func (s *Server) State() int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

func owner(l *nlm.Lock) Owner { return Owner{Caller: l.CallerName, Svid: l.Svid} }

// conflict returns a lock of another owner that overlaps and excludes.
func (s *Server) conflict(fh string, o Owner, start, end uint64, excl bool) *HeldLock {
	for i := range s.locks {
		l := &s.locks[i]
		if l.FH == fh && l.Owner != o && l.Start <= end && start <= l.End && (excl || l.Exclusive) {
			c := *l
			return &c
		}
	}
	return nil
}

// apply sets [start, end] of o's locks on fh to one lock (or none).
func (s *Server) apply(fh string, o Owner, start, end uint64, excl, unlock bool) {
	var out []HeldLock
	for _, l := range s.locks {
		if l.FH != fh || l.Owner != o || l.End < start || l.Start > end {
			out = append(out, l)
			continue
		}
		if l.Start < start {
			out = append(out, HeldLock{fh, o, l.Start, start - 1, l.Exclusive})
		}
		if l.End > end {
			out = append(out, HeldLock{fh, o, end + 1, l.End, l.Exclusive})
		}
	}
	if !unlock {
		out = append(out, HeldLock{fh, o, start, end, excl})
	}
	s.locks = out
}

// String describes a lock, for test messages.
func (l HeldLock) String() string {
	t := "read"
	if l.Exclusive {
		t = "write"
	}
	return t + " " + strconv.FormatUint(l.Start, 10) + "-" + strconv.FormatUint(l.End, 10) + " svid " + strconv.Itoa(int(l.Owner.Svid))
}
