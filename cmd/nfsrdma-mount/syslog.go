package main

import (
	"bytes"
	"context"
	"log/slog"
	"log/syslog"
	"strings"
	"sync"
)

// The background server has no terminal: its stderr goes nowhere unless -v
// was given. Its warnings and errors (a server that stopped answering, a
// COMMIT that failed at close) go to the system log instead, as the
// kernel's NFS client puts its own in the kernel log.

// newSyslogLogger returns a logger that sends records of level and above to
// syslog (network and addr as log/syslog.Dial takes them: "" and "" for the
// local /dev/log) as the daemon facility, tagged with the program's name.
func newSyslogLogger(network, addr, tag string, level slog.Level) (*slog.Logger, error) {
	w, err := syslog.Dial(network, addr, syslog.LOG_DAEMON|syslog.LOG_WARNING, tag)
	if err != nil {
		return nil, err
	}
	buf := new(bytes.Buffer)
	text := slog.NewTextHandler(buf, &slog.HandlerOptions{Level: level, ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey {
			return slog.Attr{} // syslog stamps its own
		}
		return a
	}})
	return slog.New(&syslogHandler{mu: new(sync.Mutex), buf: buf, h: text, w: w}), nil
}

// syslogHandler formats a record as slog's text handler does and writes it
// at the syslog severity of its level.
type syslogHandler struct {
	mu  *sync.Mutex // guards buf and the writes, shared by derived handlers
	buf *bytes.Buffer
	h   slog.Handler // a text handler writing to buf
	w   *syslog.Writer
}

func (s *syslogHandler) Enabled(ctx context.Context, l slog.Level) bool { return s.h.Enabled(ctx, l) }

func (s *syslogHandler) Handle(ctx context.Context, r slog.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Reset()
	if err := s.h.Handle(ctx, r); err != nil {
		return err
	}
	msg := strings.TrimSuffix(s.buf.String(), "\n")
	switch {
	case r.Level >= slog.LevelError:
		return s.w.Err(msg)
	case r.Level >= slog.LevelWarn:
		return s.w.Warning(msg)
	case r.Level >= slog.LevelInfo:
		return s.w.Info(msg)
	}
	return s.w.Debug(msg)
}

func (s *syslogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *s
	c.h = s.h.WithAttrs(as)
	return &c
}

func (s *syslogHandler) WithGroup(name string) slog.Handler {
	c := *s
	c.h = s.h.WithGroup(name)
	return &c
}
