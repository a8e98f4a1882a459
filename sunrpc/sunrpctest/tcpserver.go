package sunrpctest

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// maxRecord bounds a call record the TCP server reads.
const maxRecord = 64 << 20

// TCPServer serves a Handler over TCP on 127.0.0.1 with record marking
// (RFC 5531 §11): each call on its own goroutine, replies written whole,
// in the order they are ready. It implements Server.
type TCPServer struct {
	h    *Handler
	ln   net.Listener
	wg   sync.WaitGroup
	busy InFlight

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// ServeTCP starts a TCPServer for h; it is closed when the test ends.
func ServeTCP(t testing.TB, h *Handler) *TCPServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &TCPServer{h: h, ln: ln, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(s.Close)
	return s
}

// Addr is the address the server listens on.
func (s *TCPServer) Addr() string { return s.ln.Addr().String() }

func (s *TCPServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

func (s *TCPServer) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	var wmu sync.Mutex
	var calls sync.WaitGroup
	defer calls.Wait()
	br := bufio.NewReader(c)
	for {
		rec, err := readRecord(br)
		if err != nil {
			return
		}
		s.busy.Begin()
		calls.Add(1)
		go func() {
			defer calls.Done()
			defer s.busy.End()
			rep := s.h.ServeRPC(rec)
			if rep == nil {
				return
			}
			out := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(rep)), uint32(len(rep))|1<<31)
			wmu.Lock()
			defer wmu.Unlock()
			c.Write(append(out, rep...)) // a write to a dropped connection fails: the reply is lost, as on a real loss
		}()
	}
}

func readRecord(r io.Reader) ([]byte, error) {
	var rec []byte
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return nil, err
		}
		m := binary.BigEndian.Uint32(hdr[:])
		n := int(m &^ (1 << 31))
		if len(rec)+n > maxRecord {
			return nil, errors.New("sunrpctest: record too large")
		}
		start := len(rec)
		rec = append(rec, make([]byte, n)...)
		if _, err := io.ReadFull(r, rec[start:]); err != nil {
			return nil, err
		}
		if m&(1<<31) != 0 {
			return rec, nil
		}
	}
}

// WaitIdle waits until every call the server has read so far has been
// served: its reply written, or dropped.
func (s *TCPServer) WaitIdle(ctx context.Context) error { return s.busy.Wait(ctx) }

// Disconnect drops every live connection.
func (s *TCPServer) Disconnect() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.Close()
	}
}

// Close stops the server, drops its connections and waits for its
// goroutines (release held calls first: Handler.Close).
func (s *TCPServer) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.ln.Close()
	s.Disconnect()
	s.wg.Wait()
}

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
