package fusefs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// aclServer answers NFSACL GETACL and SETACL itself, as knfsd does beside
// NFS on the same port (go-nfs has no NFSACL): the directories whose
// handles it was given have a default ACL (of five entries), others none, unless SETACL (or
// setACLs) gave the object ACLs of its own. It records the modes of the
// CREATEs and MKDIRs that pass and the SETACLs, and counts the GETACLs.
// A SETACL is refused with setErr when set, a GETACL with getErr;
// neither reply carries attributes.
type aclServer struct {
	sunrpc.Transport
	mu       sync.Mutex
	defaults [][]byte
	getacls  int
	modes    map[string]uint32 // by name: the mode a CREATE or MKDIR sent
	acls     map[string][2]nfs3.ACL
	setacls  []setACLCall
	setErr   nfs3.Status
	getErr   nfs3.Status
}

// setACLCall is a SETACL's arguments as aclServer decoded them.
type setACLCall struct {
	fh           []byte
	mask         nfs3.ACLMask
	access, dflt nfs3.ACL
}

// setACLs gives the object fh the access and default ACLs.
func (s *aclServer) setACLs(fh nfs3.FileHandle, access, dflt []nfs3.ACLEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.acls == nil {
		s.acls = make(map[string][2]nfs3.ACL)
	}
	s.acls[string(fh)] = [2]nfs3.ACL{
		{Count: uint32(len(access)), Entries: access},
		{Count: uint32(len(dflt)), Entries: dflt},
	}
}

func (s *aclServer) addDefault(fh nfs3.FileHandle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.defaults = append(s.defaults, bytes.Clone(fh))
}

func (s *aclServer) counts() (getacls int, modes map[string]uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]uint32, len(s.modes))
	for k, v := range s.modes {
		m[k] = v
	}
	return s.getacls, m
}

func (s *aclServer) RoundTrip(ctx context.Context, req *sunrpc.Request) (*sunrpc.Reply, error) {
	d := sunrpc.NewDecoder(req.Head)
	h, err := sunrpc.DecodeCall(d)
	if err != nil {
		return s.Transport.RoundTrip(ctx, req)
	}
	switch {
	case h.Prog == nfs3.ACLProgram && h.Proc == nfs3.ACLProcGetacl:
		fh := d.Opaque(nfs3.FHSize)
		mask := nfs3.ACLMask(d.Uint32())
		r := nfs3.GetACLResult{Mask: mask, Access: nfs3.ACL{Count: 4}}
		s.mu.Lock()
		s.getacls++
		for _, dfh := range s.defaults {
			if bytes.Equal(dfh, fh) {
				r.Default = nfs3.ACL{Count: 5, Entries: []nfs3.ACLEntry{
					{Tag: nfs3.TagUserObj, Perm: 7},
					{Tag: nfs3.TagUser, ID: 1000, Perm: 7},
					{Tag: nfs3.TagGroupObj, Perm: 5},
					{Tag: nfs3.TagMask, Perm: 7},
					{Tag: nfs3.TagOther, Perm: 5},
				}}
			}
		}
		if a, ok := s.acls[string(fh)]; ok {
			r.Access, r.Default = a[0], a[1]
		}
		if mask&nfs3.ACLAccess == 0 {
			r.Access.Entries = nil
		}
		if mask&nfs3.ACLDefault == 0 {
			r.Default.Entries = nil
		}
		st := s.getErr
		s.mu.Unlock()
		b := sunrpc.AppendReply(nil, &sunrpc.ReplyHeader{XID: h.XID, Stat: sunrpc.MsgAccepted})
		b = r.Append(sunrpc.AppendUint32(b, uint32(st)), st)
		return sunrpc.NewReply(b, nil, nil), nil
	case h.Prog == nfs3.ACLProgram && h.Proc == nfs3.ACLProcSetacl:
		fh, mask, access, dflt, err := nfs3.DecodeSetACLArgs(d)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		st := s.setErr
		s.setacls = append(s.setacls, setACLCall{fh: bytes.Clone(fh), mask: mask, access: access, dflt: dflt})
		if st == nfs3.StatusOK {
			if s.acls == nil {
				s.acls = make(map[string][2]nfs3.ACL)
			}
			a := s.acls[string(fh)]
			if mask&nfs3.ACLAccess != 0 {
				a[0] = access
			}
			if mask&nfs3.ACLDefault != 0 {
				a[1] = dflt
			}
			s.acls[string(fh)] = a
		}
		s.mu.Unlock()
		b := sunrpc.AppendReply(nil, &sunrpc.ReplyHeader{XID: h.XID, Stat: sunrpc.MsgAccepted})
		b = (&nfs3.SetACLResult{}).Append(sunrpc.AppendUint32(b, uint32(st)), st)
		return sunrpc.NewReply(b, nil, nil), nil
	case h.Prog == nfs3.Program && (h.Proc == nfs3.ProcCreate || h.Proc == nfs3.ProcMkdir):
		d.Opaque(nfs3.FHSize)
		name := d.String(nfs3.MaxNameLen)
		if h.Proc == nfs3.ProcCreate {
			d.Uint32() // createmode3: UNCHECKED or GUARDED, a sattr3 follows
		}
		if d.Bool() { // set_mode3
			mode := d.Uint32()
			if d.Err() == nil {
				s.mu.Lock()
				if s.modes == nil {
					s.modes = make(map[string]uint32)
				}
				s.modes[name] = mode
				s.mu.Unlock()
			}
		}
	}
	return s.Transport.RoundTrip(ctx, req)
}

