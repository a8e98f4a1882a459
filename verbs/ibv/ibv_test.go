//go:build linux && cgo

package ibv

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestOpenReportsMissingDevice: on a machine without RDMA devices (the
// development host) Open fails with an error that names the verb and says
// how to create a device; with devices it succeeds and lists them. Either
// way the assertion is real: the branch follows the machine's state.
func TestOpenReportsMissingDevice(t *testing.T) {
	_, statErr := os.Stat("/sys/class/infiniband")
	f, err := Open()
	if os.IsNotExist(statErr) {
		if err == nil {
			t.Fatal("Open succeeded on a machine without /sys/class/infiniband")
		}
		if !strings.Contains(err.Error(), "rdma link add") || !errors.Is(err, syscall.ENODEV) {
			t.Fatalf("error does not say what to do: %v", err)
		}
		t.Logf("no RDMA device here: %v", err)
		return
	}
	if err != nil {
		t.Fatalf("Open with devices present: %v", err)
	}
	names, err := f.Devices()
	if err != nil || len(names) == 0 {
		t.Fatalf("Devices: %v %v", names, err)
	}
	if _, err := f.OpenDevice("nosuchdev0"); err == nil || !strings.Contains(err.Error(), "nosuchdev0") {
		t.Fatalf("OpenDevice of a missing name: %v", err)
	}
}

func TestQuirkTable(t *testing.T) {
	rxe := quirksFor("rxe")
	if rxe.WindowBoundsEnforced || !rxe.DoubleLocalInvPanics || !rxe.KickRecvFlush || rxe.WithInvFlags&0x4 == 0 {
		t.Fatalf("rxe quirks: %+v", rxe)
	}
	spec := quirksFor("mlx5")
	if !spec.WindowBoundsEnforced || spec.WithInvFlags != 0x8 || spec.KickRecvFlush {
		t.Fatalf("default quirks: %+v", spec)
	}
}
