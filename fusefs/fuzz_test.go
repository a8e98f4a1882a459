package fusefs

import (
	"errors"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nfsrdma/nfsrdma/nfs3"
)

// FuzzFillAttr converts arbitrary NFS attributes to FUSE's and checks the
// result: the file type's bits and only the permission bits of the mode,
// sizes, times and ids carried over, the block count rounded up without
// overflow, and never one of the inode numbers go-fuse reserves.
func FuzzFillAttr(f *testing.F) {
	f.Add(uint32(1), uint32(0o644), uint64(4096), uint64(4096), uint64(7), uint32(1), uint32(2))
	f.Add(uint32(2), uint32(0o7777), uint64(0), ^uint64(0), uint64(0), ^uint32(0), uint32(999999999))
	f.Add(uint32(99), ^uint32(0), ^uint64(0), uint64(511), ^uint64(0), uint32(0), uint32(0))
	f.Fuzz(func(t *testing.T, typ, mode uint32, size, used, fileid uint64, sec, nsec uint32) {
		a := nfs3.Attr{Type: nfs3.FileType(typ), Mode: mode, Nlink: 3, UID: 1001, GID: 1002, Size: size, Used: used,
			FileID: fileid, Mtime: nfs3.Time{Seconds: sec, Nseconds: nsec}}
		var out fuse.Attr
		fillAttr(&out, &a)
		if out.Mode&syscall.S_IFMT != typeMode(a.Type) || out.Mode&^syscall.S_IFMT != mode&0o7777 {
			t.Fatalf("mode %#o of type %d became %#o", mode, typ, out.Mode)
		}
		if out.Size != size || out.Uid != 1001 || out.Gid != 1002 || out.Nlink != 3 {
			t.Fatalf("attributes not carried over: %+v", out)
		}
		if out.Mtime != uint64(sec) || out.Mtimensec != nsec {
			t.Fatalf("mtime %d.%d became %d.%d", sec, nsec, out.Mtime, out.Mtimensec)
		}
		blocks := used / 512
		if used%512 != 0 {
			blocks++
		}
		if out.Blocks != blocks {
			t.Fatalf("%d bytes used shown as %d blocks", used, out.Blocks)
		}
		if out.Ino == 0 || out.Ino == ^uint64(0) {
			t.Fatalf("fileid %d shown as reserved inode %d", fileid, out.Ino)
		}
		if fileid != 0 && fileid != ^uint64(0) && out.Ino != fileid {
			t.Fatalf("fileid %d shown as inode %d", fileid, out.Ino)
		}
	})
}

// FuzzSetTime converts arbitrary FUSE SETATTR times: NFSv3's unsigned
// 32-bit seconds are clamped, never wrapped, and nanoseconds stay below a
// second.
func FuzzSetTime(f *testing.F) {
	f.Add(uint64(1700000000), uint32(5))
	f.Add(uint64(1)<<32, uint32(0))
	f.Add(^uint64(0), uint32(999999999)) // -1 s
	f.Fuzz(func(t *testing.T, sec uint64, nsec uint32) {
		nsec %= 1e9
		st := setTime(fuse.FATTR_MTIME, fuse.FATTR_MTIME, fuse.FATTR_MTIME_NOW, sec, nsec)
		if st.How != nfs3.SetToClientTime || st.Time.Nseconds >= 1e9 {
			t.Fatalf("%d.%d: %+v", sec, nsec, st)
		}
		s := int64(sec)
		switch {
		case s < 0 && st.Time.Seconds != 0:
			t.Fatalf("negative time %d set as %d", s, st.Time.Seconds)
		case s >= 1<<32-1 && st.Time.Seconds != 1<<32-1: // at the limit Linux drops the nanoseconds
			t.Fatalf("time %d past 2106 set as %d", s, st.Time.Seconds)
		case s >= 0 && s < 1<<32-1 && (int64(st.Time.Seconds) != s || st.Time.Nseconds != nsec):
			t.Fatalf("time %d.%d set as %d.%d", s, nsec, st.Time.Seconds, st.Time.Nseconds)
		}
	})
}

// FuzzToErrno maps every NFS status to an errno FUSE can carry (below
// 512), never success.
func FuzzToErrno(f *testing.F) {
	for _, s := range []uint32{1, 2, 13, 63, 10001, 10008, 10013, 70000} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s uint32) {
		if s == 0 {
			return
		}
		e := toErrno(nfs3.Status(s))
		if e == 0 || e >= 512 {
			t.Fatalf("status %d mapped to errno %d", s, e)
		}
		if !errors.Is(nfs3.Status(s), e) && e != syscall.EIO && nfs3.Status(s).Errno() != e {
			t.Fatalf("status %d mapped to errno %d, unlike the library's %d", s, e, nfs3.Status(s).Errno())
		}
	})
}
