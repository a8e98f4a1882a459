package nlm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// Config says where the server's lock manager is and how to reach it.
type Config struct {
	// Server is the NFS server's host name or address, without a port.
	Server string
	// Portmapper is the address ("host:port") of the port mapper that
	// gives the ports of NLM and NSM; "" means Server's port 111.
	Portmapper string
	// NLMPort and NSMPort fix the ports of the server's lockd and statd;
	// 0 asks the port mapper (again after every lost connection: lockd
	// picks a new port when it restarts).
	NLMPort, NSMPort int
	// CallerName is this host's name in every lock (caller_name), as the
	// server's statd will monitor it; "" means os.Hostname.
	CallerName string
	// TCP configures the connections (reserved source port, as lockd's
	// client on Linux binds one when root).
	TCP sunrpc.TCPOptions
	// Cred is the credential of the calls; zero means AUTH_SYS as root
	// from CallerName, as the Linux client's lockd sends.
	Cred sunrpc.OpaqueAuth
	// CallTimeout is how long one try of a call waits for its reply
	// before the connection is made again (the server's ports looked up
	// again); 0 means 10 s. Calls are retried until their context ends.
	CallTimeout time.Duration
	// Logger receives the client's events; nil discards them.
	Logger *slog.Logger
}

func (c *Config) setDefaults() error {
	if c.Server == "" {
		return errors.New("nlm: no server")
	}
	if c.Portmapper == "" {
		c.Portmapper = net.JoinHostPort(c.Server, strconv.Itoa(sunrpc.PortmapPort))
	}
	if c.CallerName == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("nlm: this host's name: %w", err)
		}
		c.CallerName = h
	}
	if len(c.CallerName) > MaxStrLen {
		return fmt.Errorf("nlm: caller name of %d bytes", len(c.CallerName))
	}
	if c.Cred.Flavor == sunrpc.AuthFlavorNone && c.Cred.Body == nil {
		a := sunrpc.AuthSys{MachineName: c.CallerName}
		if len(a.MachineName) > sunrpc.MaxMachineName {
			a.MachineName = a.MachineName[:sunrpc.MaxMachineName]
		}
		cred, err := a.Credential()
		if err != nil {
			return err
		}
		c.Cred = cred
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// service is a connection to one RPC program of the server, made again
// (its port looked up again) when a call gets no answer.
type service struct {
	cfg        *Config
	name       string
	prog, vers uint32
	fixedPort  int
	xids       *sunrpc.XIDSource

	mu     sync.Mutex
	t      *sunrpc.TCPTransport
	rpc    *sunrpc.Client
	port   int
	losses uint64 // t's connection losses seen so far
	epoch  uint64 // bumped when the server's end may have restarted
	closed bool
}

func newService(cfg *Config, name string, prog, vers uint32, port int) *service {
	return &service{cfg: cfg, name: name, prog: prog, vers: vers, fixedPort: port, xids: sunrpc.NewXIDSource()}
}

// client returns the connection, making it when there is none.
func (s *service) client(ctx context.Context) (*sunrpc.Client, *sunrpc.TCPTransport, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, sunrpc.ErrClosed
	}
	if s.t != nil {
		if l := s.t.Stats().ConnectionLosses; l != s.losses {
			// The server closed the connection: it may have restarted.
			s.losses = l
			s.epoch++
		}
		return s.rpc, s.t, nil
	}
	port := s.fixedPort
	if port == 0 {
		p, err := sunrpc.LookupPort(ctx, s.cfg.Portmapper, s.prog, s.vers, &s.cfg.TCP)
		if err != nil {
			return nil, nil, fmt.Errorf("nlm: port of %s on %s: %w", s.name, s.cfg.Server, err)
		}
		port = p
	}
	t, err := sunrpc.DialTCP(ctx, net.JoinHostPort(s.cfg.Server, strconv.Itoa(port)), &s.cfg.TCP)
	if err != nil {
		return nil, nil, fmt.Errorf("nlm: connecting to %s on %s port %d: %w", s.name, s.cfg.Server, port, err)
	}
	rpc, err := sunrpc.NewClient(t, sunrpc.ClientConfig{Prog: s.prog, Vers: s.vers, Cred: s.cfg.Cred, XIDs: s.xids, Logger: s.cfg.Logger})
	if err != nil {
		t.Close()
		return nil, nil, err
	}
	if s.port != 0 {
		// A new connection after a lost one: the service may have restarted
		// (lockd restarts on a new port).
		s.epoch++
		if port != s.port {
			s.cfg.Logger.Info("server's "+s.name+" moved", "from", s.port, "to", port)
		}
	}
	s.t, s.rpc, s.port, s.losses = t, rpc, port, 0
	return rpc, t, nil
}

// reset drops t if it is still the connection, so that the next call looks
// the port up again.
func (s *service) reset(t *sunrpc.TCPTransport) {
	s.mu.Lock()
	if s.t == t && t != nil {
		s.t, s.rpc = nil, nil
		s.epoch++
	}
	s.mu.Unlock()
	if t != nil {
		t.Close()
	}
}

// Epoch returns a number that changes whenever the service's connection
// was lost or made again: the moments at which it may have restarted.
func (s *service) Epoch() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.t != nil {
		if l := s.t.Stats().ConnectionLosses; l != s.losses {
			s.losses = l
			s.epoch++
		}
	}
	return s.epoch
}

func (s *service) close() {
	s.mu.Lock()
	t := s.t
	s.t, s.rpc, s.closed = nil, nil, true
	s.mu.Unlock()
	if t != nil {
		t.Close()
	}
}

