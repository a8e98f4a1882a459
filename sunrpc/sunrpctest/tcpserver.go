package sunrpctest

import (
	"context"
	"net"
	"sync"
	"testing"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// TCPServer serves a Handler over TCP on 127.0.0.1 with record marking
// (RFC 5531 §11): each call on its own goroutine, replies written whole,
// in the order they are ready. It implements Server.
type TCPServer struct {
	h     *Handler
	ln    net.Listener
	conns Conns
	busy  InFlight
}

// ServeTCP starts a TCPServer for h; it is closed when the test ends.
func ServeTCP(t testing.TB, h *Handler) *TCPServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &TCPServer{h: h, ln: ln}
	s.conns.Serve(ln, s.serve)
	t.Cleanup(s.Close)
	return s
}

// Addr is the address the server listens on.
func (s *TCPServer) Addr() string { return s.ln.Addr().String() }

// serve reads the calls of c and serves each on a goroutine of its own,
// until c fails; it returns once they are all served.
func (s *TCPServer) serve(c net.Conn) {
	var wmu sync.Mutex
	var calls sync.WaitGroup
	defer calls.Wait()
	ServeRecords(c, func(call []byte) []byte {
		s.busy.Begin()
		calls.Go(func() {
			defer s.busy.End()
			rep := s.h.ServeRPC(call)
			if rep == nil {
				return
			}
			wmu.Lock()
			defer wmu.Unlock()
			sunrpc.WriteRecord(c, rep) // a write to a dropped connection fails: the reply is lost, as on a real loss
		})
		return nil
	})
}

// WaitIdle waits until every call the server has read so far has been
// served: its reply written, or dropped.
func (s *TCPServer) WaitIdle(ctx context.Context) error { return s.busy.Wait(ctx) }

// Disconnect drops every live connection.
func (s *TCPServer) Disconnect() { s.conns.Drop(nil) }

// Close stops the server, drops its connections and waits for its
// goroutines (release held calls first: Handler.Close).
func (s *TCPServer) Close() { s.conns.Close() }

// InFlight counts calls being served and lets waiters sleep until none
// is: a test server's WaitIdle. The zero value is ready to use.
type InFlight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0; nil while n == 0
}

// Begin counts a call that starts being served.
func (f *InFlight) Begin() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		f.idle = make(chan struct{})
	}
	f.n++
}

// End counts a call that is done.
func (f *InFlight) End() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n--; f.n == 0 {
		close(f.idle)
		f.idle = nil
	}
}

// Wait returns once no call is being served, or with ctx's error.
func (f *InFlight) Wait(ctx context.Context) error {
	for {
		f.mu.Lock()
		ch := f.idle
		f.mu.Unlock()
		if ch == nil {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
