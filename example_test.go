package nfsrdma_test

import (
	"context"
	"fmt"
	"io/fs"
	"log"
	"os"

	"github.com/nfsrdma/nfsrdma"
	"github.com/nfsrdma/nfsrdma/nfs3"
)

// Mount an export over RPC-over-RDMA in one call, write a file, read it
// back and list the directory. Mount resolves the host name, asks MOUNT
// over TCP (from a reserved port when the process may bind one) for the
// root handle, and connects to the server's port 20049 over RDMA through
// rdma-core, which it opens; Close releases all of it. It needs a server, an
// RDMA device (Soft-RoCE will do) and a build with cgo, so `go test`
// compiles it but does not run it: copy the body into a main package with
// your server and export to try it. TestMount runs the same calls on the
// simulated fabric, and the integration suite against the Linux server.
func ExampleMount() {
	ctx := context.Background()
	target, err := nfsrdma.Mount(ctx, "server.example:/export", &nfsrdma.Options{
		MountOptions: nfs3.MountOptions{NConnect: 2}, // two RDMA connections, as nfs(5)'s nconnect=2
	})
	if err != nil {
		log.Fatal(err)
	}
	defer target.Close()

	f, err := target.OpenFileContext(ctx, "hello.txt", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := f.WriteContext(ctx, []byte("hello over RDMA\n")); err != nil {
		log.Fatal(err)
	}
	if err := f.CloseContext(ctx); err != nil { // commits the write
		log.Fatal(err)
	}
	b, err := target.ReadFileContext(ctx, "hello.txt")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(string(b))
	// The Target is an fs.FS too.
	names, err := fs.Glob(target, "*.txt")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(names)
}
