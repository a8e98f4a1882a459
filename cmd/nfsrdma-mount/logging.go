package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// The server logs through a switchHandler: to its stderr while the mount
// command waits for it (so that what goes wrong reaches the user), then,
// once it runs on its own in the background, to syslog or the file given
// with logfile=; it never holds the caller's terminal or pipe.

// switchHandler forwards each record to the handler currently installed.
type switchHandler struct {
	cur *atomic.Pointer[handlerBox]
	ops []func(slog.Handler) slog.Handler // WithAttrs and WithGroup, in order
}

type handlerBox struct{ h slog.Handler }

func newSwitchHandler(h slog.Handler) *switchHandler {
	s := &switchHandler{cur: new(atomic.Pointer[handlerBox])}
	s.set(h)
	return s
}

// set installs h for this handler and every handler derived from it.
func (s *switchHandler) set(h slog.Handler) { s.cur.Store(&handlerBox{h}) }

func (s *switchHandler) handler() slog.Handler {
	h := s.cur.Load().h
	for _, op := range s.ops {
		h = op(h)
	}
	return h
}

func (s *switchHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return s.cur.Load().h.Enabled(ctx, l)
}

func (s *switchHandler) Handle(ctx context.Context, r slog.Record) error {
	return s.handler().Handle(ctx, r)
}

func (s *switchHandler) with(op func(slog.Handler) slog.Handler) *switchHandler {
	return &switchHandler{cur: s.cur, ops: append(append([]func(slog.Handler) slog.Handler(nil), s.ops...), op)}
}

func (s *switchHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return s.with(func(h slog.Handler) slog.Handler { return h.WithAttrs(as) })
}

func (s *switchHandler) WithGroup(name string) slog.Handler {
	return s.with(func(h slog.Handler) slog.Handler { return h.WithGroup(name) })
}

// backgroundLog returns the handler of a server detached from its caller:
// the file logFile (appended to, and returned: the server's output goes
// there too) when given, else the system log. With neither it returns a
// handler that discards and a warning for the user.
func backgroundLog(logFile string, level slog.Level) (slog.Handler, *logFile, string) {
	if logFile != "" {
		f, err := openLogFile(logFile)
		if err != nil {
			return slog.DiscardHandler, nil, fmt.Sprintf("cannot open the log file: %v; the server's messages are lost", err)
		}
		return slog.NewTextHandler(f, &slog.HandlerOptions{Level: level}), f, ""
	}
	l, err := newSyslogLogger("", "", "nfsrdma-mount", level)
	if err != nil {
		return slog.DiscardHandler, nil, fmt.Sprintf("no system log (nothing answers on /dev/log: %v): the background server's warnings and errors are lost; mount with -o logfile=/PATH to keep them, or -f to stay in the foreground", err)
	}
	return l.Handler(), nil, ""
}

// logFile is the file of logfile=, which its handler writes through:
// reopen (on SIGHUP) opens the path again, so that after logrotate moved
// the file away the log goes on in a new one at the path. Once the server
// detached (output), its standard output and error follow it too.
type logFile struct {
	path   string
	mu     sync.Mutex
	f      *os.File
	output bool // fds 1 and 2 are the file
}

func openLogFile(path string) (*logFile, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, err
	}
	return &logFile{path: path, f: f}, nil
}

// Write writes one record (slog's handlers write each in one Write).
func (l *logFile) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Write(p)
}

// detachOutput points the standard input at /dev/null and the standard
// output and error at the file, now and after each reopen.
func (l *logFile) detachOutput() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.output = true
	return detachOutput(l.f)
}

// reopen opens the path again (creating the file where logrotate moved it
// away) and closes the file written so far. On failure the log goes on
// where it went.
func (l *logFile) reopen() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.output {
		for _, fd := range []int{1, 2} {
			if err := syscall.Dup3(int(f.Fd()), fd, 0); err != nil {
				f.Close()
				return err
			}
		}
	}
	old := l.f
	l.f = f
	return old.Close()
}

// detachOutput points the standard input at /dev/null and the standard
// output and error at out (nil: /dev/null), so that no write reaches (or
// dies on) the caller's terminal or pipe once the caller has gone.
func detachOutput(out *os.File) error {
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer null.Close()
	if out == nil {
		out = null
	}
	if err := syscall.Dup3(int(null.Fd()), 0, 0); err != nil {
		return err
	}
	for _, fd := range []int{1, 2} {
		if err := syscall.Dup3(int(out.Fd()), fd, 0); err != nil {
			return err
		}
	}
	return nil
}
