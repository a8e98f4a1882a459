package nfs3

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
)

func TestStatusMapping(t *testing.T) {
	tests := []struct {
		st     Status
		target error
	}{
		{ErrNoEnt, fs.ErrNotExist},
		{ErrNoEnt, syscall.ENOENT},
		{ErrExist, fs.ErrExist},
		{ErrExist, syscall.EEXIST},
		{ErrPerm, fs.ErrPermission},
		{ErrAcces, fs.ErrPermission},
		{ErrAcces, syscall.EACCES},
		{ErrNotEmpty, syscall.ENOTEMPTY},
		{ErrNotDir, syscall.ENOTDIR},
		{ErrIsDir, syscall.EISDIR},
		{ErrROFS, syscall.EROFS},
		{ErrNoSpc, syscall.ENOSPC},
		{ErrStale, syscall.ESTALE},
		{ErrBadHandle, syscall.ESTALE},
		{ErrNameTooLong, syscall.ENAMETOOLONG},
		{ErrDQuot, syscall.EDQUOT},
		{ErrFBig, syscall.EFBIG},
		{ErrNotSupp, syscall.ENOTSUP},
		{ErrJukebox, syscall.EAGAIN},
	}
	for _, tc := range tests {
		err := fmt.Errorf("wrapped: %w", tc.st)
		if !errors.Is(err, tc.target) {
			t.Errorf("%v is not %v", tc.st, tc.target)
		}
	}
	if errors.Is(ErrNoEnt, fs.ErrExist) || errors.Is(ErrIO, fs.ErrNotExist) || errors.Is(ErrStale, syscall.ENOENT) {
		t.Error("false match")
	}
	for st := range statusInfo {
		if st != StatusOK && st.Error() == "" {
			t.Errorf("%d: empty message", st)
		}
	}
	if Status(12345).Error() != "nfsstat3(12345)" || !errors.Is(Status(12345), syscall.EIO) {
		t.Error("unknown status")
	}
	if !errors.Is(MountErrAcces, fs.ErrPermission) || !errors.Is(MountErrNoEnt, syscall.ENOENT) {
		t.Error("mount status mapping")
	}
}