// withUmask runs f with the process's umask set to mask.
func withUmask(mask int, f func()) {
	old := unix.Umask(mask)
	defer unix.Umask(old)
	f()
}

// TestUmaskAndDefaultACL: the kernel leaves the umask to the mount
// (DONT_MASK), which applies it as the Linux client does: not in a
// directory that has a default ACL (the server's inheritance decides),
// else yes; with noacl always. A directory's answer is asked once and
// kept across the mount's own changes of it.
func TestUmaskAndDefaultACL(t *testing.T) {
	for _, noACL := range []bool{false, true} {
		name := "acl"
		if noACL {
			name = "noacl"
		}
		t.Run(name, func(t *testing.T) {
			srv := startGoNFS(t, backendDisk)
			as := &aclServer{}
			opts := DefaultOptions()
			opts.NoACL = noACL
			m := mountGoNFSVia(t, srv, &opts, func(tr sunrpc.Transport) sunrpc.Transport {
				as.Transport = tr
				return as
			})
			ctx := testCtx(t)
			for _, d := range []string{"inherit", "plain"} {
				if err := os.Mkdir(filepath.Join(srv.Dir, d), 0o777); err != nil {
					t.Fatal(err)
				}
			}
			lr, err := m.fsys.c.Lookup(ctx, m.fsys.root.fh, "inherit")
			if err != nil {
				t.Fatal(err)
			}
			as.addDefault(lr.FH)
			withUmask(0o022, func() {
				for _, d := range []string{"inherit", "plain"} {
					p := d[:1] // names apart: the server records by name
					for _, f := range []string{"f1", "f2"} {
						fd, err := os.OpenFile(m.path(d+"/"+p+f), os.O_CREATE|os.O_WRONLY, 0o666)
						if err != nil {
							t.Fatal(err)
						}
						fd.Close()
					}
					if err := os.Mkdir(m.path(d+"/"+p+"sub"), 0o777); err != nil {
						t.Fatal(err)
					}
					if err := unix.Mknod(m.path(d+"/"+p+"node"), syscall.S_IFREG|0o666, 0); err != nil {
						t.Fatal(err)
					}
				}
			})
			getacls, modes := as.counts()
			inheritFile, inheritDir := uint32(0o666), uint32(0o777)
			wantGetacls := 2 // one per directory, kept across the mount's own creations
			if noACL {
				inheritFile, inheritDir, wantGetacls = 0o644, 0o755, 0
			}
			want := map[string]uint32{
				"if1": inheritFile, "if2": inheritFile, "isub": inheritDir, "inode": inheritFile,
				"pf1": 0o644, "pf2": 0o644, "psub": 0o755, "pnode": 0o644,
			}
			for name, mode := range want {
				if got, ok := modes[name]; !ok || got != mode {
					t.Errorf("%s: sent mode %o (%v), want %o", name, got, ok, mode)
				}
			}
			t.Logf("GETACLs %d, modes %v", getacls, modes)
			if getacls != wantGetacls {
				t.Errorf("%d GETACLs, want %d", getacls, wantGetacls)
			}
		})
	}
}

