package sunrpc

import (
	"context"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// acceptPorts serves a listener that records the remote port of each
// connection it accepts and keeps the connections open until the test ends.
func acceptPorts(t *testing.T) (addr string, ports <-chan int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan int, 16)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			ch <- c.RemoteAddr().(*net.TCPAddr).Port
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String(), ch
}

func recvPort(t *testing.T, ports <-chan int) int {
	t.Helper()
	select {
	case p := <-ports:
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("no connection accepted")
		return 0
	}
}

func privileged() bool { return os.Geteuid() == 0 }

// TestResvPort dials two transports at once with the default options: as root
// both come from reserved ports, different ones; NoResvPort gives an ordinary
// port.
func TestResvPort(t *testing.T) {
	addr, ports := acceptPorts(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			tr, err := DialTCP(ctx, addr, nil)
			errs[i] = err
			if err == nil {
				t.Cleanup(func() { tr.Close() })
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	p1, p2 := recvPort(t, ports), recvPort(t, ports)
	if p1 == p2 {
		t.Errorf("two connections from one port %d", p1)
	}
	for _, p := range []int{p1, p2} {
		if resv := p >= MinResvPort && p <= MaxResvPort; resv != privileged() {
			t.Errorf("source port %d with euid %d", p, os.Geteuid())
		}
	}

	tr, err := DialTCP(ctx, addr, &TCPOptions{NoResvPort: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if p := recvPort(t, ports); p < 1024 {
		t.Errorf("noresvport: source port %d", p)
	}
}

// TestResvPortTaken holds the reserved port a dial would prefer: the dial
// moves on to another reserved port.
func TestResvPortTaken(t *testing.T) {
	if !privileged() {
		t.Fatal("needs root (the unit tests run as root)")
	}
	addr, ports := acceptPorts(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c1, err := DialResvPort(ctx, "tcp", addr, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	p1 := recvPort(t, ports)
	if p1 != localPort(c1) || p1 > MaxResvPort || p1 < MinResvPort {
		t.Fatalf("first dial from port %d (local %d)", p1, localPort(c1))
	}
	// Preferring the port c1 holds to the same server: its 4-tuple is taken.
	c2, err := DialResvPort(ctx, "tcp", addr, p1)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	p2 := recvPort(t, ports)
	if p2 == p1 || p2 > MaxResvPort || p2 < MinResvPort {
		t.Errorf("second dial preferring %d came from %d", p1, p2)
	}
}

// TestResvPortUnprivileged drops the effective uid: the dial falls back to an
// ordinary port without error.
func TestResvPortUnprivileged(t *testing.T) {
	if !privileged() {
		t.Fatal("needs root to drop privileges (the unit tests run as root)")
	}
	addr, ports := acceptPorts(t)
	if err := syscall.Setresuid(-1, 65534, -1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := DialTCP(ctx, addr, nil)
	if rerr := syscall.Setresuid(-1, 0, -1); rerr != nil {
		t.Fatalf("restoring euid 0: %v", rerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if p := recvPort(t, ports); p < 1024 {
		t.Errorf("unprivileged dial from port %d", p)
	}
}
