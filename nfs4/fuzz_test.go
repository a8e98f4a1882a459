package nfs4

import (
	"testing"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// Each reply decoder has a fuzz target: decoding arbitrary bytes never
// panics, never reads past the message, and what it accepts keeps the
// decoder's own invariants (a READ never reports more data than asked, a
// READDIR's entries all have names). Seeds are the golden replies.

// fuzzCompound decodes b as the reply to the compound build makes.
func fuzzCompound(t *testing.T, b []byte, build func(cb *compound)) error {
	cb := newCompound()
	build(cb)
	d := sunrpc.NewDecoder(b)
	err := decodeCompound(d, cb.ops, cb.results)
	if d.Offset() > len(b) {
		t.Fatalf("decoder consumed %d of %d bytes", d.Offset(), len(b))
	}
	return err
}

func addSeeds(f *testing.F, seeds ...string) {
	for _, s := range seeds {
		f.Add(words(f, s))
	}
}

const seqOKHex = "00000035 00000000 " + testSessionHex + " 00000001 00000000 00000000 00000000 00000000"

func FuzzSequenceReply(f *testing.F) {
	addSeeds(f, "00000000 00000000 00000001 "+seqOKHex, "00002744 00000000 00000001 00000035 00002744")
	f.Fuzz(func(t *testing.T, b []byte) {
		var sr SequenceResult
		fuzzCompound(t, b, func(cb *compound) { cb.sequence(&SequenceArgs{}, &sr) })
	})
}

func FuzzExchangeIDReply(f *testing.F) {
	addSeeds(f, `00000000 00000000 00000001 0000002a 00000000
		00000000 0000abcd 00000005 80010000 00000000
		00000000 00000007 00000002 6b6e0000 00000000 00000000`)
	f.Fuzz(func(t *testing.T, b []byte) {
		var r ExchangeIDResult
		fuzzCompound(t, b, func(cb *compound) { cb.exchangeID(&ClientOwner{}, 0, &r) })
	})
}

func FuzzCreateSessionReply(f *testing.F) {
	addSeeds(f, `00000000 00000000 00000001 0000002b 00000000 `+testSessionHex+` 00000005 00000000
		00000000 00001000 00002000 00000800 00000010 00000020 00000000
		00000000 00001000 00001000 00000000 00000002 00000001 00000000`)
	f.Fuzz(func(t *testing.T, b []byte) {
		var r CreateSessionResult
		fuzzCompound(t, b, func(cb *compound) { cb.createSession(1, 1, &ChannelAttrs{}, &backChannel, &r) })
	})
}

func FuzzGetattrReply(f *testing.F) {
	addSeeds(f, `00000000 00000000 00000002 00000016 00000000 00000009 00000000
		00000002 00000012 00000012 00000018 00000001 00000000 00000400 000001a4 00000004 31303030`)
	f.Fuzz(func(t *testing.T, b []byte) {
		var a Attr
		if fuzzCompound(t, b, func(cb *compound) { cb.putFH(FileHandle{1}); cb.getAttr(StatAttrs, &a) }) == nil && len(a.Mask) > maxBitmapWords {
			t.Fatalf("a bitmap of %d words accepted", len(a.Mask))
		}
	})
}

func FuzzOpenReply(f *testing.F) {
	addSeeds(f, `00000000 00000000 00000001 00000012 00000000
		00000001 11111111 11111111 11111111
		00000001 00000000 00000001 00000000 00000002
		00000004 00000002 00000000 00000002
		00000003 00000007 00000000`)
	f.Fuzz(func(t *testing.T, b []byte) {
		var r OpenResult
		fuzzCompound(t, b, func(cb *compound) {
			cb.open(stateOwner{}, ShareAccessRead, ShareDenyNone, &OpenHow{}, "f", &r)
		})
	})
}

func FuzzReadReply(f *testing.F) {
	addSeeds(f, "00000000 00000000 00000001 00000019 00000000 00000001 00000005 68656c6c 6f000000")
	f.Fuzz(func(t *testing.T, b []byte) {
		p := make([]byte, 8)
		var r ReadResult
		if fuzzCompound(t, b, func(cb *compound) { cb.read(StateID{}, 0, p, &r) }) == nil && r.Count > len(p) {
			t.Fatalf("READ of %d bytes reported %d", len(p), r.Count)
		}
	})
}

func FuzzReaddirReply(f *testing.F) {
	addSeeds(f, `00000000 00000000 00000001 0000001a 00000000 01010101 01010101
		00000001 00000000 00000003 00000001 61000000 00000001 00000002 00000004 00000002
		00000000 00000001`)
	f.Fuzz(func(t *testing.T, b []byte) {
		var r ReaddirResult
		if fuzzCompound(t, b, func(cb *compound) { cb.readdir(0, Verifier{}, 100, 1000, StatAttrs, &r) }) == nil {
			if len(r.Entries) > len(b)/minEntrySize {
				t.Fatalf("%d entries from %d bytes", len(r.Entries), len(b))
			}
		}
	})
}

func FuzzLockReply(f *testing.F) {
	addSeeds(f, `0000271a 00000000 00000001 0000000c 0000271a
		00000000 00000000 00000000 00000064 00000002 00000000 0000abcd 00000002 6c320000`,
		"00000000 00000000 00000001 0000000c 00000000 00000001 11111111 11111111 11111111")
	f.Fuzz(func(t *testing.T, b []byte) {
		var sid StateID
		var d LockDenied
		fuzzCompound(t, b, func(cb *compound) { cb.lock(WriteLT, false, 0, 1, 1, &Locker{New: true}, &sid, &d) })
		fuzzCompound(t, b, func(cb *compound) { cb.lockT(WriteLT, 0, 1, stateOwner{}, &d) })
		fuzzCompound(t, b, func(cb *compound) { cb.lockU(WriteLT, StateID{}, 0, 1, &sid) })
	})
}

func FuzzCopyReply(f *testing.F) {
	addSeeds(f, `00000000 00000000 00000001 0000003c 00000000 00000000 00000000 00001000 00000002 01020304 05060708 00000000 00000001`,
		"0000273a 00000000 00000001 0000003c 0000273a 00000001 00000001")
	f.Fuzz(func(t *testing.T, b []byte) {
		var r CopyResult
		fuzzCompound(t, b, func(cb *compound) { cb.copyOp(StateID{}, StateID{}, 0, 0, 0, &r) })
	})
}

// FuzzSmallReplies covers the remaining decoders: GETFH, ACCESS, WRITE,
// COMMIT, CREATE, REMOVE, RENAME, LINK, READLINK, SETATTR, CLOSE, SEEK.
func FuzzSmallReplies(f *testing.F) {
	addSeeds(f, "00000000 00000000 00000001 0000000a 00000000 00000002 01020000",
		"00000000 00000000 00000001 00000003 00000000 0000003f 00000003",
		"00000000 00000000 00000001 00000026 00000000 00000005 00000002 01020304 05060708",
		"00000000 00000000 00000001 00000045 00000000 00000001 00000000 00001000")
	builds := []func(cb *compound){
		func(cb *compound) { var fh FileHandle; cb.getFH(&fh) },
		func(cb *compound) { var r AccessResult; cb.access(0x3f, &r) },
		func(cb *compound) { var r WriteResult; cb.write(StateID{}, 0, Unstable, []byte("x"), &r) },
		func(cb *compound) { var v Verifier; cb.commit(0, 0, &v) },
		func(cb *compound) { var ci ChangeInfo; cb.createDir("d", &SetAttr{}, &ci) },
		func(cb *compound) { var ci ChangeInfo; cb.remove("d", &ci) },
		func(cb *compound) { var a, b ChangeInfo; cb.rename("a", "b", &a, &b) },
		func(cb *compound) { var ci ChangeInfo; cb.link("l", &ci) },
		func(cb *compound) { var s string; cb.readlink(&s) },
		func(cb *compound) { var m Bitmap; cb.setAttr(StateID{}, &SetAttr{}, &m) },
		func(cb *compound) { var s StateID; cb.closeOp(StateID{}, &s) },
		func(cb *compound) { var r SeekResult; cb.seek(StateID{}, 0, SeekData, &r) },
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, build := range builds {
			fuzzCompound(t, b, build)
		}
	})
}
