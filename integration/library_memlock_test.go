//go:build integration

package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma"
	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/xprt"
	"github.com/nfsrdma/nfsrdma/xprt/memlock"
)

// nfsrdma.Mount under Debian's 8 MiB locked-memory limit, in a process of
// its own: this test binary again (TestMain runs libraryMemlockChild when
// libraryMemlockEnv is set), under prlimit --memlock=8388608 and without
// CAP_IPC_LOCK (setpriv drops it from the bounding set, so that root's
// registrations are counted against the limit as a user's are). It stays
// root otherwise: MOUNT from a reserved port, the export's no_root_squash.

// libraryMemlockEnv selects the child's mode: "defaults" (xprt's pool left
// to Mount) or "pool" (a pool of 32 I/O buffers of 1 MiB asked for).
const libraryMemlockEnv = "NFSRDMA_LIBRARY_MEMLOCK"

func TestLibraryMountMemlock(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	run := func(mode string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "/usr/bin/prlimit", "--memlock=8388608", "--",
			"/usr/bin/setpriv", "--bounding-set=-ipc_lock", "--inh-caps=-ipc_lock", "--",
			exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), libraryMemlockEnv+"="+mode)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		}
		if err != nil {
			t.Fatalf("%s: %v: %s", cmd, err, out)
		}
		return 0, string(out)
	}

	t.Run("defaults", func(t *testing.T) {
		code, out := run("defaults")
		if code != 0 {
			t.Fatalf("the library's mount under an 8 MiB limit failed (exit %d):\n%s", code, out)
		}
		m := regexp.MustCompile(`limit=(-?\d+) capeff_ipc_lock=(\w+) rsize=(\d+) wsize=(\d+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("the child did not report its limit and sizes:\n%s", out)
		}
		if m[1] != "8388608" || m[2] != "false" {
			t.Fatalf("the child ran with limit %s and CAP_IPC_LOCK %s; want 8388608 without it:\n%s", m[1], m[2], out)
		}
		r, _ := strconv.Atoi(m[3])
		w, _ := strconv.Atoi(m[4])
		if r >= 1<<20 || w >= 1<<20 || r < 64<<10 {
			t.Errorf("rsize %d, wsize %d: want the sized pool's (64 KiB to 512 KiB)", r, w)
		}
		t.Logf("child: %s", strings.TrimSpace(out))
	})
	t.Run("pool too large", func(t *testing.T) {
		code, out := run("pool")
		if code != 3 {
			t.Fatalf("exit %d, want 3 (Mount refused with a *memlock.Error before dialing):\n%s", code, out)
		}
		for _, want := range []string{"ulimit -l", "limits.conf", "LimitMEMLOCK=", "8192 KiB"} {
			if !strings.Contains(out, want) {
				t.Errorf("the refusal lacks %q:\n%s", want, out)
			}
		}
	})
}

// libraryMemlockChild is the child of TestLibraryMountMemlock: it mounts
// the insecure export with nfsrdma.Mount, writes and reads back 2 MiB, and
// prints its limit and I/O sizes. Exit 0: done; 3: Mount refused with a
// *memlock.Error; 1: anything else.
func libraryMemlockChild(mode string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	limit, err := memlock.Limit()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	capEff := "unknown"
	if st, err := os.ReadFile("/proc/self/status"); err == nil {
		if m := regexp.MustCompile(`CapEff:\s*([0-9a-f]+)`).FindSubmatch(st); m != nil {
			v, _ := strconv.ParseUint(string(m[1]), 16, 64)
			capEff = strconv.FormatBool(v&(1<<14) != 0)
		}
	}
	opts := &nfsrdma.Options{MountOptions: nfs3.MountOptions{NConnect: 2}}
	if mode == "pool" {
		opts.RDMA = xprt.Config{IOBuffers: 32, MaxIO: 1 << 20}
	}
	target, err := nfsrdma.Mount(ctx, insecureExportSpec, opts)
	if err != nil {
		fmt.Println("mount:", err)
		if errors.As(err, new(*memlock.Error)) {
			return 3
		}
		return 1
	}
	defer target.Close()
	r, w, err := target.Client().IOSizes(ctx, target.Root())
	if err != nil {
		fmt.Println("IOSizes:", err)
		return 1
	}
	fmt.Printf("limit=%d capeff_ipc_lock=%s rsize=%d wsize=%d\n", limit, capEff, r, w)
	name := fmt.Sprintf("library-memlock-%d", os.Getpid())
	data := bytes.Repeat([]byte("locked memory "), 150<<10) // 2.1 MiB: many READs and WRITEs
	f, err := target.OpenFileContext(ctx, name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err == nil {
		_, err = f.WriteContext(ctx, data)
		if cerr := f.CloseContext(ctx); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Println("write:", err)
		return 1
	}
	defer target.Remove(ctx, name)
	got, err := target.ReadFileContext(ctx, name)
	if err != nil || !bytes.Equal(got, data) {
		fmt.Printf("read back %d bytes (%v), want %d\n", len(got), err, len(data))
		return 1
	}
	return 0
}
