package testbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// Accel is how qemu runs the guest's CPUs: "kvm" (the host's CPU,
// virtualized) where the host's /dev/kvm runs the stock guest kernel, else
// "tcg" (every instruction emulated: system calls, wake-ups and clock
// reads cost far more than on real hardware).
type Accel struct {
	Name string `json:"name"` // "kvm" or "tcg"
	// Why says what decided it (the probe's outcome).
	Why string `json:"why"`
}

// KVM and TCG are the two accelerators.
const (
	AccelKVM = "kvm"
	AccelTCG = "tcg"
)

// Short is "KVM" or "TCG".
func (a Accel) Short() string {
	if a.Name == AccelKVM {
		return "KVM"
	}
	return "TCG"
}

// String is "KVM" or "TCG", with what decided it.
func (a Accel) String() string {
	name := a.Short()
	if a.Why == "" {
		return name
	}
	return name + " (" + a.Why + ")"
}

// qemuArgs are qemu's accelerator and CPU arguments.
func (a Accel) qemuArgs() []string {
	if a.Name == AccelKVM {
		return []string{"-accel", "kvm", "-cpu", "host"}
	}
	return []string{"-accel", "tcg,thread=multi", "-cpu", "max"}
}

// probeTimeout bounds the probe boot under KVM: a stock kernel there
// reaches the bed's command in seconds; one that does not within this is
// taken as a KVM that cannot run it.
const probeTimeout = 90 * time.Second

// chooseAccel decides from the facts: kvmErr is why /dev/kvm cannot be
// opened (nil: it can), and probe, called only when it can, boots the
// stock guest kernel under KVM and says whether it reached user space and
// ran a command there.
func chooseAccel(kvmErr error, probe func() error) Accel {
	if kvmErr != nil {
		if errors.Is(kvmErr, os.ErrNotExist) {
			return Accel{Name: AccelTCG, Why: "no /dev/kvm on this host"}
		}
		return Accel{Name: AccelTCG, Why: fmt.Sprintf("/dev/kvm cannot be opened: %v", kvmErr)}
	}
	if err := probe(); err != nil {
		return Accel{Name: AccelTCG, Why: fmt.Sprintf("a probe boot under KVM failed: %v", firstLine(err.Error()))}
	}
	return Accel{Name: AccelKVM, Why: "a probe boot of the guest kernel under KVM reached user space"}
}

// ProbeAccel chooses the accelerator for img on this host: KVM when
// /dev/kvm opens and a short boot of the guest under it runs a command
// (bounded by probeTimeout), TCG otherwise. It says which on log.
func ProbeAccel(ctx context.Context, img *Image, log io.Writer) Accel {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err == nil {
		f.Close()
	}
	a := chooseAccel(err, func() error { return probeKVM(ctx, img) })
	fmt.Fprintf(log, "[testbed] accelerator: %s\n", a)
	return a
}

// probeKVM boots img under KVM to run true(1).
func probeKVM(ctx context.Context, img *Image) error {
	dir, err := os.MkdirTemp("", "testbed-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var out bytes.Buffer
	code, err := Run(ctx, img, RunOptions{Share: dir, Args: []string{"true"}, Timeout: probeTimeout,
		Accel: &Accel{Name: AccelKVM, Why: "probe"}, Stdout: &out, Log: &out, MemoryMiB: 2048})
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("true(1) exited %d in the guest: %s", code, firstLine(out.String()))
	}
	return nil
}

func firstLine(s string) string {
	if i := bytes.IndexByte([]byte(s), '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
