package nfs3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// Result encoders, the server's half of each result decoder: they let the fuzz
// targets check that whatever a decoder accepts re-encodes to what it read.

func appendStatus(b []byte, st Status) []byte { return sunrpc.AppendUint32(b, uint32(st)) }

func (r *LookupResult) encode(b []byte, st Status) []byte {
	if st == StatusOK {
		b = appendPostOpAttr(appendFH(b, r.FH), r.Attr)
	}
	return appendPostOpAttr(b, r.DirAttr)
}

func (r *AccessResult) encode(b []byte, st Status) []byte {
	b = appendPostOpAttr(b, r.Attr)
	if st == StatusOK {
		b = sunrpc.AppendUint32(b, r.Access)
	}
	return b
}

func (r *ReadlinkResult) encode(b []byte, st Status) []byte {
	b = appendPostOpAttr(b, r.Attr)
	if st == StatusOK {
		b = sunrpc.AppendString(b, r.Target)
	}
	return b
}

func (r *WriteResult) encode(b []byte, st Status) []byte {
	b = appendWcc(b, &r.Wcc)
	if st == StatusOK {
		b = sunrpc.AppendUint32(sunrpc.AppendUint32(b, r.Count), uint32(r.Committed))
		b = append(b, r.Verf[:]...)
	}
	return b
}

func (r *CreateResult) encode(b []byte, st Status) []byte {
	if st == StatusOK {
		b = appendPostOpAttr(appendPostOpFH(b, r.FH), r.Attr)
	}
	return appendWcc(b, &r.DirWcc)
}

func (r *RenameResult) encode(b []byte, _ Status) []byte {
	return appendWcc(appendWcc(b, &r.FromDirWcc), &r.ToDirWcc)
}

func (r *LinkResult) encode(b []byte, _ Status) []byte {
	return appendWcc(appendPostOpAttr(b, r.Attr), &r.DirWcc)
}

func (r *ReaddirResult) encode(b []byte, st Status) []byte {
	b = appendPostOpAttr(b, r.DirAttr)
	if st != StatusOK {
		return b
	}
	b = append(b, r.Verf[:]...)
	for _, e := range r.Entries {
		b = sunrpc.AppendBool(b, true)
		b = sunrpc.AppendUint64(sunrpc.AppendString(sunrpc.AppendUint64(b, e.FileID), e.Name), e.Cookie)
	}
	return sunrpc.AppendBool(sunrpc.AppendBool(b, false), r.EOF)
}

func (r *ReaddirplusResult) encode(b []byte, st Status) []byte {
	b = appendPostOpAttr(b, r.DirAttr)
	if st != StatusOK {
		return b
	}
	b = append(b, r.Verf[:]...)
	for _, e := range r.Entries {
		b = sunrpc.AppendBool(b, true)
		b = sunrpc.AppendUint64(sunrpc.AppendString(sunrpc.AppendUint64(b, e.FileID), e.Name), e.Cookie)
		b = appendPostOpFH(appendPostOpAttr(b, e.Attr), e.FH)
	}
	return sunrpc.AppendBool(sunrpc.AppendBool(b, false), r.EOF)
}

func (r *FSStat) encode(b []byte, st Status) []byte {
	b = appendPostOpAttr(b, r.Attr)
	if st == StatusOK {
		for _, v := range []uint64{r.TotalBytes, r.FreeBytes, r.AvailBytes, r.TotalFiles, r.FreeFiles, r.AvailFiles} {
			b = sunrpc.AppendUint64(b, v)
		}
		b = sunrpc.AppendUint32(b, r.Invarsec)
	}
	return b
}

func (r *FSInfo) encode(b []byte, st Status) []byte {
	b = appendPostOpAttr(b, r.Attr)
	if st == StatusOK {
		for _, v := range []uint32{r.RtMax, r.RtPref, r.RtMult, r.WtMax, r.WtPref, r.WtMult, r.DtPref} {
			b = sunrpc.AppendUint32(b, v)
		}
		b = appendTime(sunrpc.AppendUint64(b, r.MaxFileSize), r.TimeDelta)
		b = sunrpc.AppendUint32(b, r.Properties)
	}
	return b
}