// TestPipelinedLargeFile writes a multi-MiB file through the pipelined
// WriteAt path (UNSTABLE + COMMIT) in small WRITE sizes and reads it back
// through ReadAt, comparing checksums.
func TestPipelinedLargeFile(t *testing.T) {
	s := startGoNFS(t)
	tgt := s.mount(t, &MountOptions{Client: ClientOptions{Rsize: 64 << 10, Wsize: 48 << 10, Window: 8}})
	ctx := testCtx(t)
	const size = 5<<20 + 12345
	data := make([]byte, size)
	rand.Read(data)
	want := sha256.Sum256(data)

	f, err := tgt.OpenFileContext(ctx, "big.bin", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := f.WriteAt(data, 0); n != size || err != nil {
		t.Fatalf("WriteAt: %d, %v", n, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if a, err := tgt.Getattr(ctx, "big.bin"); err != nil || a.Size != size {
		t.Fatalf("size on the server: %d %v", a.Size, err)
	}

	f, err = tgt.OpenContext(ctx, "big.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, size)
	if n, err := f.ReadAt(got, 0); n != size || err != nil {
		t.Fatalf("ReadAt: %d, %v", n, err)
	}
	if sha256.Sum256(got) != want {
		t.Fatal("checksum mismatch")
	}

	// io.ReaderAt: reading past the end returns what there is and io.EOF.
	tail := make([]byte, 1<<20)
	n, err := f.ReadAt(tail, size-1000)
	if n != 1000 || err != io.EOF || !bytes.Equal(tail[:n], data[size-1000:]) {
		t.Fatalf("ReadAt past end: %d, %v", n, err)
	}
	if n, err := f.ReadAt(tail, size+10); n != 0 || err != io.EOF {
		t.Fatalf("ReadAt beyond end: %d, %v", n, err)
	}

	// Sequential io.Reader with Seek.
	if pos, err := f.Seek(-100, io.SeekEnd); pos != size-100 || err != nil {
		t.Fatalf("Seek end: %d %v", pos, err)
	}
	rest, err := io.ReadAll(f)
	if err != nil || !bytes.Equal(rest, data[size-100:]) {
		t.Fatalf("ReadAll after seek: %d bytes, %v", len(rest), err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	if _, err := io.CopyBuffer(h, f, make([]byte, 200<<10)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatal("sequential read checksum mismatch")
	}
}

// TestSmallWrites exercises the uncommitted-copy path: many small writes,
// concurrent WriteAt at disjoint offsets, Sync and Close.
func TestSmallWrites(t *testing.T) {
	s := startGoNFS(t)
	tgt := s.mount(t, &MountOptions{Client: ClientOptions{Wsize: 8 << 10}, MaxDirty: 64 << 10})
	ctx := testCtx(t)
	f, err := tgt.OpenFileContext(ctx, "/small", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	for i := range 300 {
		line := fmt.Sprintf("line %04d of the small-write test\n", i)
		want.WriteString(line)
		if _, err := io.WriteString(f, line); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	base := int64(want.Len())
	block := bytes.Repeat([]byte{'z'}, 1000)
	for i := range 16 {
		wg.Go(func() {
			if _, err := f.WriteAt(block, base+int64(i)*1000); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for range 16 {
		want.Write(block)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); !errors.Is(err, fs.ErrClosed) {
		t.Errorf("second close: %v", err)
	}
	if _, err := f.Write([]byte("x")); !errors.Is(err, fs.ErrClosed) {
		t.Errorf("write after close: %v", err)
	}
	g, err := tgt.OpenContext(ctx, "small")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	got, err := io.ReadAll(g)
	if err != nil || !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("content mismatch (%d vs %d bytes): %v", len(got), want.Len(), err)
	}
}

// TestDirectoryPaging lists a directory of many entries in small pages.
func TestDirectoryPaging(t *testing.T) {
	s := startGoNFS(t)
	// go-nfs refuses READDIRPLUS maxcount under 4096 (NFS3ERR_TOOSMALL).
	tgt := s.mount(t, &MountOptions{Client: ClientOptions{DirSize: 4096}})
	ctx := testCtx(t)
	dir, err := tgt.Mkdir(ctx, "/many", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	c := tgt.Client()
	const n = 1200
	var want []string
	for i := range n {
		name := fmt.Sprintf("entry-%04d-with-a-longish-name", i)
		want = append(want, name)
		if _, err := c.Create(ctx, dir, name, CreateHow{Mode: Unchecked}); err != nil {
			t.Fatal(err)
		}
	}

	// READDIR, the pages counted to be sure paging happened.
	pages := 0
	var got []string
	for e, err := range listPages(func(cookie Cookie, verf CookieVerf) ([]DirEntry, CookieVerf, bool, error) {
		pages++
		r, err := c.Readdir(ctx, dir, cookie, verf, 0)
		return r.Entries, r.Verf, r.EOF, err
	}, func(e *DirEntry) Cookie { return e.Cookie }) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e.Name)
	}
	if pages < 10 {
		t.Errorf("only %d pages", pages)
	}
	names := func(list []string) []string {
		list = slices.DeleteFunc(list, func(s string) bool { return s == "." || s == ".." })
		slices.Sort(list)
		return list
	}
	if !slices.Equal(names(got), want) {
		t.Errorf("READDIR: %d names, want %d", len(names(got)), n)
	}

	fis, err := tgt.ReadDirPlus(ctx, "/many")
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, fi := range fis {
		got = append(got, fi.Name())
		if fi.IsDir() || fi.Size() != 0 || fi.FH == nil {
			t.Errorf("entry %s: %+v", fi.Name(), fi)
		}
	}
	if !slices.Equal(names(got), want) {
		t.Errorf("READDIRPLUS: %d names, want %d", len(names(got)), n)
	}

	// Stop early through the iterator.
	seen := 0
	for _, err := range c.DirEntriesPlus(ctx, dir) {
		if err != nil {
			t.Fatal(err)
		}
		if seen++; seen == 5 {
			break
		}
	}
}
