package memlock

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/xprt"
)

func TestSizePool(t *testing.T) {
	const KiB, MiB = 1 << 10, 1 << 20
	for _, tc := range []struct {
		name     string
		limit    int64
		nconnect int
		maxIO    int
		fixed    bool
		inline   int
		sized    bool
		wantIO   int // 0: any
		minBufs  int
		fails    bool
	}{
		{name: "unlimited", limit: -1, nconnect: 1, maxIO: MiB},
		{name: "128 MiB fits the defaults", limit: 128 * MiB, nconnect: 1, maxIO: MiB},
		{name: "Debian's 8 MiB", limit: 8 * MiB, nconnect: 1, maxIO: MiB, sized: true, wantIO: 256 * KiB, minBufs: GoodIOBuffers},
		{name: "8 MiB, rsize=1M given", limit: 8 * MiB, nconnect: 1, maxIO: MiB, fixed: true, sized: true, wantIO: MiB, minBufs: MinIOBuffers},
		{name: "8 MiB, nconnect=2", limit: 8 * MiB, nconnect: 2, maxIO: MiB, sized: true, minBufs: GoodIOBuffers},
		{name: "8 MiB, inline=16384", limit: 8 * MiB, nconnect: 1, maxIO: MiB, inline: 16384, sized: true, minBufs: GoodIOBuffers},
		{name: "16 MiB", limit: 16 * MiB, nconnect: 1, maxIO: MiB, sized: true, wantIO: 512 * KiB, minBufs: GoodIOBuffers},
		{name: "the old 64 KiB default", limit: 64 * KiB, nconnect: 1, maxIO: MiB, fails: true},
		{name: "8 MiB, nconnect=16", limit: 8 * MiB, nconnect: 16, maxIO: MiB, fails: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Size(tc.limit, tc.nconnect, tc.maxIO, tc.fixed, tc.inline)
			if tc.fails {
				var me *Error
				if !errors.As(err, &me) {
					t.Fatalf("pool %+v, err %v: want a Error", p, err)
				}
				if me.Need <= tc.limit {
					t.Errorf("says %d bytes are needed, under the limit %d", me.Need, tc.limit)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v", p)
			if p.Sized != tc.sized {
				t.Errorf("sized %v, want %v", p.Sized, tc.sized)
			}
			if tc.limit >= 0 && int64(tc.nconnect)*p.Locked > tc.limit {
				t.Errorf("%d transports register up to %d bytes, over the limit %d", tc.nconnect, int64(tc.nconnect)*p.Locked, tc.limit)
			}
			if !tc.sized {
				if p.Slots != 0 || p.IOBuffers != 0 || p.RegisterAhead != 0 || p.MaxIO != tc.maxIO {
					t.Errorf("defaults changed: %+v", p)
				}
				return
			}
			if tc.wantIO != 0 && p.MaxIO != tc.wantIO {
				t.Errorf("MaxIO %d, want %d", p.MaxIO, tc.wantIO)
			}
			if p.IOBuffers < tc.minBufs {
				t.Errorf("%d I/O buffers, want at least %d", p.IOBuffers, tc.minBufs)
			}
			if p.Slots <= 0 || p.Slots > DefaultSlots {
				t.Errorf("slots %d", p.Slots)
			}
		})
	}
}

func TestMemlockErrorNamesTheFix(t *testing.T) {
	_, err := Size(64<<10, 1, 1<<20, false, 0)
	if err == nil {
		t.Fatal("a 64 KiB limit fits")
	}
	for _, want := range []string{"RLIMIT_MEMLOCK", "64 KiB", "/etc/security/limits.conf", "memlock", "LimitMEMLOCK=", "ulimit -l"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
}

// TestFit: a Config that leaves the pool to xprt is sized to the limit; one
// that sets it is checked as it is; neither goes over the limit.
func TestFit(t *testing.T) {
	const MiB = 1 << 20
	for _, tc := range []struct {
		name     string
		cfg      xprt.Config
		nconnect int
		limit    int64
		fixed    bool
		sized    bool
		wantIO   int
		fails    bool
	}{
		{name: "defaults, no limit", limit: -1, nconnect: 1},
		{name: "defaults under 8 MiB", limit: 8 * MiB, nconnect: 1, sized: true, wantIO: 256 << 10},
		{name: "MaxIO fixed under 8 MiB", cfg: xprt.Config{MaxIO: MiB}, fixed: true, limit: 8 * MiB, nconnect: 1, sized: true, wantIO: MiB},
		{name: "the caller's small pool fits", cfg: xprt.Config{Slots: 8, IOBuffers: 2, RegisterAhead: -1, MaxIO: 256 << 10}, limit: 8 * MiB, nconnect: 1, wantIO: 256 << 10},
		{name: "the caller's pool does not fit", cfg: xprt.Config{IOBuffers: 32}, limit: 8 * MiB, nconnect: 1, fails: true},
		{name: "too many connections", limit: 8 * MiB, nconnect: 16, fails: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cfg
			p, err := Fit(&c, tc.nconnect, tc.limit, tc.fixed)
			if tc.fails {
				var e *Error
				if !errors.As(err, &e) || e.Need <= tc.limit {
					t.Fatalf("Fit: %+v, %v: want an *Error needing more than the limit", p, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Sized != tc.sized {
				t.Errorf("sized %v, want %v", p.Sized, tc.sized)
			}
			if tc.limit >= 0 && int64(tc.nconnect)*Need(c) > tc.limit {
				t.Errorf("the Config after Fit registers %d bytes per transport, over the limit %d: %+v", Need(c), tc.limit, c)
			}
			if tc.wantIO != 0 && c.MaxIO != tc.wantIO {
				t.Errorf("MaxIO %d, want %d", c.MaxIO, tc.wantIO)
			}
			if !tc.sized && c != tc.cfg {
				t.Errorf("an unsized Fit changed the Config: %+v", c)
			}
		})
	}
}

// TestFromRegistration: ENOMEM from a verb is the locked-memory limit and
// says so; any other error is not.
func TestFromRegistration(t *testing.T) {
	wrap := func(verb string, errno syscall.Errno) error {
		return &xprt.ConnectError{Addr: "10.0.0.1:20049", Err: fmt.Errorf("frwr: registering I/O buffer 3: %w", &verbs.OpError{Verb: verb, Err: errno})}
	}
	err := FromRegistration(wrap("ibv_reg_mr", syscall.ENOMEM), 1, 1<<20)
	var e *Error
	if !errors.As(err, &e) || !strings.Contains(err.Error(), "LimitMEMLOCK") || !errors.Is(err, syscall.ENOMEM) {
		t.Errorf("ENOMEM from ibv_reg_mr: %v", err)
	}
	if err := FromRegistration(wrap("rdma_connect", syscall.ECONNREFUSED), 1, 1<<20); err != nil {
		t.Errorf("a refused connection: %v", err)
	}
	if err := FromRegistration(errors.New("other"), 1, 1<<20); err != nil {
		t.Errorf("not a verb's error: %v", err)
	}
}