// fatal reports errors a retry cannot mend: the server refused the call
// itself.
func fatal(err error) bool {
	var ae *sunrpc.AcceptError
	var au *sunrpc.AuthError
	var rm *sunrpc.RPCMismatchError
	var he *sunrpc.HeaderError
	var nr *sunrpc.NotRegisteredError
	return errors.As(err, &ae) || errors.As(err, &au) || errors.As(err, &rm) || errors.As(err, &he) ||
		errors.As(err, &nr) || errors.Is(err, sunrpc.ErrClosed)
}

// call sends proc with args and decodes the results with dec, trying again
// (on a new connection) until ctx ends.
func (s *service) call(ctx context.Context, proc uint32, args []byte, maxResults int, dec func(*sunrpc.Decoder)) error {
	pause := 100 * time.Millisecond
	for {
		rpc, t, err := s.client(ctx)
		if err == nil {
			tctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
			var res *sunrpc.Result
			res, err = rpc.Call(tctx, proc, &sunrpc.Args{Head: args, MaxResults: maxResults})
			cancel()
			if err == nil {
				dec(res.Decoder)
				err = res.Err()
				res.Release()
				if err != nil {
					return fmt.Errorf("nlm: malformed reply of %s procedure %d: %w", s.name, proc, err)
				}
				return nil
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, sunrpc.ErrClosed) && s.isClosed() {
				return err
			}
			if fatal(err) {
				return err
			}
			s.reset(t)
		} else if fatal(err) {
			return err // closed, or the server runs no lock manager
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.cfg.Logger.Warn("lock manager call failed, trying again", "service", s.name, "proc", proc, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause = min(pause*2, 5*time.Second)
	}
}

// ping sends one NULL call, without trying again; when it gets no answer
// the connection is dropped, so that the next call looks the port up again.
func (s *service) ping(ctx context.Context) error {
	rpc, t, err := s.client(ctx)
	if err != nil {
		return err
	}
	res, err := rpc.Call(ctx, ProcNull, &sunrpc.Args{})
	if err != nil {
		if !s.isClosed() {
			s.reset(t)
		}
		return err
	}
	res.Release()
	return nil
}

func (s *service) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Client makes NLM version 4 calls to the server's lock manager and NSM
// calls to its status monitor. It is safe for concurrent use.
type Client struct {
	cfg Config
	nlm *service
	nsm *service
}

// NewClient returns a client for cfg's server; it connects at the first
// call.
func NewClient(cfg Config) (*Client, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg}
	c.nlm = newService(&c.cfg, "lockd (NLM v4)", Program, Version, cfg.NLMPort)
	c.nsm = newService(&c.cfg, "statd (NSM v1)", NSMProgram, NSMVersion, cfg.NSMPort)
	return c, nil
}

// CallerName returns the caller_name the client's locks carry.
func (c *Client) CallerName() string { return c.cfg.CallerName }

// Close closes the connections; calls in progress fail.
func (c *Client) Close() error {
	c.nlm.close()
	c.nsm.close()
	return nil
}

// Epoch changes whenever the connection to the server's lockd was lost or
// made again.
func (c *Client) Epoch() uint64 { return c.nlm.Epoch() }

// Null calls NLM's NULL procedure.
func (c *Client) Null(ctx context.Context) error {
	return c.nlm.call(ctx, ProcNull, nil, 0, func(*sunrpc.Decoder) {})
}

// Test asks whether a lock could be granted (NLM4_TEST).
func (c *Client) Test(ctx context.Context, a *TestArgs) (TestRes, error) {
	var r TestRes
	err := c.nlm.call(ctx, ProcTest, AppendTestArgs(nil, a), 4+MaxNetObj+4+maxHolderLen, func(d *sunrpc.Decoder) {
		r = DecodeTestRes(d)
	})
	return r, err
}

func (c *Client) res(ctx context.Context, proc uint32, args []byte) (Res, error) {
	var r Res
	err := c.nlm.call(ctx, proc, args, 4+MaxNetObj+4, func(d *sunrpc.Decoder) { r = DecodeRes(d) })
	return r, err
}

// Lock asks for a lock (NLM4_LOCK).
func (c *Client) Lock(ctx context.Context, a *LockArgs) (Res, error) {
	return c.res(ctx, ProcLock, AppendLockArgs(nil, a))
}

// Cancel withdraws a blocked LOCK (NLM4_CANCEL).
func (c *Client) Cancel(ctx context.Context, a *CancelArgs) (Res, error) {
	return c.res(ctx, ProcCancel, AppendCancelArgs(nil, a))
}

// Unlock releases a range (NLM4_UNLOCK).
func (c *Client) Unlock(ctx context.Context, a *UnlockArgs) (Res, error) {
	return c.res(ctx, ProcUnlock, AppendUnlockArgs(nil, a))
}

// ServerState returns the server's NSM state number (SM_STAT to its
// statd): it changes when the server reboots.
func (c *Client) ServerState(ctx context.Context) (int32, error) {
	var st int32
	err := c.nsm.call(ctx, NSMProcStat, sunrpc.AppendString(nil, c.cfg.CallerName), 8, func(d *sunrpc.Decoder) {
		d.Uint32() // res_stat: statd answers STAT_FAIL for a name it would not monitor, the state all the same
		st = d.Int32()
	})
	return st, err
}

// ServerStateOnce is ServerState with one try, for periodic checks.
func (c *Client) ServerStateOnce(ctx context.Context) (int32, error) {
	rpc, t, err := c.nsm.client(ctx)
	if err != nil {
		return 0, err
	}
	res, err := rpc.Call(ctx, NSMProcStat, &sunrpc.Args{Head: sunrpc.AppendString(nil, c.cfg.CallerName), MaxResults: 8})
	if err != nil {
		c.nsm.reset(t)
		return 0, err
	}
	defer res.Release()
	res.Uint32()
	st := res.Int32()
	return st, res.Err()
}
