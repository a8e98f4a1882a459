package xprt

import (
	"context"
	"io"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/memfs"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/rpcrdma"
	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
	"github.com/nfsrdma/nfsrdma/xprt/xprttest"
)

// stack is a client transport and an NFSv3 client talking to an
// xprttest server on the simulated fabric, with go-nfs over memfs behind it.
type stack struct {
	t    testing.TB
	fab  *sim.Fabric
	srv  *xprttest.Server
	fs   billy.Filesystem
	tr   *Transport
	c    *nfs3.Client
	root nfs3.FileHandle

	mu   sync.Mutex
	hdrs []rpcrdma.Header // call headers the server saw (with Observe)
}

type stackOpts struct {
	server  xprttest.Config
	client  Config
	fabric  []sim.Option
	observe bool
	// wrap, when set, decorates the client's fabric (verbs/faulty).
	wrap func(verbs.Fabric) verbs.Fabric
}

func newStack(t testing.TB, o stackOpts) *stack {
	t.Helper()
	s := &stack{t: t, fs: memfs.New()}
	s.fab = sim.NewFabric(append([]sim.Option{sim.PanicOnDoubleInvalidation()}, o.fabric...)...)
	h, stop, err := xprttest.NewNFSHandler(s.fs)
	if err != nil {
		t.Fatal(err)
	}
	scfg := o.server
	scfg.Fabric, scfg.Handler = s.fab, h
	scfg.Addr = netip.MustParseAddrPort("10.0.0.1:20049")
	if o.observe {
		scfg.Observe = func(_ xprttest.CallInfo, h *rpcrdma.Header) {
			c := copyChunks(h)
			s.mu.Lock()
			s.hdrs = append(s.hdrs, c)
			s.mu.Unlock()
		}
	}
	s.srv, err = xprttest.Start(scfg)
	if err != nil {
		t.Fatal(err)
	}
	ccfg := o.client
	ccfg.Fabric, ccfg.Addr = s.fab, s.srv.Addr()
	if o.wrap != nil {
		ccfg.Fabric = o.wrap(s.fab)
	}
	if ccfg.MaxIO == 0 {
		ccfg.MaxIO = 256 << 10
	}
	if ccfg.IOBuffers == 0 {
		ccfg.IOBuffers = 16
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s.tr, err = Dial(ctx, ccfg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := nfs3.NewMountClient(s.tr, sunrpc.AuthNone, nil)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := m.Mnt(ctx, "/")
	if err != nil {
		t.Fatalf("MNT: %v", err)
	}
	s.root = mr.FH
	s.c, err = nfs3.NewClient(s.tr, &nfs3.ClientOptions{Rsize: uint32(ccfg.MaxIO), Wsize: uint32(ccfg.MaxIO)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		t.Logf("client: %s", s.tr.Counters())
		t.Logf("server: %+v", s.srv.Stats())
		s.tr.Close()
		s.srv.Close()
		stop()
		if n := s.fab.DoubleInvalidations(); n != 0 {
			t.Errorf("%d double invalidations", n)
		}
		if a := s.fab.Anomalies(); a != (sim.Anomalies{}) {
			t.Errorf("fabric anomalies: %+v", a)
		}
		if live := s.fab.Live(); !live.Zero() {
			t.Errorf("resources left: %+v", live)
		}
		s.fab.Close()
	})
	return s
}

func (s *stack) ctx(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	s.t.Cleanup(cancel)
	return ctx
}

// file creates name on the server's file system with n pseudo-random bytes
// and returns its handle and content.
func (s *stack) file(name string, n int) (nfs3.FileHandle, []byte) {
	s.t.Helper()
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i*7 + i>>8 + len(name))
	}
	f, err := s.fs.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		s.t.Fatal(err)
	}
	f.Close()
	lr, err := s.c.Lookup(s.ctx(10*time.Second), s.root, name)
	if err != nil {
		s.t.Fatal(err)
	}
	return lr.FH, data
}

// serverContent reads name back from the server's file system.
func (s *stack) serverContent(name string) []byte {
	f, err := s.fs.Open(name)
	if err != nil {
		s.t.Fatal(err)
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	return b
}

// clientQP is the client's simulated QP of the current connection.
func (s *stack) clientQP() *sim.QP {
	qps := s.srv.QPs()
	if len(qps) == 0 {
		s.t.Fatal("no server connection")
	}
	return qps[len(qps)-1].Peer()
}

func (s *stack) headers() []rpcrdma.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]rpcrdma.Header(nil), s.hdrs...)
}
