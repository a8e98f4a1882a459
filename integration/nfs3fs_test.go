//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/nfs3/nfs3test"
	"github.com/nfsrdma/nfsrdma/verbs/ibv"
	"github.com/nfsrdma/nfsrdma/xprt"
)

// The nfs3 conformance suite (nfs3test: testing/fstest on Target's fs.FS view,
// os-style OpenFile flags, errnos, path operations, pipelined transfers,
// SETATTR times) against knfsd, through nfs3.Mount with its defaults (AUTH_SYS
// of the process, reserved source ports), NFS over RDMA and over TCP.

// knfsdSuite bounds file sizes: fstest reads every file one byte per READ,
// and the guest is CPU-emulated.
var knfsdSuite = nfs3test.Server{SmallFiles: 1500}

// mountTarget mounts the export with nfs3.Mount, NFS over kind, with small
// READ and WRITE sizes so that the suite's files take several of each.
func mountTarget(t *testing.T, ctx context.Context, kind, export string, o nfs3.MountOptions) *nfs3.Target {
	t.Helper()
	var tr *xprt.Transport
	if kind == overRDMA {
		fab, err := ibv.Open()
		if err != nil {
			t.Fatal(err)
		}
		tr, err = xprt.Dial(ctx, xprt.Config{Fabric: fab, Addr: nfsRDMA})
		if err != nil {
			t.Fatal(err)
		}
		o.Transport = tr
		t.Cleanup(func() {
			t.Logf("xprt counters: %s", tr.Counters())
			if live := fab.Live(); !live.Zero() {
				t.Errorf("verbs resources left after Close: %+v", live)
			}
		})
	}
	tgt, err := nfs3.Mount(ctx, serverAddr.String(), export, &o)
	if err != nil {
		if tr != nil {
			tr.Close()
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tgt.Unmount(context.Background()); err != nil {
			t.Errorf("Unmount: %v", err)
		}
	})
	return tgt
}

func TestNFS3Conformance(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		ctx := ctxT(t, 10*time.Minute)
		tgt := mountTarget(t, ctx, kind, exportDir, nfs3.MountOptions{
			Client: nfs3.ClientOptions{Rsize: 1024, Wsize: 1024},
		})
		nfs3test.Run(t, ctx, tgt, "/conformance-"+kind, knfsdSuite)
	})
}

// mustRun runs a command in the guest, failing the test on error.
func mustRun(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// TestNFS3ResvPort: the bed's main export has "secure" (exports(5)'s
// default): it is mounted by nfs3.Mount's defaults as root (MOUNT and NFS
// over TCP from reserved ports) and refused with NoResvPort, which the
// insecure export accepts.
func TestNFS3ResvPort(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the guest runs the suite as root")
	}
	ctx := ctxT(t, 3*time.Minute)
	tgt := mountTarget(t, ctx, overTCP, exportDir, nfs3.MountOptions{})
	made := fmt.Sprintf("/resvport-%d", os.Getpid())
	if _, err := tgt.Mkdir(ctx, made, 0o755); err != nil {
		t.Fatalf("MKDIR on the secure export from a reserved port: %v", err)
	}
	defer os.Remove(exportDir + made)
	if fi, err := os.Stat(exportDir + made); err != nil || !fi.IsDir() {
		t.Errorf("on the server: %v, %v", fi, err)
	}

	_, err := nfs3.Mount(ctx, serverAddr.String(), exportDir, &nfs3.MountOptions{NoResvPort: true})
	if err == nil {
		t.Fatal("noresvport: the secure export was mounted from an ordinary port")
	}
	t.Logf("noresvport on a secure export: %v", err)
	var ms nfs3.MountStatus
	if !errors.As(err, &ms) || !errors.Is(err, fs.ErrPermission) {
		t.Errorf("noresvport refusal: %v, want MNT3ERR_ACCES or _PERM", err)
	}
	// The insecure export takes an ordinary port.
	ins := mountTarget(t, ctx, overTCP, insecureExportDir, nfs3.MountOptions{NoResvPort: true})
	if _, err := ins.Stat("."); err != nil {
		t.Errorf("noresvport on the insecure export: %v", err)
	}
}
