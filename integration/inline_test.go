//go:build integration

package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
)

// knfsdInline is knfsd's inline size (RFC 8797), read by each new
// connection.
const knfsdInline = "/proc/sys/sunrpc/svc_rdma/max_req_size"

// TestMountInline: with the inline size raised on both sides (knfsd's
// max_req_size and the mount's inline=), the connection negotiates it, a
// 4 KiB direct READ or WRITE travels inline with no chunk to register, and
// files whose sizes straddle the old and the new inline size are right at
// the server and read back right.
func TestMountInline(t *testing.T) {
	old, err := os.ReadFile(knfsdInline)
	if err != nil {
		t.Fatalf("knfsd's inline size: %v", err)
	}
	if err := os.WriteFile(knfsdInline, []byte("16384"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.WriteFile(knfsdInline, old, 0o644) })
	bin := mountBinary(t)
	dir := mountNFSRDMA(t, bin, "inline=16384")
	xprtLine := regexp.MustCompile(`nfsrdma-xprt:\s+rdma .*`)
	counters := func() map[string]int {
		t.Helper()
		code, out := runCmd(t, bin, "stats", dir)
		line := xprtLine.FindString(out)
		if code != 0 || line == "" {
			t.Fatalf("stats: exit %d, no rdma transport line:\n%s", code, out)
		}
		c := map[string]int{}
		for _, m := range regexp.MustCompile(`\b([a-z_]+) (\d+)\b`).FindAllStringSubmatch(line, -1) {
			c[m[1]], _ = strconv.Atoi(m[2])
		}
		return c
	}
	c0 := counters()
	if c0["inline_send"] != 16384 || c0["inline_recv"] != 16384 {
		t.Fatalf("negotiated inline sizes send %d recv %d, want 16384 both", c0["inline_send"], c0["inline_recv"])
	}

	// 4 KiB direct writes and reads: inline both ways.
	name := fmt.Sprintf("inline-%d", os.Getpid())
	path := filepath.Join(dir, name)
	t.Cleanup(func() { os.Remove(filepath.Join(exportDir, name)) })
	buf, err := syscall.Mmap(-1, 0, 64<<10, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(buf)
	want := make([]byte, 64<<10)
	for i := range want {
		want[i] = byte(i*7 + i>>12)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|syscall.O_DIRECT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const blocks = 16
	for i := range blocks {
		copy(buf[:4096], want[i*4096:])
		if _, err := f.WriteAt(buf[:4096], int64(i)*4096); err != nil {
			t.Fatal(err)
		}
	}
	for k := range blocks {
		// Out of order (stride 5), so that no read follows the one before
		// it and none is taken for a sequential stream to read ahead of.
		i := k * 5 % blocks
		clear(buf[:4096])
		if _, err := f.ReadAt(buf[:4096], int64(i)*4096); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf[:4096], want[i*4096:(i+1)*4096]) {
			t.Fatalf("4 KiB direct read %d differs", i)
		}
	}
	c1 := counters()
	for _, k := range []string{"read_chunks", "write_chunks", "reply_chunks"} {
		if d := c1[k] - c0[k]; d != 0 {
			t.Errorf("%d 4 KiB direct WRITEs and READs used %d %s; want none (inline)", blocks, d, k)
		}
	}
	// 64 KiB ones are past the inline size: chunks again.
	copy(buf, want)
	if _, err := f.WriteAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	clear(buf)
	if _, err := f.ReadAt(buf, 0); err != nil || !bytes.Equal(buf, want) {
		t.Fatalf("64 KiB direct read back: %v, equal %v", err, bytes.Equal(buf, want))
	}
	c2 := counters()
	if c2["read_chunks"] == c1["read_chunks"] || c2["write_chunks"] == c1["write_chunks"] {
		t.Errorf("a 64 KiB WRITE and READ: read_chunks %d->%d, write_chunks %d->%d; want both to grow",
			c1["read_chunks"], c2["read_chunks"], c1["write_chunks"], c2["write_chunks"])
	}
	if got, err := os.ReadFile(filepath.Join(exportDir, name)); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the server's copy: %d bytes, %v", len(got), err)
	}

	// Sizes around both inline sizes, written through the mount and
	// checked at the server, then written at the server and read through
	// the mount (new names: nothing cached).
	for _, size := range []int{4000, 4096, 4097, 12000, 16200, 16384, 16385, 20000} {
		data := want[:size]
		for _, way := range []struct{ tag, from, to, what string }{
			{"w", dir, exportDir, "written through the mount, at the server"},
			{"r", exportDir, dir, "written at the server, read through the mount"},
		} {
			n := fmt.Sprintf("%s-%s%d", name, way.tag, size)
			t.Cleanup(func() { os.Remove(filepath.Join(exportDir, n)) })
			if err := os.WriteFile(filepath.Join(way.from, n), data, 0o644); err != nil {
				t.Fatal(err)
			}
			if got, err := os.ReadFile(filepath.Join(way.to, n)); err != nil || !bytes.Equal(got, data) {
				t.Errorf("%d bytes %s: got %d, %v", size, way.what, len(got), err)
			}
		}
	}
}
