package nfs3

import (
	"errors"
	"testing"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

func TestHandleTooLong(t *testing.T) {
	s := startGoNFS(t)
	tgt := s.mount(t, nil)
	ctx := testCtx(t)
	long := make(FileHandle, FHSize+1)
	var hl *HandleTooLongError
	if _, err := tgt.Client().Getattr(ctx, long); !errors.As(err, &hl) || hl.Len != FHSize+1 {
		t.Errorf("getattr: %v", err)
	}
	if _, err := tgt.Client().Rename(ctx, tgt.Root(), "a", long, "b"); !errors.As(err, &hl) {
		t.Errorf("rename: %v", err)
	}
}

func TestMountProtocol(t *testing.T) {
	s := startGoNFS(t)
	ctx := testCtx(t)
	mc, err := DialMount(ctx, s.host, s.port, sunrpc.AuthNone, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	if err := mc.Null(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := mc.Mnt(ctx, "/")
	if err != nil || len(res.FH) == 0 || len(res.AuthFlavors) == 0 {
		t.Fatalf("mnt: %+v %v", res, err)
	}
	if err := mc.Umnt(ctx, "/"); err != nil {
		t.Fatal(err)
	}
	// go-nfs implements no EXPORT, and answers with accept_stat 2 (its own
	// numbering for PROC_UNAVAIL; RFC 5531's 2 is PROG_MISMATCH) without
	// mismatch_info: PROG_MISMATCH, as the Linux client reads it.
	if _, err := mc.Export(ctx); !errors.Is(err, sunrpc.ErrProgMismatch) {
		t.Errorf("export: %v", err)
	}
}
