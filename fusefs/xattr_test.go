package fusefs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// xattrACL builds an ACL's xattr form: entries of type, permissions, id.
func xattrACL(entries ...[3]uint32) []byte {
	b := []byte{2, 0, 0, 0}
	for _, e := range entries {
		b = append(b, byte(e[0]), byte(e[0]>>8), byte(e[1]), byte(e[1]>>8),
			byte(e[2]), byte(e[2]>>8), byte(e[2]>>16), byte(e[2]>>24))
	}
	return b
}

const undef = aclUndefinedID

func getxattr(t *testing.T, path, name string) ([]byte, error) {
	t.Helper()
	buf := make([]byte, 4096)
	n, err := unix.Getxattr(path, name, buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

func listxattr(t *testing.T, path string) string {
	t.Helper()
	buf := make([]byte, 4096)
	n, err := unix.Listxattr(path, buf)
	if err != nil {
		t.Fatalf("listxattr %s: %v", path, err)
	}
	return string(buf[:n])
}

// TestACLXattrs: the two ACL names read the server's ACLs (sorted, the
// wire's minimal mask dropped, a mode-equivalent access ACL absent), one
// GETACL serving stat, listxattr and getxattr until the attributes change;
// setting one sends SETACL as the Linux client does (a directory's both
// ACLs, a minimal ACL with its mask, the object's ids, a removed access ACL
// as the mode's) and drops the answer; other names give EOPNOTSUPP; the
// server's refusal is the caller's error.
func TestACLXattrs(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	as := &aclServer{}
	m := mountGoNFSVia(t, srv, nil, func(tr sunrpc.Transport) sunrpc.Transport {
		as.Transport = tr
		return as
	})
	ctx := testCtx(t)
	if err := os.WriteFile(filepath.Join(srv.Dir, "f"), []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(srv.Dir, "plain"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(srv.Dir, "d"), 0o750); err != nil {
		t.Fatal(err)
	}
	fh := func(name string) nfs3.FileHandle {
		r, err := m.fsys.c.Lookup(ctx, m.fsys.root.fh, name)
		if err != nil {
			t.Fatal(err)
		}
		return r.FH
	}
	ffh, pfh, dfh := fh("f"), fh("plain"), fh("d")
	// As a server may send them: out of order, with ids on the owner's
	// and group's entries.
	as.setACLs(ffh, []nfs3.ACLEntry{
		{Tag: nfs3.TagOther, Perm: 0}, {Tag: nfs3.TagUser, ID: 1003, Perm: 6}, {Tag: nfs3.TagMask, Perm: 6},
		{Tag: nfs3.TagGroupObj, ID: 5, Perm: 4}, {Tag: nfs3.TagUser, ID: 1002, Perm: 4}, {Tag: nfs3.TagUserObj, ID: 7, Perm: 6},
	}, nil)
	// A minimal ACL as the wire has it: four entries, mask = group.
	as.setACLs(pfh, []nfs3.ACLEntry{
		{Tag: nfs3.TagUserObj, Perm: 6}, {Tag: nfs3.TagGroupObj, Perm: 4}, {Tag: nfs3.TagMask, Perm: 4}, {Tag: nfs3.TagOther, Perm: 4},
	}, nil)
	as.setACLs(dfh, nil, []nfs3.ACLEntry{
		{Tag: nfs3.TagUserObj, Perm: 7}, {Tag: nfs3.TagGroupObj, Perm: 5}, {Tag: nfs3.TagOther, Perm: 0},
	})

	wantF := xattrACL([3]uint32{1, 6, undef}, [3]uint32{2, 4, 1002}, [3]uint32{2, 6, 1003},
		[3]uint32{4, 4, undef}, [3]uint32{0x10, 6, undef}, [3]uint32{0x20, 0, undef})
	// ls -l: stat, then the ACL names, several times within the
	// attribute timeout: one GETACL.
	for range 3 {
		if _, err := os.Lstat(m.path("f")); err != nil {
			t.Fatal(err)
		}
		if got := listxattr(t, m.path("f")); got != xattrACLAccess+"\x00" {
			t.Errorf("listxattr f: %q", got)
		}
		got, err := getxattr(t, m.path("f"), xattrACLAccess)
		if err != nil || !bytes.Equal(got, wantF) {
			t.Errorf("getxattr f access: %x (%v), want %x", got, err, wantF)
		}
	}
	if _, err := getxattr(t, m.path("f"), xattrACLDefault); !errors.Is(err, unix.ENODATA) {
		t.Errorf("a file's default ACL: %v, want ENODATA", err)
	}
	if n, _ := as.counts(); n != 1 {
		t.Errorf("%d GETACLs for three listings of one file, want 1", n)
	}
	// The size alone.
	if n, err := unix.Getxattr(m.path("f"), xattrACLAccess, nil); err != nil || n != len(wantF) {
		t.Errorf("getxattr size: %d (%v), want %d", n, err, len(wantF))
	}
	if _, err := unix.Getxattr(m.path("f"), xattrACLAccess, make([]byte, 8)); !errors.Is(err, unix.ERANGE) {
		t.Errorf("getxattr into 8 bytes: %v, want ERANGE", err)
	}

	if got := listxattr(t, m.path("plain")); got != "" {
		t.Errorf("listxattr of a file whose ACL is its mode: %q", got)
	}
	if _, err := getxattr(t, m.path("plain"), xattrACLAccess); !errors.Is(err, unix.ENODATA) {
		t.Errorf("getxattr of a file whose ACL is its mode: %v, want ENODATA", err)
	}
	wantD := xattrACL([3]uint32{1, 7, undef}, [3]uint32{4, 5, undef}, [3]uint32{0x20, 0, undef})
	if got := listxattr(t, m.path("d")); got != xattrACLDefault+"\x00" {
		t.Errorf("listxattr d: %q", got)
	}
	if got, err := getxattr(t, m.path("d"), xattrACLDefault); err != nil || !bytes.Equal(got, wantD) {
		t.Errorf("getxattr d default: %x (%v), want %x", got, err, wantD)
	}

	for _, name := range []string{"user.x", "trusted.x", "security.x"} {
		if _, err := getxattr(t, m.path("f"), name); !errors.Is(err, unix.EOPNOTSUPP) {
			t.Errorf("getxattr %s: %v, want EOPNOTSUPP", name, err)
		}
		if err := unix.Setxattr(m.path("f"), name, []byte("v"), 0); !errors.Is(err, unix.EOPNOTSUPP) {
			t.Errorf("setxattr %s: %v, want EOPNOTSUPP", name, err)
		}
	}

	var st syscall.Stat_t
	if err := syscall.Stat(m.path("d"), &st); err != nil {
		t.Fatal(err)
	}
	uid, gid := st.Uid, st.Gid
	getacls, _ := as.counts()
	// setfacl -m u:1002:r-- on a file: the whole ACL, as is.
	set := xattrACL([3]uint32{1, 6, undef}, [3]uint32{2, 4, 1002}, [3]uint32{4, 4, undef}, [3]uint32{0x10, 4, undef}, [3]uint32{0x20, 0, undef})
	if err := unix.Setxattr(m.path("plain"), xattrACLAccess, set, 0); err != nil {
		t.Fatal(err)
	}
	// setfacl -d -m on the directory: both ACLs go, the access ACL the
	// mode's (the directory has none), with its mask.
	setD := xattrACL([3]uint32{1, 7, undef}, [3]uint32{4, 7, undef}, [3]uint32{0x20, 5, undef})
	if err := unix.Setxattr(m.path("d"), xattrACLDefault, setD, 0); err != nil {
		t.Fatal(err)
	}
	// setfacl -k: the default ACL removed, the access ACL as it is.
	if err := unix.Removexattr(m.path("d"), xattrACLDefault); err != nil {
		t.Fatal(err)
	}
	// setfacl -b on the file: its access ACL removed, sent as the mode's.
	if err := unix.Removexattr(m.path("f"), xattrACLAccess); err != nil {
		t.Fatal(err)
	}
	var fst syscall.Stat_t
	if err := syscall.Stat(m.path("f"), &fst); err != nil {
		t.Fatal(err)
	}
	as.mu.Lock()
	calls := as.setacls
	as.mu.Unlock()
	e := func(tag nfs3.ACLTag, id, perm uint32) nfs3.ACLEntry {
		return nfs3.ACLEntry{Tag: tag, ID: id, Perm: perm}
	}
	modeACL := func(mode uint32) nfs3.ACL {
		return nfs3.ACL{Count: 4, Entries: []nfs3.ACLEntry{
			e(nfs3.TagUserObj, uid, mode>>6&7), e(nfs3.TagGroupObj, gid, mode>>3&7), e(nfs3.TagMask, 0, mode>>3&7), e(nfs3.TagOther, 0, mode&7)}}
	}
	want := []setACLCall{
		{fh: pfh, mask: nfs3.ACLAccess, access: nfs3.ACL{Count: 5, Entries: []nfs3.ACLEntry{
			e(nfs3.TagUserObj, uid, 6), e(nfs3.TagUser, 1002, 4), e(nfs3.TagGroupObj, gid, 4), e(nfs3.TagMask, 0, 4), e(nfs3.TagOther, 0, 0)}}},
		{fh: dfh, mask: nfs3.ACLAccess | nfs3.ACLDefault, access: modeACL(st.Mode & 0o777), dflt: nfs3.ACL{Count: 4, Entries: []nfs3.ACLEntry{
			e(nfs3.TagUserObj, uid, 7), e(nfs3.TagGroupObj, gid, 7), e(nfs3.TagMask, 0, 7), e(nfs3.TagOther, 0, 5)}}},
		{fh: dfh, mask: nfs3.ACLAccess | nfs3.ACLDefault, access: modeACL(st.Mode & 0o777)},
		{fh: ffh, mask: nfs3.ACLAccess, access: modeACL(fst.Mode & 0o777)},
	}
	if len(calls) != len(want) {
		t.Fatalf("%d SETACLs, want %d: %+v", len(calls), len(want), calls)
	}
	for i := range want {
		if !reflect.DeepEqual(calls[i], want[i]) {
			t.Errorf("SETACL %d: %+v\nwant %+v", i, calls[i], want[i])
		}
	}
	// Each set dropped the answer: the next read asks again.
	if got, err := getxattr(t, m.path("plain"), xattrACLAccess); err != nil || !bytes.Equal(got, set) {
		t.Errorf("getxattr after setxattr: %x (%v), want %x", got, err, set)
	}
	if n, _ := as.counts(); n <= getacls {
		t.Errorf("no GETACL after SETACL (%d before, %d after)", getacls, n)
	}

	// The server's refusal (a caller who does not own the file).
	as.mu.Lock()
	as.setErr = nfs3.ErrPerm
	as.mu.Unlock()
	if err := unix.Setxattr(m.path("plain"), xattrACLAccess, set, 0); !errors.Is(err, unix.EPERM) {
		t.Errorf("SETACL refused with NFS3ERR_PERM: %v, want EPERM", err)
	}
	// An invalid ACL is not sent.
	as.mu.Lock()
	as.setErr = nfs3.StatusOK
	n := len(as.setacls)
	as.mu.Unlock()
	bad := xattrACL([3]uint32{1, 6, undef}, [3]uint32{2, 4, 1002}, [3]uint32{4, 4, undef}, [3]uint32{0x20, 0, undef}) // named user, no mask
	if err := unix.Setxattr(m.path("plain"), xattrACLAccess, bad, 0); !errors.Is(err, unix.EINVAL) {
		t.Errorf("setxattr of an ACL without its mask: %v, want EINVAL", err)
	}
	if as.mu.Lock(); len(as.setacls) != n {
		t.Errorf("an invalid ACL was sent")
	}
	as.mu.Unlock()
}

// TestACLXattrsChangedElsewhere: an ACL changed by another client (the
// object's ctime moved) is asked again once the attributes show it.
func TestACLXattrsChangedElsewhere(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	as := &aclServer{}
	m := mountGoNFSVia(t, srv, nil, func(tr sunrpc.Transport) sunrpc.Transport {
		as.Transport = tr
		return as
	})
	ctx := testCtx(t)
	if err := os.WriteFile(filepath.Join(srv.Dir, "f"), nil, 0o640); err != nil {
		t.Fatal(err)
	}
	lr, err := m.fsys.c.Lookup(ctx, m.fsys.root.fh, "f")
	if err != nil {
		t.Fatal(err)
	}
	acl := []nfs3.ACLEntry{{Tag: nfs3.TagUserObj, Perm: 6}, {Tag: nfs3.TagUser, ID: 9, Perm: 4},
		{Tag: nfs3.TagGroupObj, Perm: 4}, {Tag: nfs3.TagMask, Perm: 4}, {Tag: nfs3.TagOther}}
	as.setACLs(lr.FH, acl, nil)
	if got := listxattr(t, m.path("f")); got != xattrACLAccess+"\x00" {
		t.Fatalf("listxattr: %q", got)
	}
	if _, err := getxattr(t, m.path("f"), xattrACLAccess); err != nil {
		t.Fatalf("getxattr: %v", err)
	}
	// Another client: the ACL goes, the ctime moves (go-nfs gives the
	// mtime as the ctime).
	as.setACLs(lr.FH, nil, nil)
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(filepath.Join(srv.Dir, "f"), later, later); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.fsys.root.getattr(ctx, true); err != nil {
		t.Fatal(err)
	}
	child := m.fsys.root.GetChild("f")
	if child == nil {
		t.Fatal("f not known")
	}
	if _, _, err := child.Operations().(*node).getattr(ctx, true); err != nil {
		t.Fatal(err)
	}
	if got := listxattr(t, m.path("f")); got != "" {
		t.Errorf("listxattr after the ACL went elsewhere: %q", got)
	}
	// Nor does the kernel keep the ACL it was given.
	if got, err := getxattr(t, m.path("f"), xattrACLAccess); !errors.Is(err, unix.ENODATA) {
		t.Errorf("getxattr after the ACL went elsewhere: %x (%v), want ENODATA", got, err)
	}
	if n, _ := as.counts(); n != 2 {
		t.Errorf("%d GETACLs, want 2", n)
	}
}

// TestACLXattrsOff: with noacl, or a server without NFSACL, the ACL names
// give EOPNOTSUPP and listxattr lists nothing, as the Linux client's noacl
// mount.
func TestACLXattrsOff(t *testing.T) {
	for _, noACL := range []bool{true, false} {
		name := "noacl"
		if !noACL {
			name = "no NFSACL"
		}
		t.Run(name, func(t *testing.T) {
			srv := startGoNFS(t, backendDisk)
			opts := DefaultOptions()
			opts.NoACL = noACL
			m := mountGoNFS(t, srv, &opts) // go-nfs has no NFSACL
			if err := os.WriteFile(filepath.Join(srv.Dir, "f"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if got := listxattr(t, m.path("f")); got != "" {
				t.Errorf("listxattr: %q", got)
			}
			for _, name := range []string{xattrACLAccess, xattrACLDefault} {
				if _, err := getxattr(t, m.path("f"), name); !errors.Is(err, unix.EOPNOTSUPP) {
					t.Errorf("getxattr %s: %v, want EOPNOTSUPP", name, err)
				}
			}
			set := xattrACL([3]uint32{1, 6, undef}, [3]uint32{4, 4, undef}, [3]uint32{0x20, 4, undef})
			if err := unix.Setxattr(m.path("f"), xattrACLAccess, set, 0); !errors.Is(err, unix.EOPNOTSUPP) {
				t.Errorf("setxattr: %v, want EOPNOTSUPP", err)
			}
			var calls uint64
			for _, s := range m.metered.Stats() {
				if s.Prog == nfs3.ACLProgram {
					calls += s.Calls
				}
			}
			if want := map[bool]uint64{true: 0, false: 1}[noACL]; calls != want {
				t.Errorf("%d NFSACL calls, want %d", calls, want)
			}
		})
	}
}

// TestACLXattrForm: the xattr form's checks (those of the kernel's
// posix_acl_valid) and the conversions from and to the wire.
func TestACLXattrForm(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		want syscall.Errno
	}{
		{"minimal", xattrACL([3]uint32{1, 6, undef}, [3]uint32{4, 4, undef}, [3]uint32{0x20, 4, undef}), 0},
		{"named", xattrACL([3]uint32{1, 6, 0}, [3]uint32{2, 4, 3}, [3]uint32{2, 4, 4}, [3]uint32{4, 4, 0}, [3]uint32{8, 1, 3}, [3]uint32{0x10, 7, 0}, [3]uint32{0x20, 4, 0}), 0},
		{"short", []byte{2, 0, 0}, syscall.EINVAL},
		{"partial entry", xattrACL([3]uint32{1, 6, undef})[:9], syscall.EINVAL},
		{"version 1", append([]byte{1, 0, 0, 0}, xattrACL([3]uint32{1, 6, undef}, [3]uint32{4, 4, undef}, [3]uint32{0x20, 4, undef})[4:]...), syscall.EOPNOTSUPP},
		{"no other", xattrACL([3]uint32{1, 6, undef}, [3]uint32{4, 4, undef}), syscall.EINVAL},
		{"out of order", xattrACL([3]uint32{4, 4, undef}, [3]uint32{1, 6, undef}, [3]uint32{0x20, 4, undef}), syscall.EINVAL},
		{"two owners", xattrACL([3]uint32{1, 6, undef}, [3]uint32{1, 6, undef}, [3]uint32{4, 4, undef}, [3]uint32{0x20, 4, undef}), syscall.EINVAL},
		{"users not ascending", xattrACL([3]uint32{1, 6, 0}, [3]uint32{2, 4, 4}, [3]uint32{2, 4, 3}, [3]uint32{4, 4, 0}, [3]uint32{0x10, 7, 0}, [3]uint32{0x20, 4, 0}), syscall.EINVAL},
		{"named without mask", xattrACL([3]uint32{1, 6, 0}, [3]uint32{2, 4, 3}, [3]uint32{4, 4, 0}, [3]uint32{0x20, 4, 0}), syscall.EINVAL},
		{"bad permissions", xattrACL([3]uint32{1, 8, undef}, [3]uint32{4, 4, undef}, [3]uint32{0x20, 4, undef}), syscall.EINVAL},
		{"unknown type", xattrACL([3]uint32{1, 6, undef}, [3]uint32{0x40, 4, undef}, [3]uint32{4, 4, undef}, [3]uint32{0x20, 4, undef}), syscall.EINVAL},
	} {
		_, errno := parseACLXattr(tc.b)
		if errno != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, errno, tc.want)
		}
	}
	// A minimal ACL gains the group's mask on the wire and loses it back.
	min := []nfs3.ACLEntry{{Tag: nfs3.TagUserObj, Perm: 6}, {Tag: nfs3.TagGroupObj, Perm: 4}, {Tag: nfs3.TagOther, Perm: 0}}
	w := aclToWire(min, 10, 20)
	wantW := []nfs3.ACLEntry{{Tag: nfs3.TagUserObj, ID: 10, Perm: 6}, {Tag: nfs3.TagGroupObj, ID: 20, Perm: 4},
		{Tag: nfs3.TagMask, Perm: 4}, {Tag: nfs3.TagOther}}
	if !reflect.DeepEqual(w, wantW) {
		t.Errorf("to the wire: %+v, want %+v", w, wantW)
	}
	if back, ok := aclFromWire(nfs3.ACL{Count: 4, Entries: w}, false); !ok || len(back) != 3 {
		t.Errorf("a default minimal ACL back from the wire: %+v %v", back, ok)
	}
	if back, ok := aclFromWire(nfs3.ACL{Count: 4, Entries: w}, true); !ok || back != nil {
		t.Errorf("an access ACL equal to the mode: %+v %v, want none", back, ok)
	}
	// A mask that differs from the group's is an ACL of its own.
	w[2].Perm = 0
	if back, ok := aclFromWire(nfs3.ACL{Count: 4, Entries: w}, true); !ok || len(back) != 4 {
		t.Errorf("an access ACL with a mask below the group's: %+v %v", back, ok)
	}
	if _, ok := aclFromWire(nfs3.ACL{Count: 1, Entries: []nfs3.ACLEntry{{Tag: 0x40}}}, true); ok {
		t.Error("an unknown entry type was taken")
	}
}

// FuzzACLXattr: an ACL the xattr parser takes appends back to the same
// form, but for the ids of the entries that have none.
func FuzzACLXattr(f *testing.F) {
	f.Add(xattrACL([3]uint32{1, 6, undef}, [3]uint32{4, 4, undef}, [3]uint32{0x20, 4, undef}))
	f.Add(xattrACL([3]uint32{1, 6, 0}, [3]uint32{2, 4, 3}, [3]uint32{2, 4, 4}, [3]uint32{4, 4, 0}, [3]uint32{8, 1, 3}, [3]uint32{0x10, 7, 0}, [3]uint32{0x20, 4, 0}))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, errno := parseACLXattr(b)
		if errno != 0 {
			return
		}
		out := appendACLXattr(nil, e)
		if len(out) != len(b) {
			t.Fatalf("%d bytes parsed, %d appended", len(b), len(out))
		}
		e2, errno := parseACLXattr(out)
		if errno != 0 || !reflect.DeepEqual(e, e2) {
			t.Fatalf("round trip: %+v -> %+v (%v)", e, e2, errno)
		}
		for i := range e {
			if !bytes.Equal(out[4+8*i:4+8*i+4], b[4+8*i:4+8*i+4]) {
				t.Fatalf("entry %d: type or permissions changed", i)
			}
		}
	})
}

