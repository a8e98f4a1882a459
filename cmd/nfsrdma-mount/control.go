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
// answer until EOF. An unmount answer is "ok" or "error: ...". A server
// started with NFSRDMA_FAULT_INJECT=1 (for tests only, see fault.go) also
// takes "fault ACTION"; any other server answers it as an unknown command.

// controlDir is where this process's server puts its socket: /run/nfsrdma
// for root, else the user's runtime directory ($XDG_RUNTIME_DIR, or
// /run/user/UID), else /tmp/nfsrdma-UID.
func controlDir() string {
	return controlDirs(os.Geteuid())[0]
}

// controlDirs lists where a server of user uid may have put its socket,
// the likeliest first: mount(8) runs a user's helper without
// $XDG_RUNTIME_DIR, the user's shell has it.
func controlDirs(uid int) []string {
	if uid == 0 {
		return []string{"/run/nfsrdma"}
	}
	var ds []string
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" && uid == os.Geteuid() {
		ds = append(ds, filepath.Join(d, "nfsrdma"))
	}
	run := fmt.Sprintf("/run/user/%d", uid)
	if fi, err := os.Stat(run); err == nil && fi.IsDir() {
		ds = append(ds, filepath.Join(run, "nfsrdma"))
	}
	ds = append(ds, filepath.Join(os.TempDir(), fmt.Sprintf("nfsrdma-%d", uid)))
	seen := map[string]bool{}
	out := ds[:0]
	for _, d := range ds {
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

// socketCandidates lists the control sockets that may serve dir: in this
// user's directories, and in those of owner (a mount's user_id, -1 to look
// it up in mountinfo) when this is root.
func socketCandidates(dir string, owner int) []string {
	c, err := canonicalDir(dir)
	if err != nil {
		return nil
	}
	sum := sha256.Sum256([]byte(c))
	name := hex.EncodeToString(sum[:8]) + ".sock"
	uids := []int{os.Geteuid()}
	if os.Geteuid() == 0 {
		if owner < 0 {
			if top := topMount(c); top != nil {
				owner = top.OwnerUID()
			}
		}
		if owner > 0 {
			uids = append(uids, owner)
		}
	}
	var out []string
	for _, uid := range uids {
		for _, d := range controlDirs(uid) {
			out = append(out, filepath.Join(d, name))
		}
	}
	return out
}

func dialControl(path string) (net.Conn, error) {
	return net.DialTimeout("unix", path, 5*time.Second)
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
	stats   func(json bool) string
	unmount func() error
	inject  func(action string) string // "fault ACTION"; nil: not taken
	wg      sync.WaitGroup
}

// ErrAlreadyServed reports a mount point another live server answers for.
var ErrAlreadyServed = errors.New("a running nfsrdma-mount already serves this mount point")

// listenControl creates dir's control socket. A socket left by a server that
// died is replaced; one that answers is ErrAlreadyServed. inject, when not
// nil, answers "fault ACTION" (the test-only fault hook).
func listenControl(dir string, stats func(json bool) string, unmount func() error, inject func(action string) string) (*controlServer, error) {
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
	s := &controlServer{ln: ln, path: path, stats: stats, unmount: unmount, inject: inject}
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
	cmd := strings.TrimSpace(line)
	if action, ok := strings.CutPrefix(cmd, "fault "); ok && s.inject != nil {
		io.WriteString(c, s.inject(strings.TrimSpace(action)))
		return
	}
	switch cmd {
	case "stats":
		io.WriteString(c, s.stats(false))
	case "stats-json":
		io.WriteString(c, s.stats(true))
	case "unmount":
		if err := s.unmount(); err != nil {
			fmt.Fprintf(c, "error: %v\n", err)
			return
		}
		io.WriteString(c, "ok\n")
	default:
		fmt.Fprintf(c, "error: unknown command %q\n", cmd)
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
	reply, _, err := controlRequestOwned(dir, cmd, timeout)
	return reply, err
}

// controlRequestOwned sends cmd to the server of dir, wherever its socket
// is (see socketCandidates), and returns its answer and its socket.
func controlRequestOwned(dir, cmd string, timeout time.Duration) (string, string, error) {
	paths := socketCandidates(dir, -1)
	if len(paths) == 0 {
		return "", "", fmt.Errorf("%s: bad mount point", dir)
	}
	var c net.Conn
	var path string
	var derr error
	for _, p := range paths {
		if c, derr = dialControl(p); derr == nil {
			path = p
			break
		}
	}
	if c == nil {
		return "", "", &NoServerError{Dir: dir, Socket: paths[0], Err: derr}
	}
	reply, err := exchange(c, path, cmd, timeout)
	return reply, path, err
}

func exchange(c net.Conn, path, cmd string, timeout time.Duration) (string, error) {
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
