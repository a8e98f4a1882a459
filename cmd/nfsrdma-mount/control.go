package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// The control socket: a running mount server listens on a unix socket named
// after its mount point; "nfsrdma-mount stats" and "nfsrdma-mount -u" ask it
// one command a connection ("stats" or "unmount", one line) and read the
// answer until EOF. An unmount answer is "ok" or "error: ...".

// controlDir is where the sockets live: /run/nfsrdma for root, else the
// user's runtime directory.
func controlDir() string {
	if os.Geteuid() == 0 {
		return "/run/nfsrdma"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "nfsrdma")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("nfsrdma-%d", os.Geteuid()))
}

// canonicalDir returns the absolute, clean form of a mount point, which
// names its socket. Symbolic links are not resolved: that would touch a
// mount that may be hung.
func canonicalDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	return filepath.Clean(abs), nil
}

// socketPath returns the control socket of mount point dir.
func socketPath(dir string) (string, error) {
	c, err := canonicalDir(dir)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(c))
	return filepath.Join(controlDir(), hex.EncodeToString(sum[:8])+".sock"), nil
}

// controlServer answers the control socket of one mount.
type controlServer struct {
	ln      net.Listener
	path    string
	stats   func() string
	unmount func() error
	wg      sync.WaitGroup
}

// ErrAlreadyServed reports a mount point another live server answers for.
var ErrAlreadyServed = errors.New("a running nfsrdma-mount already serves this mount point")

// listenControl creates dir's control socket. A socket left by a server that
// died is replaced; one that answers is ErrAlreadyServed.
func listenControl(dir string, stats func() string, unmount func() error) (*controlServer, error) {
	path, err := socketPath(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("control socket directory: %w", err)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("%s: %w", dir, ErrAlreadyServed)
	}
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	s := &controlServer{ln: ln, path: path, stats: stats, unmount: unmount}
	s.wg.Go(s.serve)
	return s, nil
}

func (s *controlServer) serve() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.wg.Go(func() { s.answer(c) })
	}
}

func (s *controlServer) answer(c net.Conn) {
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil && line == "" {
		return
	}
	c.SetReadDeadline(time.Time{})
	switch strings.TrimSpace(line) {
	case "stats":
		io.WriteString(c, s.stats())
	case "unmount":
		if err := s.unmount(); err != nil {
			fmt.Fprintf(c, "error: %v\n", err)
			return
		}
		io.WriteString(c, "ok\n")
	default:
		fmt.Fprintf(c, "error: unknown command %q\n", strings.TrimSpace(line))
	}
}

// Close stops answering and removes the socket.
func (s *controlServer) Close() {
	s.ln.Close()
	os.Remove(s.path)
	s.wg.Wait()
}

// NoServerError reports a mount point no running server answers for.
type NoServerError struct {
	Dir, Socket string
	Err         error
}

func (e *NoServerError) Error() string {
	return fmt.Sprintf("no running nfsrdma-mount serves %s (control socket %s: %v)", e.Dir, e.Socket, e.Err)
}

func (e *NoServerError) Unwrap() error { return e.Err }

// controlRequest sends cmd to dir's server and returns its answer.
func controlRequest(dir, cmd string, timeout time.Duration) (string, error) {
	path, err := socketPath(dir)
	if err != nil {
		return "", err
	}
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		return "", &NoServerError{Dir: dir, Socket: path, Err: err}
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, cmd+"\n"); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return string(b), fmt.Errorf("control socket %s: %w", path, err)
	}
	return string(b), nil
}