// TestACLXattrsAfterChmod: a chmod through the mount changes the access
// ACL's mask on the server, so the ACL is asked again, even where the
// server's ctime does not show the change (go-nfs gives the mtime).
func TestACLXattrsAfterChmod(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	as := &aclServer{}
	m := mountGoNFSVia(t, srv, nil, func(tr sunrpc.Transport) sunrpc.Transport {
		as.Transport = tr
		return as
	})
	ctx := testCtx(t)
	if err := os.WriteFile(filepath.Join(srv.Dir, "f"), nil, 0o640); err != nil {
		t.Fatal(err)
	}
	lr, err := m.fsys.c.Lookup(ctx, m.fsys.root.fh, "f")
	if err != nil {
		t.Fatal(err)
	}
	as.setACLs(lr.FH, []nfs3.ACLEntry{{Tag: nfs3.TagUserObj, Perm: 6}, {Tag: nfs3.TagUser, ID: 9, Perm: 4},
		{Tag: nfs3.TagGroupObj, Perm: 4}, {Tag: nfs3.TagMask, Perm: 4}, {Tag: nfs3.TagOther}}, nil)
	for range 2 {
		if _, err := getxattr(t, m.path("f"), xattrACLAccess); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := as.counts(); n != 1 {
		t.Fatalf("%d GETACLs for two reads, want 1", n)
	}
	if err := os.Chmod(m.path("f"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := getxattr(t, m.path("f"), xattrACLAccess); err != nil {
		t.Fatal(err)
	}
	if n, _ := as.counts(); n != 2 {
		t.Errorf("%d GETACLs after a chmod through the mount, want 2", n)
	}
}
