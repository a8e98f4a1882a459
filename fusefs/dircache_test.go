package fusefs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// listNames lists dir through the mount, sorted.
func listNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	check(t, err)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	slices.Sort(out)
	return out
}

// TestListCache: a directory listed again soon after is listed from the
// kernel's copy, with no READDIRPLUS request or call (GNU rm -rf opens
// every directory twice); a change this mount makes is in the next listing
// at once, and once the copy is older than the listings' attributes stay
// trusted the next listing asks the server again and finds what another
// client made meanwhile.
func TestListCache(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	const n = 20
	oldDir(t, srv.Dir, n)
	var skew atomic.Int64
	m, _ := mountRecordedSetup(t, srv, nil, MountConfig{}, func(f *FS) {
		f.now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	})
	first := listNames(t, m.path("d"))
	if len(first) != n {
		t.Fatalf("listing: %d names, want %d", len(first), n)
	}
	d, before := opDeltas(m), fuseRequests(m)
	again := listNames(t, m.path("d"))
	if !slices.Equal(again, first) {
		t.Errorf("listed again: %v, want %v", again, first)
	}
	if rp, frp := d(nfs3.ProcReaddirplus), fuseRequests(m)["READDIRPLUS"]-before["READDIRPLUS"]; rp != 0 || frp != 0 {
		t.Errorf("listed again at once: %d READDIRPLUS calls and %d READDIRPLUS requests, want none", rp, frp)
	}
	check(t, os.WriteFile(m.path("d/mine"), nil, 0o644))
	if got := listNames(t, m.path("d")); !slices.Contains(got, "mine") || len(got) != n+1 {
		t.Errorf("after a create through the mount: %v, want mine among %d", got, n+1)
	}
	// Made by another client; the mount's clock moves past plusFresh.
	check(t, os.WriteFile(filepath.Join(srv.Dir, "d", "theirs"), nil, 0o644))
	skew.Add(int64(m.fsys.plusFresh() + time.Second))
	d = opDeltas(m)
	if got := listNames(t, m.path("d")); !slices.Contains(got, "theirs") {
		t.Errorf("a copy older than %v: %v, want theirs listed", m.fsys.plusFresh(), got)
	}
	if rp := d(nfs3.ProcReaddirplus); rp == 0 {
		t.Errorf("a copy older than %v: listed with no READDIRPLUS call", m.fsys.plusFresh())
	}
	// The entries of that listing came with their attributes: stat needs
	// no call.
	d = opDeltas(m)
	for i := range n {
		_, err := os.Stat(m.path(fmt.Sprintf("d/old%d", i)))
		check(t, err)
	}
	if g, l := d(nfs3.ProcGetattr), d(nfs3.ProcLookup); g+l != 0 {
		t.Errorf("stat of %d names just listed: %d GETATTR and %d LOOKUP calls, want none", n, g, l)
	}
}

// TestListCacheOff: with lookupcache=none or noac every listing asks the
// server.
func TestListCacheOff(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(*Options)
	}{
		{"lookupcache=none", func(o *Options) { o.LookupCache = LookupCacheNone }},
		{"noac", func(o *Options) { o.NoAC() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := startGoNFS(t, backendDisk)
			oldDir(t, srv.Dir, 5)
			o := DefaultOptions()
			c.set(&o)
			m := mountGoNFS(t, srv, &o)
			listNames(t, m.path("d"))
			d := opDeltas(m)
			listNames(t, m.path("d"))
			if rp := d(nfs3.ProcReaddirplus); rp == 0 {
				t.Errorf("listed again with %s: no READDIRPLUS call", c.name)
			}
		})
	}
}

