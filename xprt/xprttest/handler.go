package xprttest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-git/go-billy/v5"
	gonfs "github.com/willscott/go-nfs"
	"github.com/willscott/go-nfs/helpers"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// Handler answers RPC calls. call is the whole RPC call message (RFC 5531
// §9), Read chunks already pulled and spliced in at their XDR positions;
// the result is the whole RPC reply message, or nil to send no reply. It is
// called concurrently, on many calls at once.
type Handler interface {
	ServeRPC(call []byte) (reply []byte)
}

// HandlerFunc is a function as a Handler.
type HandlerFunc func(call []byte) []byte

// ServeRPC calls f.
func (f HandlerFunc) ServeRPC(call []byte) []byte { return f(call) }

// NullHandler answers every well-formed call with an accepted, successful
// reply with no results (what the NULL procedure returns, RFC 5531 §12.1)
// and drops anything else.
func NullHandler() Handler {
	return HandlerFunc(func(call []byte) []byte {
		h, err := sunrpc.DecodeCall(sunrpc.NewDecoder(call))
		if err != nil {
			return nil
		}
		return sunrpc.AppendReply(nil, &sunrpc.ReplyHeader{XID: h.XID, Stat: sunrpc.MsgAccepted,
			Verf: sunrpc.AuthNone, Accept: sunrpc.Success})
	})
}

// nfsCallTimeout bounds one call through go-nfs: a call go-nfs cannot parse
// makes it stop reading the connection without answering.
const nfsCallTimeout = 30 * time.Second

// maxRecord bounds a reply record from go-nfs.
const maxRecord = 64 << 20

// NewNFSHandler serves NFSv3 and MOUNT v3 for fs with
// github.com/willscott/go-nfs (null authentication, handles cached by
// helpers.NewCachingHandler). Each call travels to go-nfs over an in-memory
// connection with RPC record marking (RFC 5531 §11); connections are pooled
// so that calls are served concurrently. The returned function stops
// go-nfs and waits for its goroutines; it is idempotent.
//
// go-nfs logs through its package-level logger (gonfs.Log): quiet it in
// TestMain if its noise bothers.
func NewNFSHandler(fs billy.Filesystem) (Handler, func() error, error) {
	if fs == nil {
		return nil, nil, errors.New("xprttest: NewNFSHandler: nil file system")
	}
	h := &nfsHandler{ln: newPipeListener(), served: make(chan error, 1)}
	nh := helpers.NewCachingHandler(helpers.NewNullAuthHandler(fs), 1<<16)
	go func() { h.served <- gonfs.Serve(h.ln, nh) }()
	return h, h.close, nil
}

type nfsHandler struct {
	ln     *pipeListener
	served chan error

	mu      sync.Mutex
	idle    []*pipeConn
	all     map[*pipeConn]struct{}
	closed  bool
	closeMu sync.Mutex
	done    bool
}

type pipeConn struct {
	c net.Conn
	r *bufio.Reader
}

func (h *nfsHandler) ServeRPC(call []byte) []byte {
	if _, err := sunrpc.DecodeCall(sunrpc.NewDecoder(call)); err != nil {
		return nil // go-nfs would stop reading the connection
	}
	pc := h.get()
	if pc == nil {
		return nil
	}
	rep, err := pc.roundTrip(call)
	if err != nil {
		h.discard(pc)
		return nil
	}
	h.put(pc)
	return rep
}

func (pc *pipeConn) roundTrip(call []byte) ([]byte, error) {
	if err := pc.c.SetDeadline(time.Now().Add(nfsCallTimeout)); err != nil {
		return nil, err
	}
	rec := make([]byte, 4, 4+len(call))
	binary.BigEndian.PutUint32(rec, uint32(len(call))|1<<31)
	if _, err := pc.c.Write(append(rec, call...)); err != nil {
		return nil, err
	}
	var rep []byte
	for {
		var mark [4]byte
		if _, err := io.ReadFull(pc.r, mark[:]); err != nil {
			return nil, err
		}
		v := binary.BigEndian.Uint32(mark[:])
		n := int(v &^ (1 << 31))
		if len(rep)+n > maxRecord {
			return nil, fmt.Errorf("xprttest: go-nfs reply over %d bytes", maxRecord)
		}
		start := len(rep)
		rep = append(rep, make([]byte, n)...)
		if _, err := io.ReadFull(pc.r, rep[start:]); err != nil {
			return nil, err
		}
		if v&(1<<31) != 0 {
			return rep, nil
		}
	}
}

// get returns an idle connection to go-nfs or makes a new one; nil after
// close.
func (h *nfsHandler) get() *pipeConn {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	if n := len(h.idle); n > 0 {
		pc := h.idle[n-1]
		h.idle = h.idle[:n-1]
		return pc
	}
	client, server := net.Pipe()
	if !h.ln.offer(server) {
		client.Close()
		server.Close()
		return nil
	}
	pc := &pipeConn{c: client, r: bufio.NewReader(client)}
	if h.all == nil {
		h.all = make(map[*pipeConn]struct{})
	}
	h.all[pc] = struct{}{}
	return pc
}

func (h *nfsHandler) put(pc *pipeConn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		pc.c.Close()
		return
	}
	h.idle = append(h.idle, pc)
}

func (h *nfsHandler) discard(pc *pipeConn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.all, pc)
	pc.c.Close()
}

// close stops accepting, closes every connection (go-nfs's goroutines for
// them end on EOF) and waits for go-nfs's Serve to return.
func (h *nfsHandler) close() error {
	h.closeMu.Lock()
	defer h.closeMu.Unlock()
	if h.done {
		return nil
	}
	h.done = true
	h.mu.Lock()
	h.closed = true
	for pc := range h.all {
		pc.c.Close()
	}
	h.all, h.idle = nil, nil
	h.mu.Unlock()
	h.ln.Close()
	<-h.served
	h.ln.wait(2 * time.Second)
	return nil
}

// pipeListener is a net.Listener whose connections are net.Pipe ends
// offered by the handler.
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
func (pipeAddr) String() string  { return "xprttest" }
