package nfs3_test

import (
	"context"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/nfs3/gonfstest"
	"github.com/nfsrdma/nfsrdma/nfs3/nfs3test"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// goNFSServer is what go-nfs over MemFS cannot do: it takes names of any
// length, its RMDIR is memfs's Remove, and its LINK reply is malformed.
var goNFSServer = nfs3test.Server{NoNameMax: true, LaxRmdir: true, NoLink: true}

// TestConformanceTCP runs the conformance suite on go-nfs over TCP, mounted
// with nfs3.Mount.
func TestConformanceTCP(t *testing.T) {
	s := gonfstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tgt, err := nfs3.Mount(ctx, s.Host, "/", &nfs3.MountOptions{
		MountPort: s.Port, NFSPort: s.Port, Cred: &sunrpc.AuthNone,
		Client: nfs3.ClientOptions{Rsize: 4096, Wsize: 8192},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tgt.Close() })
	nfs3test.Run(t, ctx, tgt, "/conformance", goNFSServer)
}

// TestConformanceRDMA runs it over RPC-over-RDMA on the simulated fabric.
func TestConformanceRDMA(t *testing.T) {
	n := newRDMA(t, rdmaOpts{client: nfs3.ClientOptions{Rsize: 4096, Wsize: 8192}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tgt := nfs3.NewTarget(n.c, n.root, 0)
	nfs3test.Run(t, ctx, tgt, "/conformance", goNFSServer)
}
