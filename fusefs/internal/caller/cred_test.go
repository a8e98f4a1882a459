package caller

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// procStatus writes a /proc/<pid>/status under dir.
func procStatus(t *testing.T, dir string, pid int, text string) {
	t.Helper()
	d := filepath.Join(dir, strconv.Itoa(pid))
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "status"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// authSys decodes the AUTH_SYS credential ctx carries.
func authSys(t *testing.T, ctx context.Context) sunrpc.AuthSys {
	t.Helper()
	cred, ok := sunrpc.CredentialFrom(ctx)
	if !ok {
		t.Fatal("no credential")
	}
	a, err := sunrpc.ParseAuthSys(cred)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestCredentialsGroups: the supplementary groups come from the caller's
// /proc status, at most 16, and a Groups line cut by the reader's buffer
// gives only whole numbers.
func TestCredentialsGroups(t *testing.T) {
	dir := t.TempDir()
	var gs []string
	for i := range 20 {
		gs = append(gs, strconv.Itoa(100+i))
	}
	procStatus(t, dir, 42, "Name:\tx\nUid:\t5\t5\t5\t5\nGroups:\t"+strings.Join(gs, " ")+" \nVmPeak:\t1 kB\n")
	c := NewCredentials(dir, nil)
	got := c.groups(42)
	if len(got) != sunrpc.MaxAuthSysGIDs || got[0] != 100 || got[15] != 115 {
		t.Fatalf("groups: %v", got)
	}
	if g := c.groups(43); g != nil {
		t.Fatalf("groups of a missing pid: %v", g)
	}
	if g := c.groups(0); g != nil {
		t.Fatalf("groups of pid 0: %v", g)
	}
	long := "Name:\t" + strings.Repeat("x", 4096-len("Name:\t\nGroups:\t100 101 102 10")) + "\nGroups:\t100 101 102 103456 104\n"
	procStatus(t, dir, 44, long)
	if got := c.groups(44); !slices.Equal(got, []uint32{100, 101, 102}) {
		t.Fatalf("groups of a Groups line cut at 4096 bytes: %v, want [100 101 102]", got)
	}
}

// TestCredentialsCache: a caller's credential is built once and reused for
// credTTL on the injected clock (a change of its groups unseen until
// then), keyed by pid, uid and gid, and the cache stays bounded.
func TestCredentialsCache(t *testing.T) {
	dir := t.TempDir()
	procStatus(t, dir, 42, "Name:\tx\nGroups:\t7 8\n")
	now := time.Unix(1000, 0)
	c := NewCredentials(dir, func() time.Time { return now })

	ctx, ok := c.For(42, 1000, 100)
	if !ok {
		t.Fatal("no credential")
	}
	if a := authSys(t, ctx); a.UID != 1000 || a.GID != 100 || !slices.Equal(a.GIDs, []uint32{7, 8}) || a.Stamp != 1000 {
		t.Fatalf("credential %+v", a)
	}
	if ctx.Done() != nil {
		t.Error("a credential's context can be cancelled: it must not")
	}
	procStatus(t, dir, 42, "Name:\tx\nGroups:\t9\n")
	now = now.Add(credTTL - time.Millisecond)
	if again, _ := c.For(42, 1000, 100); again != ctx {
		t.Error("credential rebuilt within credTTL")
	}
	if other, _ := c.For(42, 1001, 100); other == ctx || authSys(t, other).UID != 1001 || !slices.Equal(authSys(t, other).GIDs, []uint32{9}) {
		t.Error("another uid of the same pid got the cached credential")
	}
	now = now.Add(time.Millisecond)
	later, _ := c.For(42, 1000, 100)
	if later == ctx || !slices.Equal(authSys(t, later).GIDs, []uint32{9}) {
		t.Errorf("credential after credTTL: groups %v, want [9]", authSys(t, later).GIDs)
	}

	// Bounded: at maxCreds, the expired entries go first, then all.
	for pid := range uint32(maxCreds + 10) {
		if _, ok := c.For(1000+pid, 1, 1); !ok {
			t.Fatal("no credential")
		}
		if n := len(c.m); n > maxCreds {
			t.Fatalf("%d credentials cached, bound %d", n, maxCreds)
		}
	}
}

func TestCredCarriers(t *testing.T) {
	c := NewCredentials(t.TempDir(), nil)
	alice, _ := c.For(0, 1000, 1000)
	bob, _ := c.For(0, 1001, 1001)
	bg := context.Background()

	if !SameCred(bg, context.TODO()) || !SameCred(alice, alice) || SameCred(alice, bob) || SameCred(alice, bg) {
		t.Error("SameCred")
	}
	if again, _ := c.For(0, 1000, 1000); !SameCred(alice, WithCredOf(bg, again)) {
		t.Error("SameCred of a copied credential")
	}
	ctx, cancel := context.WithCancel(bg)
	on := WithCredOf(ctx, alice)
	if !SameCred(on, alice) {
		t.Error("WithCredOf does not carry the credential")
	}
	cancel()
	if on.Err() == nil {
		t.Error("WithCredOf lost ctx's cancellation")
	}
	if WithCredOf(ctx, nil) != ctx || WithCredOf(ctx, bg) != ctx {
		t.Error("WithCredOf without a credential changed ctx")
	}

	if cr := CredOf(alice); !SameCred(cr.On(bg), alice) {
		t.Error("Cred.On does not carry the credential CredOf took")
	}
	if cr := CredOf(bg); cr.On(alice) != alice || cr.set {
		t.Error("the client's own Cred changed the context")
	}
}
