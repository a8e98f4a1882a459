package gonfstest

import (
	"bufio"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-git/go-billy/v5"
	gonfs "github.com/willscott/go-nfs"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// rpcCallTimeout bounds one call through go-nfs: a call go-nfs cannot parse
// makes it stop reading the connection without answering.
const rpcCallTimeout = 30 * time.Second

// maxRecord bounds a reply record from go-nfs.
const maxRecord = 64 << 20

// RPCServer serves NFSv3 and MOUNT v3 for a file system one RPC message at a
// time, for servers that carry RPC over something other than TCP (the
// RPC-over-RDMA server of the simulated fabric). Each call travels to go-nfs
// over an in-memory connection with RPC record marking (RFC 5531 §11);
// connections are pooled so that calls are served concurrently.
type RPCServer struct {
	ln     *pipeListener
	served chan error

	mu     sync.Mutex
	idle   []*pipeConn
	all    map[*pipeConn]struct{}
	closed bool

	closeMu sync.Mutex
	done    bool
}

// NewRPCServer starts go-nfs (Handler) for fsys behind an RPCServer; Close
// stops it.
func NewRPCServer(fsys billy.Filesystem) *RPCServer {
	s := &RPCServer{ln: newPipeListener(), served: make(chan error, 1)}
	h := Handler(fsys)
	go func() { s.served <- gonfs.Serve(s.ln, h) }()
	return s
}

type pipeConn struct {
	c net.Conn
	r *bufio.Reader
}

// ServeRPC answers call, a whole RPC call message, with the whole reply
// message; nil when there is none (a call that does not decode, which
// go-nfs would answer by no longer reading its connection, a call go-nfs
// dropped or did not answer in time, or after Close). It is safe for
// concurrent use.
func (s *RPCServer) ServeRPC(call []byte) []byte {
	if _, err := sunrpc.DecodeCall(sunrpc.NewDecoder(call)); err != nil {
		return nil
	}
	pc := s.get()
	if pc == nil {
		return nil
	}
	rep, err := pc.roundTrip(call)
	if err != nil {
		s.discard(pc)
		return nil
	}
	s.put(pc)
	return rep
}

func (pc *pipeConn) roundTrip(call []byte) ([]byte, error) {
	if err := pc.c.SetDeadline(time.Now().Add(rpcCallTimeout)); err != nil {
		return nil, err
	}
	if err := sunrpc.WriteRecord(pc.c, call); err != nil {
		return nil, err
	}
	return sunrpc.ReadRecord(pc.r, maxRecord)
}

// get returns an idle connection to go-nfs or makes a new one; nil after
// Close.
func (s *RPCServer) get() *pipeConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if n := len(s.idle); n > 0 {
		pc := s.idle[n-1]
		s.idle = s.idle[:n-1]
		return pc
	}
	client, server := net.Pipe()
	if !s.ln.offer(server) {
		client.Close()
		server.Close()
		return nil
	}
	pc := &pipeConn{c: client, r: bufio.NewReader(client)}
	if s.all == nil {
		s.all = make(map[*pipeConn]struct{})
	}
	s.all[pc] = struct{}{}
	return pc
}

func (s *RPCServer) put(pc *pipeConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		pc.c.Close()
		return
	}
	s.idle = append(s.idle, pc)
}

func (s *RPCServer) discard(pc *pipeConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.all, pc)
	pc.c.Close()
}

// Close stops accepting, closes every connection (go-nfs's goroutines for
// them end on EOF) and waits for go-nfs to end. It is idempotent.
func (s *RPCServer) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.done {
		return nil
	}
	s.done = true
	s.mu.Lock()
	s.closed = true
	for pc := range s.all {
		pc.c.Close()
	}
	s.all, s.idle = nil, nil
	s.mu.Unlock()
	s.ln.Close()
	<-s.served
	s.ln.wait(2 * time.Second)
	return nil
}

// pipeListener is a net.Listener whose connections are net.Pipe ends
// offered by the RPCServer.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	open  atomic.Int64 // server ends not yet closed by go-nfs
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// offer hands a server end to Accept; false once closed.
func (l *pipeListener) offer(c net.Conn) bool {
	l.open.Add(1)
	tc := &trackedConn{Conn: c, open: &l.open}
	select {
	case l.conns <- tc:
		return true
	case <-l.done:
		tc.Close()
		return false
	}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

// wait waits, at most d, until go-nfs has closed every server end (it does
// when it reads EOF, then its goroutines for that connection end).
func (l *pipeListener) wait(d time.Duration) {
	for end := time.Now().Add(d); l.open.Load() > 0 && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
}

// trackedConn reports its first Close to the listener.
type trackedConn struct {
	net.Conn
	once sync.Once
	open *atomic.Int64
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.open.Add(-1) })
	return err
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "gonfstest" }
