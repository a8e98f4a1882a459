package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The background server is this program again, with -f and three pipes
// from the mount command: a readiness pipe (fd 3) on which it reports
// "ready", "bg: <why>" (bg: it goes on trying in the background) or
// "error: <why>"; a lifeline (fd 4) whose end of file tells it the mount
// command went away before the mount was live, so that it gives up; and its
// stderr, which the mount command copies to its own until the report, so
// that the server's messages (fusermount's included) reach the user. Once it
// has reported, the server writes nothing to that pipe: its output goes to
// /dev/null and its log to syslog or logfile=.

// Readiness reports.
const (
	readyLine = "ready"
	bgPrefix  = "bg: "
	errPrefix = "error: "
)

// ErrCancelled is a mount abandoned because the mount command was
// interrupted.
var ErrCancelled = errors.New("mount cancelled")

// daemonize mounts in a background server, in its own session and in "/"
// (so that it holds no directory busy). It returns once the server reports
// the mount live (bg false), or that it tries again in the background (bg
// true), or with the error the server reports. A SIGINT, SIGTERM or SIGHUP
// meanwhile stops the server's attempts.
func daemonize(inv *invocation, stderr io.Writer) (bg bool, err error) {
	exe, err := os.Executable()
	if err != nil {
		return false, err
	}
	dir, err := canonicalDir(inv.dir)
	if err != nil {
		return false, err
	}
	var closers []*os.File
	defer func() {
		for _, f := range closers {
			f.Close()
		}
	}()
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			closers = append(closers, r, w)
		}
		return r, w, err
	}
	readyR, readyW, err := pipe()
	if err != nil {
		return false, err
	}
	lifeR, lifeW, err := pipe()
	if err != nil {
		return false, err
	}
	errR, errW, err := pipe()
	if err != nil {
		return false, err
	}
	args := []string{"-f", "--ready-fd=3", "--lifeline-fd=4"}
	if inv.verbose {
		args = append(args, "-v")
	}
	if inv.sloppy {
		args = append(args, "-s")
	}
	if inv.opts != "" {
		args = append(args, "-o", inv.opts)
	}
	args = append(args, "--", inv.spec, dir)
	cmd := exec.Command(exe, args...)
	cmd.Dir = "/"
	cmd.Stderr = errW
	cmd.ExtraFiles = []*os.File{readyW, lifeR}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}

	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigc)
	if err := cmd.Start(); err != nil {
		return false, fmt.Errorf("starting the server: %w", err)
	}
	// The server holds its ends now.
	readyW.Close()
	lifeR.Close()
	errW.Close()
	_ = lifeW // kept open until this function returns: the lifeline

	out := &gateWriter{w: stderr}
	copied := make(chan struct{})
	go func() {
		io.Copy(out, errR)
		close(copied)
	}()
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(readyR).ReadString('\n')
		lines <- strings.TrimSpace(line)
	}()
	exited := make(chan error, 1)
	var line string
	select {
	case line = <-lines:
	case sig := <-sigc:
		// The user gave up: so does the server (it unmounts if it got
		// there meanwhile).
		cmd.Process.Signal(syscall.SIGTERM)
		go func() { exited <- cmd.Wait() }()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		waitCopied(copied, out)
		return false, fmt.Errorf("%w (%v)", ErrCancelled, sig)
	}
	// The server wrote its report after its last line on stderr.
	waitCopied(copied, out)
	switch {
	case line == readyLine:
		return false, cmd.Process.Release()
	case strings.HasPrefix(line, bgPrefix):
		fmt.Fprintf(stderr, "%s: backgrounding %q: %s\n", filepath.Base(os.Args[0]), inv.spec, strings.TrimPrefix(line, bgPrefix))
		return true, cmd.Process.Release()
	case strings.HasPrefix(line, errPrefix):
		cmd.Wait()
		return false, errors.New(strings.TrimPrefix(line, errPrefix))
	}
	werr := cmd.Wait()
	return false, fmt.Errorf("the server exited before the mount was live (%v)", werr)
}

// waitCopied waits a little for the server's stderr to be copied out, then
// stops copying whatever a straggler might still write.
func waitCopied(copied <-chan struct{}, out *gateWriter) {
	select {
	case <-copied:
	case <-time.After(2 * time.Second):
	}
	out.close()
}

// gateWriter writes to w until closed, then discards.
type gateWriter struct {
	mu     sync.Mutex
	w      io.Writer
	closed bool
}

func (g *gateWriter) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return len(p), nil
	}
	return g.w.Write(p)
}

func (g *gateWriter) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// standardPath is the search path of a helper run without one (mount(8)
// runs helpers with a minimal environment).
const standardPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// lookPath finds an executable in $PATH, then in the standard directories.
func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range filepath.SplitList(standardPath) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found in $PATH nor in %s", name, standardPath)
}

// fusermountPath returns fusermount3, or else fusermount.
func fusermountPath() (string, error) {
	for _, name := range []string{"fusermount3", "fusermount"} {
		if p, err := lookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("neither fusermount3 nor fusermount is installed (in $PATH or " + standardPath + ")")
}

func runCommand(path string, args ...string) (string, error) {
	out, err := exec.Command(path, args...).CombinedOutput()
	return string(out), err
}
