package nfs3_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/xprt/xprttest"
)

// TestReadFileOneRead checks that ReadFileContext reads a file that fits
// in one READ with one READ: the reply's end of file ends it, with no
// second READ at the end to learn that.
func TestReadFileOneRead(t *testing.T) {
	var reads atomic.Int64
	count := func(next xprttest.Handler) xprttest.Handler {
		return xprttest.HandlerFunc(func(call []byte) []byte {
			// The call header: xid, CALL, rpcvers, prog, vers, proc.
			if len(call) >= 24 && binary.BigEndian.Uint32(call[12:]) == nfs3.Program && binary.BigEndian.Uint32(call[20:]) == nfs3.ProcRead {
				reads.Add(1)
			}
			return next.ServeRPC(call)
		})
	}
	n := newRDMA(t, rdmaOpts{wrap: count})
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
		reads.Store(0)
		got, err := tgt.ReadFileContext(ctx, name)
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s: read %d bytes (%v), want the %d written", name, len(got), err, size)
		}
		if r := reads.Load(); r != 1 {
			t.Errorf("%s: %d READs, want 1", name, r)
		}
	}
}
