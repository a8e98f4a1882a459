package fusefs

import (
	"bytes"
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenFileRemoved plays the Connectathon special tests op_unlk and
// op_ren: 100 bytes written through a descriptor, the file unlinked (or
// another file renamed over it) before or after the write, then fstat and
// a read from the start through the same descriptor. The file lives on
// under its .nfs name: fstat shows 100 bytes and the read returns them,
// from the kernel's cached pages or (dropped) from the server, as on the
// Linux client.
func TestOpenFileRemoved(t *testing.T) {
	for _, tc := range []struct {
		name        string
		rename      bool // rename another file over it, else unlink it
		writeBefore bool // write before the removal, else after
		drop        bool // drop the kernel's cached pages before reading
	}{
		{"op_unlk", false, false, false},
		{"op_unlk/drop", false, false, true},
		{"unlink-after-write", false, true, false},
		{"unlink-after-write/drop", false, true, true},
		{"op_ren", true, false, false},
		{"op_ren/drop", true, false, true},
		{"rename-after-write", true, true, false},
		{"rename-after-write/drop", true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startGoNFS(t, backendDisk)
			m := mountGoNFS(t, srv, nil)
			target := m.path("target")
			f, err := os.Create(target)
			check(t, err)
			check(t, f.Close())
			if tc.rename {
				check(t, os.WriteFile(m.path("other"), []byte("the other file"), 0o644))
			}
			f, err = os.OpenFile(target, os.O_RDWR, 0)
			check(t, err)
			defer f.Close()
			data := bytes.Repeat([]byte("0123456789"), 10)
			write := func() {
				if n, err := f.Write(data); n != len(data) || err != nil {
					t.Fatalf("write: %d, %v", n, err)
				}
			}
			if tc.writeBefore {
				write()
			}
			if tc.rename {
				check(t, os.Rename(m.path("other"), target))
			} else {
				check(t, os.Remove(target))
			}
			if !tc.writeBefore {
				write()
			}
			var st syscall.Stat_t
			check(t, syscall.Fstat(int(f.Fd()), &st))
			if st.Size != int64(len(data)) {
				t.Errorf("fstat after the removal: size %d, want %d", st.Size, len(data))
			}
			if tc.drop {
				check(t, unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED))
			}
			buf := make([]byte, 2*len(data))
			n, err := f.ReadAt(buf, 0)
			if !bytes.Equal(buf[:n], data) {
				t.Errorf("read back: %d bytes %q, %v; want the %d written", n, buf[:n], err, len(data))
			}
			check(t, syscall.Fstat(int(f.Fd()), &st))
			if st.Size != int64(len(data)) || st.Nlink != 0 {
				t.Errorf("fstat after the read: size %d nlink %d, want %d and 0", st.Size, st.Nlink, len(data))
			}
			if tc.rename {
				got, err := os.ReadFile(target)
				if string(got) != "the other file" {
					t.Errorf("the file renamed over it: %q, %v", got, err)
				}
			}
		})
	}
}
