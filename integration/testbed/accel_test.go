package testbed

import (
	"errors"
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestChooseAccel: KVM only when /dev/kvm opens and the probe boot runs a
// command; otherwise TCG, saying why, and the probe is not even tried
// without /dev/kvm.
func TestChooseAccel(t *testing.T) {
	for _, c := range []struct {
		name    string
		kvmErr  error
		probe   error
		want    string
		why     string
		probing bool
	}{
		{"no device", &fs.PathError{Op: "open", Path: "/dev/kvm", Err: os.ErrNotExist}, nil, AccelTCG, "no /dev/kvm", false},
		{"no permission", &fs.PathError{Op: "open", Path: "/dev/kvm", Err: os.ErrPermission}, nil, AccelTCG, "cannot be opened", false},
		{"probe fails", nil, errors.New("testbed: the guest did not finish within 1m30s\nconsole..."), AccelTCG, "probe boot under KVM failed: testbed: the guest did not finish within 1m30s", true},
		{"probe runs", nil, nil, AccelKVM, "reached user space", true},
	} {
		probed := false
		a := chooseAccel(c.kvmErr, func() error { probed = true; return c.probe })
		if a.Name != c.want || !strings.Contains(a.Why, c.why) || probed != c.probing {
			t.Errorf("%s: %+v (probed %v); want %s, why containing %q, probed %v", c.name, a, probed, c.want, c.why, c.probing)
		}
		if strings.Contains(a.Why, "\n") {
			t.Errorf("%s: a reason of several lines: %q", c.name, a.Why)
		}
	}
}

// TestAccelArgs: each accelerator's qemu arguments, and what the bed
// prints for it.
func TestAccelArgs(t *testing.T) {
	kvm, tcg := Accel{Name: AccelKVM}, Accel{Name: AccelTCG, Why: "no /dev/kvm on this host"}
	if a := kvm.qemuArgs(); !slices.Equal(a, []string{"-accel", "kvm", "-cpu", "host"}) {
		t.Errorf("kvm: %q", a)
	}
	if a := tcg.qemuArgs(); !slices.Equal(a, []string{"-accel", "tcg,thread=multi", "-cpu", "max"}) {
		t.Errorf("tcg: %q", a)
	}
	if kvm.String() != "KVM" || tcg.String() != "TCG (no /dev/kvm on this host)" || (Accel{}).Short() != "TCG" {
		t.Errorf("%q %q", kvm, tcg)
	}
}

// TestProbeAccelHere: on a host without /dev/kvm the probe says TCG
// without booting anything (the image is not even looked at).
func TestProbeAccelHere(t *testing.T) {
	if _, err := os.Stat("/dev/kvm"); err == nil {
		t.Skip("this host has /dev/kvm: the fallback is covered by TestChooseAccel")
	}
	var log strings.Builder
	a := ProbeAccel(t.Context(), nil, &log)
	if a.Name != AccelTCG || log.String() != "[testbed] accelerator: TCG (no /dev/kvm on this host)\n" {
		t.Errorf("%+v, printed %q", a, log.String())
	}
}