// TestUmaskWithoutNFSACL: a server without NFSACL (go-nfs answers
// PROC_UNAVAIL) is asked once; from then on the umask applies to every
// new file, as on the Linux client.
func TestUmaskWithoutNFSACL(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	m := mountGoNFS(t, srv, nil)
	withUmask(0o027, func() {
		for _, f := range []string{"a", "b", "c"} {
			fd, err := os.OpenFile(m.path(f), os.O_CREATE|os.O_WRONLY, 0o666)
			if err != nil {
				t.Fatal(err)
			}
			fd.Close()
		}
		if err := os.Mkdir(m.path("d"), 0o777); err != nil {
			t.Fatal(err)
		}
	})
	for name, want := range map[string]os.FileMode{"a": 0o640, "b": 0o640, "c": 0o640, "d": 0o750} {
		fi, err := os.Stat(m.path(name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %o, want %o", name, fi.Mode().Perm(), want)
		}
	}
	var getacls uint64
	for _, s := range m.metered.Stats() {
		if s.Prog == nfs3.ACLProgram {
			getacls += s.Calls
		}
	}
	if getacls != 1 || !m.fsys.noACLProgram.Load() {
		t.Errorf("%d NFSACL calls (the server has none: want 1), noACLProgram %v", getacls, m.fsys.noACLProgram.Load())
	}
}

// TestDefaultACLAskedAgainAfterChange: the directory's one GETACL answer
// (the node's) is kept across the mount's own creations in it and serves
// getfacl too; a directory changed by someone else (its ctime moved, not
// by this mount) is asked again.
func TestDefaultACLAskedAgainAfterChange(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	as := &aclServer{}
	m := mountGoNFSVia(t, srv, nil, func(tr sunrpc.Transport) sunrpc.Transport {
		as.Transport = tr
		return as
	})
	create := func(name string) {
		t.Helper()
		withUmask(0o022, func() {
			fd, err := os.OpenFile(m.path(name), os.O_CREATE|os.O_WRONLY, 0o666)
			if err != nil {
				t.Fatal(err)
			}
			fd.Close()
		})
	}
	create("a")
	create("b")
	if n, _ := as.counts(); n != 1 {
		t.Fatalf("%d GETACLs for two files in one directory, want 1", n)
	}
	for _, name := range []string{xattrACLAccess, xattrACLDefault} {
		if _, err := getxattr(t, m.path("."), name); !errors.Is(err, unix.ENODATA) {
			t.Errorf("getxattr %s of the directory: %v, want ENODATA", name, err)
		}
	}
	if n, _ := as.counts(); n != 1 {
		t.Fatalf("%d GETACLs after getfacl of the directory, want the creations' 1", n)
	}
	// Another client: a name appears on the server, the root's ctime moves.
	if err := os.WriteFile(filepath.Join(srv.Dir, "other"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.fsys.root.getattr(testCtx(t), true); err != nil {
		t.Fatal(err)
	}
	create("c")
	if n, _ := as.counts(); n != 2 {
		t.Fatalf("%d GETACLs after the directory changed, want 2", n)
	}
}

// TestUmaskGETACLErrors: a file system without ACLs (NFS3ERR_NOTSUPP) is
// a directory without a default ACL (the umask applies; the answer is
// kept like any other, and the xattrs give EOPNOTSUPP); any other failure
// of GETACL fails the creation with its error, as on the Linux client.
func TestUmaskGETACLErrors(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	as := &aclServer{getErr: nfs3.ErrNotSupp}
	m := mountGoNFSVia(t, srv, nil, func(tr sunrpc.Transport) sunrpc.Transport {
		as.Transport = tr
		return as
	})
	withUmask(0o022, func() {
		for _, f := range []string{"a", "b"} {
			fd, err := os.OpenFile(m.path(f), os.O_CREATE|os.O_WRONLY, 0o666)
			if err != nil {
				t.Fatal(err)
			}
			fd.Close()
		}
		if n, modes := as.counts(); n != 1 || modes["a"] != 0o644 || modes["b"] != 0o644 {
			t.Errorf("NFS3ERR_NOTSUPP: %d GETACLs (want 1), modes %o %o (want 644)", n, modes["a"], modes["b"])
		}
		if _, err := getxattr(t, m.path("."), xattrACLDefault); !errors.Is(err, unix.EOPNOTSUPP) {
			t.Errorf("getxattr with NFS3ERR_NOTSUPP: %v, want EOPNOTSUPP", err)
		}
		if m.fsys.noACLProgram.Load() {
			t.Error("NFS3ERR_NOTSUPP taken for a server without NFSACL")
		}

		as.mu.Lock()
		as.getErr = nfs3.ErrIO
		as.mu.Unlock()
		if err := os.WriteFile(filepath.Join(srv.Dir, "other"), nil, 0o644); err != nil {
			t.Fatal(err) // another client's change: the answer is stale
		}
		if _, _, err := m.fsys.root.getattr(testCtx(t), true); err != nil {
			t.Fatal(err)
		}
		_, err := os.OpenFile(m.path("c"), os.O_CREATE|os.O_WRONLY, 0o666)
		if !errors.Is(err, unix.EIO) {
			t.Errorf("create with GETACL failing NFS3ERR_IO: %v, want EIO", err)
		}
		if _, err := os.Stat(filepath.Join(srv.Dir, "c")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the failed create reached the server: %v", err)
		}
	})
}
