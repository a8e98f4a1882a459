package nfs3

import (
	"context"
	"io"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/nfsrdma/nfsrdma/nfs3/gonfstest"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// TestMain fails the package's tests if goroutines outlive them (a transport,
// a server or a File's call left running).
func TestMain(m *testing.M) {
	gonfstest.Quiet() // the server's own logging is noise here
	goleak.VerifyTestMain(m)
}

type goNFSServer struct {
	*gonfstest.Server
	host string
	port int
}

// startGoNFS serves an empty in-memory file system with go-nfs (MOUNT and NFS
// on one port) on 127.0.0.1.
func startGoNFS(t testing.TB) *goNFSServer {
	t.Helper()
	s := gonfstest.Start(t)
	return &goNFSServer{Server: s, host: s.Host, port: s.Port}
}

func (s *goNFSServer) mount(t testing.TB, opts *MountOptions) *Target {
	t.Helper()
	var o MountOptions
	if opts != nil {
		o = *opts
	}
	o.MountPort, o.NFSPort = s.port, s.port
	if o.Cred == nil {
		o.Cred = &sunrpc.AuthNone
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tgt, err := Mount(ctx, s.host, "/", &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tgt.Close() })
	return tgt
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestGoNFSSmoke(t *testing.T) {
	s := startGoNFS(t)
	tgt := s.mount(t, nil)
	ctx := testCtx(t)
	if err := tgt.Client().Null(ctx); err != nil {
		t.Fatal(err)
	}
	f, err := tgt.OpenFileContext(ctx, "/hello.txt", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("hello world")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f, err = tgt.OpenContext(ctx, "hello.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(f)
	if err != nil || string(b) != "hello world" {
		t.Fatalf("read %q, %v", b, err)
	}
	f.Close()
}