func (r *PathConf) encode(b []byte, st Status) []byte {
	b = appendPostOpAttr(b, r.Attr)
	if st == StatusOK {
		b = sunrpc.AppendUint32(sunrpc.AppendUint32(b, r.LinkMax), r.NameMax)
		for _, v := range []bool{r.NoTrunc, r.ChownRestricted, r.CaseInsensitive, r.CasePreserving} {
			b = sunrpc.AppendBool(b, v)
		}
	}
	return b
}

func (r *CommitResult) encode(b []byte, st Status) []byte {
	b = appendWcc(b, &r.Wcc)
	if st == StatusOK {
		b = append(b, r.Verf[:]...)
	}
	return b
}

// attrResult and wccResult give GETATTR's and the wcc-only results an encoder.
type attrResult struct{ A Attr }

func (r *attrResult) decode(d *sunrpc.Decoder, st Status) {
	if st == StatusOK {
		r.A = decodeAttr(d)
	}
}

func (r *attrResult) encode(b []byte, st Status) []byte {
	if st == StatusOK {
		b = appendAttr(b, &r.A)
	}
	return b
}

type wccResult struct{ W WccData }

func (r *wccResult) decode(d *sunrpc.Decoder, _ Status) { r.W = decodeWcc(d) }
func (r *wccResult) encode(b []byte, _ Status) []byte   { return appendWcc(b, &r.W) }

type codecResult interface {
	resultDecoder
	encode(b []byte, st Status) []byte
}

var resultTypes = []func() codecResult{
	func() codecResult { return new(attrResult) },
	func() codecResult { return new(wccResult) },
	func() codecResult { return new(LookupResult) },
	func() codecResult { return new(AccessResult) },
	func() codecResult { return new(ReadlinkResult) },
	func() codecResult { return new(WriteResult) },
	func() codecResult { return new(CreateResult) },
	func() codecResult { return new(RenameResult) },
	func() codecResult { return new(LinkResult) },
	func() codecResult { return new(ReaddirResult) },
	func() codecResult { return new(ReaddirplusResult) },
	func() codecResult { return new(FSStat) },
	func() codecResult { return new(FSInfo) },
	func() codecResult { return new(PathConf) },
	func() codecResult { return new(CommitResult) },
}

// decodeResult decodes a status and the result, as Client.call does.
func decodeResult(kind int, b []byte) (codecResult, Status, int, error) {
	d := sunrpc.NewDecoder(b)
	st := Status(d.Uint32())
	r := resultTypes[kind]()
	if d.Err() == nil {
		r.decode(d, st)
	}
	return r, st, d.Offset(), d.Err()
}

func FuzzResults(f *testing.F) {
	a := &Attr{Type: TypeReg, Mode: 0o644, Size: 10, FileID: 3}
	wcc := WccData{Before: &WccAttr{Size: 1}, After: a}
	seeds := []codecResult{
		&attrResult{*a},
		&wccResult{wcc},
		&LookupResult{FH: testFH, Attr: a, DirAttr: a},
		&AccessResult{Attr: a, Access: 3},
		&ReadlinkResult{Target: "x/y"},
		&WriteResult{Wcc: wcc, Count: 5, Committed: FileSync, Verf: WriteVerf{1}},
		&CreateResult{FH: testFH, DirWcc: wcc},
		&RenameResult{FromDirWcc: wcc},
		&LinkResult{Attr: a},
		&ReaddirResult{Entries: []DirEntry{{1, "a", 2}, {3, "bb", 4}}, EOF: true},
		&ReaddirplusResult{Entries: []DirEntryPlus{{1, "a", 2, a, testFH}}},
		&FSStat{TotalBytes: 9},
		&FSInfo{RtMax: 1 << 20},
		&PathConf{NameMax: 255, CasePreserving: true},
		&CommitResult{Verf: WriteVerf{9}},
	}
	for i, r := range seeds {
		f.Add(uint8(i), r.encode(appendStatus(nil, StatusOK), StatusOK))
		f.Add(uint8(i), r.encode(appendStatus(nil, ErrNoEnt), ErrNoEnt))
	}
	f.Fuzz(func(t *testing.T, kind uint8, b []byte) {
		k := int(kind) % len(resultTypes)
		r, st, n, err := decodeResult(k, b)
		if err != nil {
			return
		}
		enc := r.encode(appendStatus(nil, st), st)
		if len(enc) != n {
			t.Fatalf("%T: decoded %d bytes, re-encoded %d", r, n, len(enc))
		}
		r2, st2, _, err := decodeResult(k, enc)
		if err != nil || st2 != st || !reflect.DeepEqual(r, r2) {
			t.Fatalf("%T: round trip: %+v -> %+v (%v)", r, r, r2, err)
		}
	})
}

