package main

import (
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The background server's warnings reach syslog with the daemon facility
// and the warning or error severity; what is below the level does not.
func TestSyslogLogger(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	log, err := newSyslogLogger("unixgram", path, "nfsrdma-mount", slog.LevelWarn)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("not sent")
	log.With("dir", "/mnt").Warn("server not reachable, trying again", "try", 2)
	log.Error("commit at last close failed")
	var got []string
	buf := make([]byte, 4096)
	for range 2 {
		l.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := l.Read(buf)
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		got = append(got, string(buf[:n]))
	}
	// <facility*8 + severity>: daemon (3), warning (4) and error (3).
	if !strings.HasPrefix(got[0], "<28>") || !strings.Contains(got[0], "nfsrdma-mount") ||
		!strings.Contains(got[0], `msg="server not reachable, trying again" dir=/mnt try=2`) || strings.Contains(got[0], "time=") {
		t.Errorf("warning sent as %q", got[0])
	}
	if !strings.HasPrefix(got[1], "<27>") || !strings.Contains(got[1], "level=ERROR") {
		t.Errorf("error sent as %q", got[1])
	}
	l.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := l.Read(buf); err == nil {
		t.Errorf("an info record was sent: %q", buf[:n])
	}
}
