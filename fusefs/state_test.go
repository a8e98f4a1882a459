package fusefs

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
)

// stateFS is an FS with only what the state types use: options and a
// clock that stands still at now.
func stateFS(now time.Time) *FS {
	return &FS{
		opts: Options{
			AcRegMin: time.Second, AcRegMax: time.Minute,
			AcDirMin: time.Second, AcDirMax: time.Minute,
			LookupCache: LookupCacheAll,
		},
		now: func() time.Time { return now },
	}
}

// A node has the state of its type and no other: a regular file's node
// never has directory state, a directory's never file state, anything
// else neither.
func TestNodeStateByType(t *testing.T) {
	f := stateFS(time.Now())
	for _, tc := range []struct {
		typ        nfs3.FileType
		file, dir_ bool
	}{
		{nfs3.TypeReg, true, false},
		{nfs3.TypeDir, false, true},
		{nfs3.TypeLnk, false, false},
		{nfs3.TypeFIFO, false, false},
		{nfs3.TypeChr, false, false},
	} {
		n := newNode(f, nfs3.FileHandle{1}, tc.typ)
		if (n.file != nil) != tc.file || (n.dir != nil) != tc.dir_ {
			t.Errorf("type %v: file state %v, directory state %v; want %v, %v", tc.typ, n.file != nil, n.dir != nil, tc.file, tc.dir_)
		}
		if n.file != nil && n.file.n != n || n.dir != nil && n.dir.n != n {
			t.Errorf("type %v: the state does not point back at its node", tc.typ)
		}
		// What every node goes through works on each: attributes that
		// show a change, and the file operations a directory or a
		// symlink may be asked (SETATTR, FSYNC).
		a := nfs3.Attr{Type: tc.typ, Size: 1}
		n.setAttr(&a)
		a.Size = 2
		if !n.setAttr(&a) {
			t.Errorf("type %v: a new size was not a change", tc.typ)
		}
		if err := n.file.commitDirty(t.Context()); err != nil {
			t.Errorf("type %v: commit with nothing to commit: %v", tc.typ, err)
		}
		if n.file.writesPending() || n.file.inUse() {
			t.Errorf("type %v: writes pending or in use with no open", tc.typ)
		}
	}
}

// dirWith returns a directory node whose attributes (size 10, mtime 1)
// are cached at now, knowing names a and b, c missing, listed entries a,
// c and x, and a kept listing.
func dirWith(f *FS, now time.Time) (*node, nfs3.Attr) {
	n := newNode(f, nfs3.FileHandle{2}, nfs3.TypeDir)
	a := nfs3.Attr{Type: nfs3.TypeDir, Size: 10, Mtime: nfs3.Time{Seconds: 1}, Ctime: nfs3.Time{Seconds: 1}}
	n.setAttr(&a)
	d := n.dir
	d.names = map[string]struct{}{"a": {}, "b": {}}
	d.namesOK = true
	d.neg = map[string]struct{}{"c": {}}
	d.plus = map[string]plusEntry{"a": {at: now}, "c": {at: now}, "x": {at: now}}
	d.kept = &keptListing{at: now}
	return n, a
}

// after returns the attributes of a directory changed from a: size and
// times moved on.
func after(a nfs3.Attr) *nfs3.Attr {
	a.Size += 10
	a.Mtime.Seconds++
	a.Ctime.Seconds++
	return &a
}

func wccOf(a nfs3.Attr) *nfs3.WccAttr {
	return &nfs3.WccAttr{Size: a.Size, Mtime: a.Mtime, Ctime: a.Ctime}
}

// dirState.changed, the one entry point of this mount's changes of a
// directory, leaves none of its caches describing the directory before:
// the changed names' listed entries and the kept listing go whatever the
// wcc_data say; the names follow the change when the wcc before shows it
// was this mount's alone, and go when it shows another's; the attributes
// are the reply's, or stale without them.
func TestDirChangedDropsEveryCache(t *testing.T) {
	now := time.Now()
	f := stateFS(now)
	changes := []nameChange{{add: "c"}, {remove: "a"}}

	t.Run("own", func(t *testing.T) {
		n, a := dirWith(f, now)
		aft := after(a)
		n.dir.changed(&nfs3.WccData{Before: wccOf(a), After: aft}, true, changes...)
		d := n.dir
		if got := slices.Sorted(maps.Keys(d.names)); !d.namesOK || !slices.Equal(got, []string{"b", "c"}) {
			t.Errorf("names %v (complete %v), want [b c]", got, d.namesOK)
		}
		if _, ok := d.neg["c"]; ok {
			t.Errorf("c made, still known missing")
		}
		if got := slices.Sorted(maps.Keys(d.plus)); !slices.Equal(got, []string{"x"}) {
			t.Errorf("listed entries %v after c and a changed, want [x]", got)
		}
		if d.kept != nil {
			t.Errorf("kept listing survived the change")
		}
		if !n.attrs.valid || n.attrs.attr != *aft {
			t.Errorf("attributes %+v (valid %v), want the reply's", n.attrs.attr, n.attrs.valid)
		}
	})

	t.Run("another's too", func(t *testing.T) {
		n, a := dirWith(f, now)
		other := a
		other.Mtime.Seconds += 5 // changed by someone before this operation
		n.dir.changed(&nfs3.WccData{Before: wccOf(other), After: after(other)}, true, changes...)
		d := n.dir
		if d.namesOK || d.names != nil || d.neg != nil {
			t.Errorf("names kept across another's change: %v (complete %v), missing %v", d.names, d.namesOK, d.neg)
		}
		if _, ok := d.plus["a"]; ok || d.kept != nil {
			t.Errorf("listed entry of a changed name or the kept listing survived")
		}
	})

	t.Run("failed", func(t *testing.T) {
		n, a := dirWith(f, now)
		n.dir.changed(&nfs3.WccData{Before: wccOf(a), After: &a}, false, changes...)
		d := n.dir
		if !d.namesOK || len(d.names) != 2 {
			t.Errorf("a failed operation changed the names: %v", d.names)
		}
		if _, ok := d.plus["c"]; ok || d.kept != nil {
			t.Errorf("listed entry of a name the operation touched, or the kept listing, survived")
		}
	})

	t.Run("no attributes", func(t *testing.T) {
		n, _ := dirWith(f, now)
		n.dir.changed(&nfs3.WccData{}, true, changes...)
		if n.attrs.valid {
			t.Errorf("attributes still trusted after a change that brought none")
		}
		if n.dir.kept != nil {
			t.Errorf("kept listing survived")
		}
	})
}

// Attributes that show another's change of a directory (setAttr) end its
// names and kept listing; the listed entries stay until an open's
// revalidation shows the change (revalidated), which drops them and ages
// the kernel's copy of the listing.
func TestDirSawChange(t *testing.T) {
	now := time.Now()
	f := stateFS(now)
	n, a := dirWith(f, now)
	n.dir.listCachedAt = now
	if !n.setAttr(after(a)) {
		t.Fatal("new size and times were not a change")
	}
	d := n.dir
	if d.namesOK || d.neg != nil || d.kept != nil {
		t.Errorf("names (complete %v, missing %v) or kept listing (%v) survived a change by another", d.namesOK, d.neg, d.kept != nil)
	}
	if len(d.plus) != 3 {
		t.Errorf("listed entries %d, want 3 kept until an open", len(d.plus))
	}
	d.revalidated(after(*after(a)))
	if d.plus != nil || !d.listCachedAt.Before(now.Add(-time.Hour)) {
		t.Errorf("after a revalidation that showed a change: %d listed entries, kernel's copy from %v", len(d.plus), d.listCachedAt)
	}
}