func FuzzSetAttr(f *testing.F) {
	f.Add(appendSetAttr(nil, &SetAttr{Mode: new(uint32(0o644)), Size: new(uint64(3)), Mtime: SetTime{How: SetToClientTime, Time: Time{1, 2}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		d := sunrpc.NewDecoder(b)
		s := decodeSetAttr(d)
		if d.Err() != nil {
			return
		}
		enc := appendSetAttr(nil, &s)
		if !bytes.Equal(enc, b[:d.Offset()]) {
			t.Fatalf("round trip: % x -> % x", b[:d.Offset()], enc)
		}
	})
}

func FuzzExports(f *testing.F) {
	f.Add(appendExports(nil, []Export{{Dir: "/a", Groups: []string{"g"}}, {Dir: "/b"}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		d := sunrpc.NewDecoder(b)
		ex, err := decodeExports(d)
		if err != nil {
			return
		}
		ex2, err := decodeExports(sunrpc.NewDecoder(appendExports(nil, ex)))
		if err != nil || !reflect.DeepEqual(ex, ex2) {
			t.Fatalf("round trip: %+v -> %+v (%v)", ex, ex2, err)
		}
	})
}

// FuzzClientReplies feeds arbitrary results to every procedure of the client,
// inline and RDMA-style: no panic, no hang, an error or a result; a reply
// whose status is not NFS3_OK never succeeds, and when its error is a
// status it is that one; a READ never returns more than was asked or than
// the reply carried.
func FuzzClientReplies(f *testing.F) {
	for i, r := range []codecResult{&attrResult{}, &LookupResult{FH: testFH}, &ReaddirResult{EOF: true}} {
		f.Add(uint8(i), false, r.encode(appendStatus(nil, StatusOK), StatusOK))
	}
	f.Add(uint8(ProcRead), true, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 4})
	f.Fuzz(func(t *testing.T, proc uint8, rdma bool, body []byte) {
		m := &memTransport{rdma: rdma, handle: func(h sunrpc.CallHeader, _ *sunrpc.Decoder, req *sunrpc.Request) fakeReply {
			if rdma && req.ReplyBulk != nil {
				// Pretend up to 8 bytes travelled apart.
				return fakeReply{before: body, bulk: []byte("12345678")[:min(len(body), 8)]}
			}
			return fakeReply{before: body}
		}}
		c, _ := NewClient(m, &ClientOptions{JukeboxDelay: 1})
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // a JUKEBOX status must not make the target wait
		if Status(beUint32(body)) != ErrJukebox {
			ctx = context.Background()
		}
		p := uint32(proc) % 22
		err := callProc(ctx, c, p)
		if p == ProcNull || len(body) < 4 {
			return
		}
		st := Status(beUint32(body))
		if st == StatusOK {
			return
		}
		if err == nil {
			t.Fatalf("proc %d: a reply with status %v succeeded", p, st)
		}
		var got Status
		if errors.As(err, &got) && got != st && st != ErrJukebox {
			t.Fatalf("proc %d: reply status %v reported as %v", p, st, got)
		}
	})
}

func beUint32(b []byte) uint32 {
	if len(b) < 4 {
		return 0
	}
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func callProc(ctx context.Context, c *Client, proc uint32) error {
	fh := testFH
	var err error
	switch proc {
	case ProcNull:
		err = c.Null(ctx)
	case ProcGetattr:
		_, err = c.Getattr(ctx, fh)
	case ProcSetattr:
		_, err = c.Setattr(ctx, fh, SetAttr{}, &Time{})
	case ProcLookup:
		var r LookupResult
		r, err = c.Lookup(ctx, fh, "n")
		if err == nil && len(r.FH) > FHSize {
			panic(fmt.Sprintf("LOOKUP returned a handle of %d bytes", len(r.FH)))
		}
	case ProcAccess:
		_, err = c.Access(ctx, fh, 1)
	case ProcReadlink:
		_, err = c.Readlink(ctx, fh)
	case ProcRead:
		buf := make([]byte, 16)
		var r ReadResult
		r, err = c.Read(ctx, fh, 0, buf)
		if err == nil && (r.Count < 0 || r.Count > len(buf)) {
			panic(fmt.Sprintf("READ of %d bytes returned %d", len(buf), r.Count))
		}
	case ProcWrite:
		_, err = c.Write(ctx, fh, 0, []byte("abc"), Unstable)
	case ProcCreate:
		_, err = c.Create(ctx, fh, "n", CreateHow{Mode: Exclusive})
	case ProcMkdir:
		_, err = c.Mkdir(ctx, fh, "n", SetAttr{})
	case ProcSymlink:
		_, err = c.Symlink(ctx, fh, "n", SetAttr{}, "t")
	case ProcMknod:
		_, err = c.Mknod(ctx, fh, "n", MknodData{Type: TypeChr})
	case ProcRemove:
		_, err = c.Remove(ctx, fh, "n")
	case ProcRmdir:
		_, err = c.Rmdir(ctx, fh, "n")
	case ProcRename:
		_, err = c.Rename(ctx, fh, "a", fh, "b")
	case ProcLink:
		_, err = c.Link(ctx, fh, fh, "n")
	case ProcReaddir:
		_, err = c.ReadDirAll(ctx, fh)
	case ProcReaddirplus:
		_, err = c.ReadDirPlusAll(ctx, fh)
	case ProcFsstat:
		_, err = c.Fsstat(ctx, fh)
	case ProcFsinfo:
		_, err = c.Fsinfo(ctx, fh)
	case ProcPathconf:
		_, err = c.Pathconf(ctx, fh)
	case ProcCommit:
		_, err = c.Commit(ctx, fh, 0, 0)
	}
	return err
}

// FuzzMountReplies feeds arbitrary results to the MOUNT procedures.
func FuzzMountReplies(f *testing.F) {
	ok := appendFH(sunrpc.AppendUint32(nil, uint32(MountOK)), testFH)
	f.Add(uint8(MountProcMnt), sunrpc.AppendUint32(sunrpc.AppendUint32(ok, 1), 1))
	f.Add(uint8(MountProcExport), appendExports(nil, []Export{{Dir: "/x", Groups: []string{"a"}}}))
	f.Fuzz(func(t *testing.T, proc uint8, body []byte) {
		m := &memTransport{handle: func(sunrpc.CallHeader, *sunrpc.Decoder, *sunrpc.Request) fakeReply {
			return fakeReply{before: body}
		}}
		mc, _ := NewMountClient(m, sunrpc.AuthNone, nil)
		ctx := context.Background()
		switch proc % 3 {
		case 0:
			res, err := mc.Mnt(ctx, "/x")
			if err == nil && len(res.FH) > FHSize {
				t.Fatalf("handle of %d bytes accepted", len(res.FH))
			}
			if st := MountStatus(beUint32(body)); len(body) >= 4 && st != MountOK && err == nil {
				t.Fatalf("MNT with status %v succeeded", st)
			}
			var got MountStatus
			if st := MountStatus(beUint32(body)); errors.As(err, &got) && got != st {
				t.Fatalf("MNT status %v reported as %v", st, got)
			}
		case 1:
			mc.Export(ctx)
		case 2:
			mc.Dump(ctx)
		}
	})
}
