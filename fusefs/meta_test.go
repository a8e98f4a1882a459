package fusefs

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestStatWhileWriting: a stat by the writer before close shows the
// write's new modification time (the kernel client sends its writes
// before a stat's GETATTR), and after close the file's times are the
// server's.
func TestStatWhileWriting(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	real := filepath.Join(srv.Dir, "f")
	check(t, os.WriteFile(real, []byte("0123456789\n"), 0o644))
	fixed := time.Unix(1_000_000_000, 0)
	check(t, os.Chtimes(real, fixed, fixed))
	o := DefaultOptions()
	m := mountGoNFS(t, srv, &o)
	fi, err := os.Lstat(m.path("f"))
	check(t, err)
	if !fi.ModTime().Equal(fixed) {
		t.Fatalf("mtime %v", fi.ModTime())
	}
	f, err := os.OpenFile(m.path("f"), os.O_WRONLY|os.O_APPEND, 0)
	check(t, err)
	_, err = f.Write([]byte("more\n"))
	check(t, err)
	fi, err = os.Lstat(m.path("f"))
	check(t, err)
	if fi.Size() != 16 || fi.ModTime().Equal(fixed) {
		t.Errorf("stat before close: size %d mtime %v, want 16 and a new mtime", fi.Size(), fi.ModTime())
	}
	check(t, f.Close())
	fi, err = os.Lstat(m.path("f"))
	check(t, err)
	sfi, err := os.Lstat(real)
	check(t, err)
	if !fi.ModTime().Equal(sfi.ModTime()) || fi.Size() != sfi.Size() {
		t.Errorf("stat after close: size %d mtime %v; the server's %d %v", fi.Size(), fi.ModTime(), sfi.Size(), sfi.ModTime())
	}
}
