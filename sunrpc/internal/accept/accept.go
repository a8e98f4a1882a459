// Package accept is the accept loop of the test servers of sunrpc's own
// tests and of sunrpctest (which exports it as sunrpctest.Conns).
package accept

import (
	"net"
	"sync"
)

// Conns is the accept loop of a test server: it serves every connection
// accepted on its listeners on a goroutine of its own, and drops them on
// demand. The zero value is ready to use.
type Conns struct {
	mu     sync.Mutex
	lns    []net.Listener
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// Serve accepts connections on ln until ln or s is closed and runs serve on
// each, on its own goroutine; the connection is closed when serve returns.
func (s *Conns) Serve(ln net.Listener, serve func(net.Conn)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		ln.Close()
		return
	}
	s.lns = append(s.lns, ln)
	s.wg.Add(1)
	go s.accept(ln, serve)
}

func (s *Conns) accept(ln net.Listener, serve func(net.Conn)) {
	defer s.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		if s.conns == nil {
			s.conns = map[net.Conn]struct{}{}
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
			serve(c)
		}()
	}
}

// Drop closes the live connections that match reports (every one for a
// nil match).
func (s *Conns) Drop(match func(net.Conn) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if match == nil || match(c) {
			c.Close()
		}
	}
}

// Close closes the listeners and every connection, and waits for the
// goroutines serving them. It is idempotent.
func (s *Conns) Close() {
	s.mu.Lock()
	s.closed = true
	for _, ln := range s.lns {
		ln.Close()
	}
	s.mu.Unlock()
	s.Drop(nil)
	s.wg.Wait()
}
