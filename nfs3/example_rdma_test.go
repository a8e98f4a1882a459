package nfs3_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/verbs/ibv"
	"github.com/nfsrdma/nfsrdma/xprt"
)

// Mount an export over RPC-over-RDMA and read a file: MOUNT goes over TCP
// (from a reserved port when the process may bind one), the NFS calls over
// RDMA to the server's port 20049. It needs a server and an RDMA device, so
// `go test` compiles it but does not run it; to try it, copy the body into
// a main package, put in your server's address and export, and build it
// with cgo (see the README's Install). Example_rdma runs the same calls on
// the simulated fabric.
func ExampleMount_rdma() {
	ctx := context.Background()
	server := netip.MustParseAddr("10.99.0.1")

	fab, err := ibv.Open() // rdma-core through cgo
	if err != nil {
		log.Fatal(err)
	}
	t, err := xprt.Dial(ctx, xprt.Config{Fabric: fab, Addr: netip.AddrPortFrom(server, 20049)})
	if err != nil {
		log.Fatal(err)
	}
	// The Target owns the transport and closes it at Unmount.
	target, err := nfs3.Mount(ctx, server.String(), "/export", &nfs3.MountOptions{Transport: t})
	if err != nil {
		t.Close()
		log.Fatal(err)
	}
	defer target.Unmount(ctx)

	b, err := target.ReadFileContext(ctx, "/hello.txt")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d bytes\n", len(b))
}
