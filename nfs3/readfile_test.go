package nfs3_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/xprt/xprttest"
)

// procCounter counts the NFS calls a server gets, by procedure.
type procCounter struct{ n [22]atomic.Int64 }

func (c *procCounter) wrap(next xprttest.Handler) xprttest.Handler {
	return xprttest.HandlerFunc(func(call []byte) []byte {
		// The call header: xid, CALL, rpcvers, prog, vers, proc.
		if len(call) >= 24 && binary.BigEndian.Uint32(call[12:]) == nfs3.Program {
			if p := binary.BigEndian.Uint32(call[20:]); p < uint32(len(c.n)) {
				c.n[p].Add(1)
			}
		}
		return next.ServeRPC(call)
	})
}

func (c *procCounter) reset() {
	for i := range c.n {
		c.n[i].Store(0)
	}
}

// TestOpenCreateWalksOnce checks that an open with O_CREATE of a missing
// file walks its path once: the LOOKUP that finds the name missing is
// followed by the CREATE in the directory it was looked up in, with no
// second walk to that directory.
func TestOpenCreateWalksOnce(t *testing.T) {
	var c procCounter
	n := newRDMA(t, rdmaOpts{wrap: c.wrap})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tgt := nfs3.NewTarget(n.c, n.root, 0)
	if err := n.fs.MkdirAll("d1/d2", 0o755); err != nil {
		t.Fatal(err)
	}
	c.reset()
	f, err := tgt.OpenFileContext(ctx, "d1/d2/new", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteContext(ctx, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := f.CloseContext(ctx); err != nil {
		t.Fatal(err)
	}
	if l, cr := c.n[nfs3.ProcLookup].Load(), c.n[nfs3.ProcCreate].Load(); l != 3 || cr != 1 {
		t.Errorf("%d LOOKUPs and %d CREATEs, want 3 and 1", l, cr)
	}
	if b, err := tgt.ReadFileContext(ctx, "d1/d2/new"); err != nil || string(b) != "hello" {
		t.Errorf("read back %q, %v", b, err)
	}
	fi, err := tgt.StatContext(ctx, "d1/d2/new")
	if err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("stat: %v, %v: want mode 0640", fi, err)
	}
	// A missing directory on the way is still an error, with no CREATE.
	c.reset()
	if _, err := tgt.OpenFileContext(ctx, "d1/nodir/new", os.O_WRONLY|os.O_CREATE, 0o640); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("open under a missing directory: %v, want fs.ErrNotExist", err)
	}
	if cr := c.n[nfs3.ProcCreate].Load(); cr != 0 {
		t.Errorf("%d CREATEs under a missing directory", cr)
	}
}

// TestReadFileOneRead checks that ReadFileContext reads a file that fits
// in one READ with one READ: the reply's end of file ends it, with no
// second READ at the end to learn that.
func TestReadFileOneRead(t *testing.T) {
	var c procCounter
	n := newRDMA(t, rdmaOpts{wrap: c.wrap})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tgt := nfs3.NewTarget(n.c, n.root, 0)
	for _, size := range []int{0, 100, 511, 512, 4096, rdmaIO - 1} {
		name := fmt.Sprintf("f%d", size)
		data := bytes.Repeat([]byte{'x'}, size)
		f, err := n.fs.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		f.Write(data)
		f.Close()
		c.reset()
		got, err := tgt.ReadFileContext(ctx, name)
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s: read %d bytes (%v), want the %d written", name, len(got), err, size)
		}
		if r := c.n[nfs3.ProcRead].Load(); r != 1 {
			t.Errorf("%s: %d READs, want 1", name, r)
		}
	}
}

// TestWriteFile checks Target.WriteFile: a new file, an existing one
// truncated, and data larger than one WRITE; a small file costs one
// FILE_SYNC WRITE and no COMMIT.
func TestWriteFile(t *testing.T) {
	var c procCounter
	n := newRDMA(t, rdmaOpts{wrap: c.wrap})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tgt := nfs3.NewTarget(n.c, n.root, 0)
	if err := n.fs.MkdirAll("d1", 0o755); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), (rdmaIO+rdmaIO/2)/16)
	for _, w := range []struct {
		data                  string
		creates, writes, cmts int64
	}{
		{"a longer first content", 1, 1, 0},
		{"short", 0, 1, 0}, // the file exists: truncated (SETATTR), not created
		// Two WRITEs of WriteAt; go-nfs answers every WRITE FILE_SYNC,
		// so there is nothing to COMMIT.
		{string(big), 0, 2, 0},
		{"", 0, 0, 0},
	} {
		c.reset()
		if err := tgt.WriteFile(ctx, "d1/f", []byte(w.data), 0o600); err != nil {
			t.Fatalf("WriteFile of %d bytes: %v", len(w.data), err)
		}
		got := [3]int64{c.n[nfs3.ProcCreate].Load(), c.n[nfs3.ProcWrite].Load(), c.n[nfs3.ProcCommit].Load()}
		if want := [3]int64{w.creates, w.writes, w.cmts}; got != want {
			t.Errorf("WriteFile of %d bytes: CREATE, WRITE, COMMIT %v, want %v", len(w.data), got, want)
		}
		b, err := tgt.ReadFileContext(ctx, "d1/f")
		if err != nil || string(b) != w.data {
			t.Errorf("read back %d bytes (%v), want the %d written", len(b), err, len(w.data))
		}
	}
	fi, err := tgt.StatContext(ctx, "d1/f")
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("stat: %v, %v: want mode 0600", fi, err)
	}
	if err := tgt.WriteFile(ctx, "d1", []byte("x"), 0o600); err == nil {
		t.Errorf("WriteFile of a directory: no error")
	}
	if err := tgt.WriteFile(ctx, "nodir/f", []byte("x"), 0o600); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("WriteFile under a missing directory: %v, want fs.ErrNotExist", err)
	}
}