// TestListCacheRootSquashSwitched: root's listing of a directory others may
// not read is answered from the kernel's copy only once the server let
// root read that directory (ACCESS at opendir), as the Linux client keeps
// root's ACCESS reply per directory: root's mkdir (owned by uid 0, the
// server not squashing root) says nothing of it. Once the export squashes
// root, the owner's listing fills the kernel's copy, and root's listing
// is the server's refusal (EACCES), not the owner's names.
func TestListCacheRootSquashSwitched(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	check(t, os.Chmod(srv.Dir, 0o755))
	d := filepath.Join(srv.Dir, "e")
	check(t, os.Mkdir(d, 0o750))
	check(t, os.Chmod(d, 0o750))
	check(t, os.WriteFile(filepath.Join(d, "secret-name"), nil, 0o644))
	check(t, os.Chown(d, 1001, 1001))
	m, rec := mountRecorded(t, srv, nil, MountConfig{AllowOther: true})
	check(t, os.Chmod(filepath.Dir(m.dir), 0o755))
	check(t, os.Mkdir(m.path("top"), 0o700)) // owned by uid 0: not squashed
	// exportfs -o root_squash: root's listings and lookups refused.
	rec.mu.Lock()
	rec.refuse = func(c sentCall) bool {
		a, err := sunrpc.ParseAuthSys(c.cred)
		return (c.proc == nfs3.ProcReaddirplus || c.proc == nfs3.ProcLookup || c.proc == nfs3.ProcAccess) && err == nil && a.UID == 0
	}
	rec.mu.Unlock()
	cmd := exec.Command("ls", m.path("e"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1001}}
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "secret-name") {
		t.Fatalf("ls as the owner: %v: %s", err, out)
	}
	if ents, err := os.ReadDir(m.path("e")); !errors.Is(err, syscall.EACCES) {
		t.Errorf("root's listing of the owner's 0750 directory, root squashed since its mkdir elsewhere: %v, %v; want EACCES", ents, err)
	}
}

// TestListCacheSeek: a handle opened for the kernel's copy, asked for an
// offset it did not hand out (the copy's, after the copy was dropped under
// a reader), reads from the start to it and goes on with the entries a
// reader that far would get, under the same offsets; a handle not opened
// for the copy refuses such an offset.
func TestListCacheSeek(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	for i := range 12 {
		check(t, os.WriteFile(filepath.Join(srv.Dir, fmt.Sprintf("f%02d", i)), nil, 0o644))
	}
	m := mountGoNFS(t, srv, nil)
	ctx := context.Background()
	root := m.fsys.root
	read := func(h *dirHandle) map[uint64]string {
		out := map[uint64]string{}
		for {
			e, errno := h.Readdirent(ctx)
			if errno != 0 {
				t.Fatalf("Readdirent: %v", errno)
			}
			if e == nil {
				return out
			}
			out[e.Off] = e.Name
		}
	}
	fh, flags, errno := root.OpendirHandle(ctx, 0)
	if errno != 0 || flags != fuse.FOPEN_CACHE_DIR|fuse.FOPEN_KEEP_CACHE {
		t.Fatalf("OpendirHandle: flags %#x, %v; want CACHE_DIR|KEEP_CACHE", flags, errno)
	}
	all := read(fh.(*dirHandle))
	if len(all) < 12 {
		t.Fatalf("listing: %v", all)
	}
	fh2, _, _ := root.OpendirHandle(ctx, 0)
	h2 := fh2.(*dirHandle)
	const off = 7
	if errno := h2.Seekdir(ctx, off); errno != 0 {
		t.Fatalf("Seekdir(%d) on a fresh handle: %v", off, errno)
	}
	rest := read(h2)
	for o, name := range all {
		if o > off && rest[o] != name {
			t.Errorf("offset %d after the seek: %q, want %q", o, rest[o], name)
		}
		if o <= off && rest[o] != "" {
			t.Errorf("offset %d, before the seek's, listed after it: %q", o, rest[o])
		}
	}
	if len(rest) != len(all)-off {
		t.Errorf("after a seek to %d of %d entries: %d listed", off, len(all), len(rest))
	}
	plain := &dirHandle{n: root}
	if errno := plain.Seekdir(ctx, off); errno != syscall.EINVAL {
		t.Errorf("Seekdir(%d) on a fresh handle not opened for the copy: %v, want EINVAL", off, errno)
	}
}

// readSome opens dir through the mount, reads n entries and closes it, as
// GNU rm -rf's first open of a directory does: the kernel's copy of the
// listing stays incomplete.
func readSome(t *testing.T, dir string, n int) {
	t.Helper()
	f, err := os.Open(dir)
	check(t, err)
	defer f.Close()
	ents, err := f.ReadDir(n)
	check(t, err)
	if len(ents) != n {
		t.Fatalf("read %d entries of %s, want %d", len(ents), dir, n)
	}
}

