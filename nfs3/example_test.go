package nfs3_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"os"
	"strconv"
	"syscall"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/nfs3/gonfstest"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// exampleServer starts an in-memory NFSv3 server (go-nfs) on 127.0.0.1 and
// returns its host and port (MOUNT and NFS share the port) and its stop.
func exampleServer() (string, int, func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	mem := gonfstest.NewMemFS()
	if err := mem.MkdirAll("/docs", 0o755); err != nil {
		log.Fatal(err)
	}
	stop := gonfstest.Serve(ln, mem)
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	p, _ := strconv.Atoi(port)
	return host, p, stop
}

// Mount an export and use it through paths, as with go-nfs-client.
func Example() {
	host, port, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	// Against knfsd: nfs3.MountTCP(ctx, "server:/export", nil) finds the
	// ports with the port mapper and sends AUTH_SYS (nfsrdma.Mount: the
	// same over RDMA).
	target, err := nfs3.Mount(ctx, host, "/", &nfs3.MountOptions{
		MountPort: port, NFSPort: port, Cred: &sunrpc.AuthNone,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer target.Unmount(ctx)

	f, err := target.OpenFileContext(ctx, "docs/hello.txt", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := io.WriteString(f, "hello, world\n"); err != nil {
		log.Fatal(err)
	}
	if err := f.Close(); err != nil { // commits the unstable writes
		log.Fatal(err)
	}

	f, err = target.OpenContext(ctx, "docs/hello.txt")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(string(b))

	infos, err := target.ReadDirPlus(ctx, "docs")
	if err != nil {
		log.Fatal(err)
	}
	for _, fi := range infos {
		fmt.Println(fi.Name(), fi.Size(), fi.Mode())
	}
	// Output:
	// hello, world
	// hello.txt 13 -rw-r--r--
}

// Errors are nfs3.Status values that match io/fs and syscall errors.
func ExampleStatus() {
	host, port, stop := exampleServer()
	defer stop()
	ctx := context.Background()
	target, err := nfs3.Mount(ctx, host, "/", &nfs3.MountOptions{MountPort: port, NFSPort: port, Cred: &sunrpc.AuthNone})
	if err != nil {
		log.Fatal(err)
	}
	defer target.Close()

	_, _, err = target.Lookup(ctx, "docs/missing")
	fmt.Println(err)
	fmt.Println(errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOENT), errors.Is(err, nfs3.ErrNoEnt))
	// Output:
	// lookup docs/missing: NFS3ERR_NOENT (no such file or directory)
	// true true true
}

// The handle-based client over any sunrpc.Transport: here TCP; an RDMA
// transport plugs in the same way. ReadAt and WriteAt pipeline READs and
// WRITEs of the negotiated size.
func ExampleClient() {
	host, port, stop := exampleServer()
	defer stop()
	ctx := context.Background()
	addr := net.JoinHostPort(host, strconv.Itoa(port))

	mc, err := nfs3.DialMount(ctx, host, port, sunrpc.AuthNone, nil)
	if err != nil {
		log.Fatal(err)
	}
	root, err := mc.Mnt(ctx, "/")
	mc.Close()
	if err != nil {
		log.Fatal(err)
	}

	tr, err := sunrpc.DialTCP(ctx, addr, nil)
	if err != nil {
		log.Fatal(err)
	}
	c, err := nfs3.NewClient(tr, &nfs3.ClientOptions{Window: 8, Wsize: 64 << 10})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	dir, err := c.Lookup(ctx, root.FH, "docs")
	if err != nil {
		log.Fatal(err)
	}
	cr, err := c.Create(ctx, dir.FH, "data.bin", nfs3.CreateHow{Mode: nfs3.Guarded, Attr: nfs3.SetAttr{Mode: new(uint32(0o666))}})
	if err != nil {
		log.Fatal(err)
	}
	data := make([]byte, 1<<20)
	if _, err := c.WriteAt(ctx, cr.FH, data, 0); err != nil { // UNSTABLE WRITEs + COMMIT
		log.Fatal(err)
	}
	n, err := c.ReadAt(ctx, cr.FH, make([]byte, 2<<20), 0)
	fmt.Println(n, err)
	// Output: 1048576 EOF
}

// Listing a directory page by page with an iterator.
func ExampleClient_DirEntriesPlus() {
	var c *nfs3.Client      // from nfs3.NewClient
	var dir nfs3.FileHandle // from Lookup or MOUNT
	ctx := context.Background()
	if c == nil {
		return
	}
	for e, err := range c.DirEntriesPlus(ctx, dir) {
		if err != nil { // a Status, or *nfs3.CookieLoopError for a broken server
			log.Fatal(err)
		}
		fmt.Println(e.Name, e.Cookie)
	}
}

// A Target is an io/fs file system: walk it, glob it, serve it with http.FS.
func ExampleTarget_fs() {
	host, port, stop := exampleServer()
	defer stop()
	ctx := context.Background()
	target, err := nfs3.Mount(ctx, host, "/", &nfs3.MountOptions{MountPort: port, NFSPort: port, Cred: &sunrpc.AuthNone})
	if err != nil {
		log.Fatal(err)
	}
	defer target.Close()
	for _, p := range []string{"docs/a.txt", "docs/b.md"} {
		f, err := target.OpenFileContext(ctx, p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			log.Fatal(err)
		}
		f.Write([]byte(p))
		f.Close()
	}
	fs.WalkDir(target, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			fmt.Println(p)
		}
		return nil
	})
	b, _ := fs.ReadFile(target, "docs/b.md")
	fmt.Println(string(b))
	// Output:
	// docs/a.txt
	// docs/b.md
	// docs/b.md
}
