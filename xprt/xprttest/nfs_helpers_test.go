package xprttest

import (
	"testing"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/memfs"
	gonfs "github.com/willscott/go-nfs"
	"go.uber.org/goleak"

	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
)

func TestMain(m *testing.M) {
	gonfs.Log.SetLevel(gonfs.PanicLevel) // go-nfs's own logging is noise here
	goleak.VerifyTestMain(m)             // and no goroutine outlives the tests
}

// NFSv3 and MOUNT v3 procedure numbers (RFC 1813).
const (
	mountProgram    = 100005
	mountProcMnt    = 1
	nfsProcLookup   = 3
	nfsProcWrite    = 7
	nfsProcReaddirp = 17
)

// env is a fabric, an NFS server on it and a raw client.
type env struct {
	f   *sim.Fabric
	fs  billy.Filesystem
	srv *Server
}

// newEnv starts a fabric and a server (with an NFS handler over a fresh
// memfs unless cfg.Handler is set) and checks for leaks at the end.
func newEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	noLeaks(t)
	f := sim.NewFabric(sim.WithSeed(1))
	t.Cleanup(func() {
		if live := f.Live(); !live.Zero() {
			t.Errorf("resources still live: %+v", live)
		}
		if a := f.Anomalies(); a != (sim.Anomalies{}) {
			t.Errorf("fabric anomalies: %+v", a)
		}
		f.Close()
	})
	e := &env{f: f, fs: memfs.New()}
	if cfg.Handler == nil {
		h, stop, err := NewNFSHandler(e.fs)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := stop(); err != nil {
				t.Error(err)
			}
		})
		cfg.Handler = h
	}
	cfg.Fabric = f
	srv, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	e.srv = srv
	return e
}

func (e *env) dial(t *testing.T, o rawOptions) *rawClient {
	t.Helper()
	return dialRaw(t, e.f, e.srv.Addr(), o)
}

// writeFile puts a file in the served file system.
func (e *env) writeFile(t *testing.T, name string, data []byte) {
	t.Helper()
	f, err := e.fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func (e *env) readFile(t *testing.T, name string) []byte {
	t.Helper()
	f, err := e.fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := e.fs.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, fi.Size())
	if _, err := f.Read(b); err != nil && fi.Size() > 0 {
		t.Fatal(err)
	}
	return b
}

// rpcCall encodes an RPC call header with AUTH_NONE and appends args.
func rpcCall(xid, prog, vers, proc uint32, args ...[]byte) []byte {
	b := sunrpc.AppendCall(nil, &sunrpc.CallHeader{XID: xid, Prog: prog, Vers: vers, Proc: proc,
		Cred: sunrpc.AuthNone, Verf: sunrpc.AuthNone})
	for _, a := range args {
		b = append(b, a...)
	}
	return b
}

func nfsCall(xid, proc uint32, args ...[]byte) []byte {
	return rpcCall(xid, nfsProgram, 3, proc, args...)
}

// decodeAccepted decodes an RPC reply header and fails unless it is an
// accepted, successful reply to xid; it returns the decoder at the results.
func decodeAccepted(t *testing.T, msg []byte, xid uint32) *sunrpc.Decoder {
	t.Helper()
	d := sunrpc.NewDecoder(msg)
	h, err := sunrpc.DecodeReply(d)
	if err != nil {
		t.Fatalf("RPC reply header: %v (%d bytes)", err, len(msg))
	}
	if h.XID != xid {
		t.Fatalf("RPC reply xid %#x, want %#x", h.XID, xid)
	}
	if err := h.Err(); err != nil {
		t.Fatalf("RPC reply: %v", err)
	}
	return d
}

// nfsStatusOK reads an nfsstat3 and fails unless it is NFS3_OK.
func nfsStatusOK(t *testing.T, d *sunrpc.Decoder) {
	t.Helper()
	if st := d.Uint32(); st != 0 || d.Err() != nil {
		t.Fatalf("NFS status %d (%v)", st, d.Err())
	}
}

// skipPostOpAttr skips a post_op_attr.
func skipPostOpAttr(d *sunrpc.Decoder) {
	if d.Bool() {
		d.FixedOpaque(fattr3Len)
	}
}

func opaque(b []byte) []byte { return sunrpc.AppendOpaque(nil, b) }
func str(s string) []byte    { return sunrpc.AppendString(nil, s) }
func u32(v uint32) []byte    { return sunrpc.AppendUint32(nil, v) }
func u64(v uint64) []byte    { return sunrpc.AppendUint64(nil, v) }
func cat(bs ...[]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

// mount returns the root file handle (MOUNT v3 MNT of "/", inline).
func mount(t *testing.T, c *rawClient, xid uint32) []byte {
	t.Helper()
	rep := c.RoundTrip(rawCall{XID: xid, Inline: rpcCall(xid, mountProgram, 3, mountProcMnt, str("/"))})
	d := decodeAccepted(t, rep.Inline, xid)
	if st := d.Uint32(); st != 0 {
		t.Fatalf("MNT status %d", st)
	}
	fh := d.Opaque(64)
	if d.Err() != nil {
		t.Fatal(d.Err())
	}
	return append([]byte(nil), fh...)
}

// lookup returns the handle of name in dir (inline).
func lookup(t *testing.T, c *rawClient, xid uint32, dir []byte, name string) []byte {
	t.Helper()
	rep := c.RoundTrip(rawCall{XID: xid, Inline: nfsCall(xid, nfsProcLookup, opaque(dir), str(name))})
	d := decodeAccepted(t, rep.Inline, xid)
	nfsStatusOK(t, d)
	fh := d.Opaque(64)
	if d.Err() != nil {
		t.Fatal(d.Err())
	}
	return append([]byte(nil), fh...)
}