// TestListKept: a directory whose first open read only its first page
// (rm -rf's) is read whole by the next open from the READDIRPLUS replies
// the first got, with no call; the files' attributes learned since those
// replies (a write through the mount) are not taken back by them; a
// change through the mount, or a listing older than plusFresh, goes to the
// server again.
func TestListKept(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	const n = 60 // more than one FUSE READDIRPLUS page
	oldDir(t, srv.Dir, n)
	var skew atomic.Int64
	m, _ := mountRecordedSetup(t, srv, nil, MountConfig{}, func(f *FS) {
		f.now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	})
	d := opDeltas(m)
	readSome(t, m.path("d"), 1)
	if rp := d(nfs3.ProcReaddirplus); rp == 0 {
		t.Fatalf("first open: no READDIRPLUS call")
	}
	// A file of the listing written through the mount after it.
	check(t, os.WriteFile(m.path("d/old0"), []byte("grown"), 0o644))
	d = opDeltas(m)
	names := listNames(t, m.path("d"))
	if len(names) != n {
		t.Errorf("second open: %d names, want %d", len(names), n)
	}
	if rp := d(nfs3.ProcReaddirplus); rp != 0 {
		t.Errorf("second open, soon after a first that read one page: %d READDIRPLUS calls, want none", rp)
	}
	if st, err := os.Stat(m.path("d/old0")); err != nil || st.Size() != 5 {
		t.Errorf("stat of a file written after the kept listing: %v, %v; want size 5", st, err)
	}

	// A change through the mount: listed from the server, with it.
	readSome(t, m.path("d"), 1)
	check(t, os.WriteFile(m.path("d/mine"), nil, 0o644))
	d = opDeltas(m)
	if got := listNames(t, m.path("d")); !slices.Contains(got, "mine") || len(got) != n+1 {
		t.Errorf("after a create through the mount: %d names (mine listed: %v), want %d", len(got), slices.Contains(got, "mine"), n+1)
	}
	if rp := d(nfs3.ProcReaddirplus); rp == 0 {
		t.Errorf("after a create through the mount: listed with no READDIRPLUS call")
	}

	// Another client's file, and the kept replies older than plusFresh.
	readSome(t, m.path("d"), 1)
	check(t, os.WriteFile(filepath.Join(srv.Dir, "d", "theirs"), nil, 0o644))
	skew.Add(int64(m.fsys.plusFresh() + time.Second))
	d = opDeltas(m)
	if got := listNames(t, m.path("d")); !slices.Contains(got, "theirs") {
		t.Errorf("kept replies older than %v: %d names without theirs", m.fsys.plusFresh(), len(got))
	}
	if rp := d(nfs3.ProcReaddirplus); rp == 0 {
		t.Errorf("kept replies older than %v: listed with no READDIRPLUS call", m.fsys.plusFresh())
	}
}

// TestKeptListsBound: the mount keeps at most maxKeptDirs listings, the
// oldest dropped first, and none older than plusFresh.
func TestKeptListsBound(t *testing.T) {
	var kl keptLists
	now := time.Now()
	const fresh = time.Minute
	nodes := make([]*dirState, maxKeptDirs+1)
	for i := range nodes {
		nodes[i] = &dirState{}
		l := &keptListing{at: now}
		nodes[i].kept = l
		if !kl.add(nodes[i], l, 10, true, now, fresh) {
			t.Fatalf("listing %d refused", i)
		}
	}
	if nodes[0].kept != nil || nodes[1].kept == nil {
		t.Errorf("after %d listings: the first kept %v, the second %v; want only the first dropped", len(nodes), nodes[0].kept != nil, nodes[1].kept != nil)
	}
	if kl.dirs != maxKeptDirs || kl.entries != 10*maxKeptDirs {
		t.Errorf("%d listings and %d entries counted, want %d and %d", kl.dirs, kl.entries, maxKeptDirs, 10*maxKeptDirs)
	}
	if kl.add(&dirState{}, &keptListing{at: now}, maxKeptEntries+1, true, now, fresh) {
		t.Errorf("a listing larger than maxKeptEntries was kept")
	}
	late := now.Add(fresh)
	x := &dirState{}
	x.kept = &keptListing{at: late}
	kl.add(x, x.kept, 1, true, late, fresh)
	for i, n := range nodes {
		if n.kept != nil {
			t.Errorf("listing %d kept past plusFresh", i)
		}
	}
	if kl.dirs != 1 || kl.entries != 1 {
		t.Errorf("after the old ones went: %d listings and %d entries counted, want 1 and 1", kl.dirs, kl.entries)
	}
}
