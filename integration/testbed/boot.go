package testbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// RunOptions describe one guest boot.
type RunOptions struct {
	// Share is the host directory mounted at /share in the guest; the
	// command runs there. Default: the current directory.
	Share string
	// Args is the command; empty with Shell.
	Args []string
	// Env adds environment variables for the command.
	Env []string
	// Shell gives an interactive shell on the console instead of Args.
	Shell bool
	// MemoryMiB is the guest memory (4096–6144 suits the bed).
	MemoryMiB int
	// CPUs is the number of vCPUs (2: with 1, polling peers share one CPU).
	CPUs int
	// KernelArgs are added to the guest kernel's command line.
	KernelArgs string
	// Accel is how qemu runs the guest; nil: ProbeAccel chooses (KVM
	// where the host allows it, else TCG).
	Accel *Accel
	// Timeout kills a guest that has not powered off by then.
	Timeout time.Duration
	// Stdout receives the command's output as it runs; Log receives the
	// bed's own messages.
	Stdout, Log io.Writer
}

// clockArgs make the guest keep time with the TSC. Under TCG the kernel
// distrusts the TSC and falls back to the HPET, whose every read is an
// emulated MMIO access: 2.0 us per clock_gettime against 0.18 us with the
// TSC (measured on the bed), paid by every timestamp a client takes — the
// Go runtime's scheduler and timers most of all, the kernel's far less.
// qemu derives the guest TSC from the host clock, shared by the vCPUs, so
// it is monotonic and runs at the right rate (a 41 s interval of the
// emulated RTC measured 40.98 s by clock_gettime). Real machines keep time
// with the TSC too. A later "clocksource=" in KernelArgs overrides it.
const clockArgs = "clocksource=tsc tsc=reliable"

// ErrTimeout is returned when the guest did not finish in time.
var ErrTimeout = errors.New("testbed: the guest did not finish within its timeout and was killed")

// GuestError is a failure of the bed itself (not of the command).
type GuestError struct {
	Msg     string
	Console string // the tail of the guest console
}

func (e *GuestError) Error() string {
	s := "testbed: " + e.Msg
	if e.Console != "" {
		s += "\n--- guest console (last lines) ---\n" + e.Console + "\n---"
	}
	return s
}

// Run boots img, runs the command and returns its exit code. The error is
// non-nil when the bed itself failed (setup, timeout, crash).
func Run(ctx context.Context, img *Image, o RunOptions) (int, error) {
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Log == nil {
		o.Log = os.Stderr
	}
	if o.MemoryMiB == 0 {
		o.MemoryMiB = 6144
	}
	if o.CPUs == 0 {
		o.CPUs = 2
	}
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Minute
	}
	if o.Share == "" {
		wd, err := os.Getwd()
		if err != nil {
			return 0, err
		}
		o.Share = wd
	}
	share, err := filepath.Abs(o.Share)
	if err != nil {
		return 0, err
	}
	if fi, err := os.Stat(share); err != nil || !fi.IsDir() {
		return 0, fmt.Errorf("testbed: the share %s is not a directory", share)
	}
	if !o.Shell && len(o.Args) == 0 {
		return 0, errors.New("testbed: no command to run (testbed run -- CMD [ARGS...])")
	}
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return 0, errors.New("testbed: qemu-system-x86_64 not found: run 'testbed build' (it installs qemu-system-x86) or apt-get install qemu-system-x86")
	}
	if o.Accel == nil {
		a := ProbeAccel(ctx, img, o.Log)
		o.Accel = &a
	}
	runs := filepath.Join(filepath.Dir(img.Dir), "runs")
	if err := os.MkdirAll(runs, 0o755); err != nil {
		return 0, err
	}
	ctl, err := os.MkdirTemp(runs, "run-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(ctl)
	mode := "run"
	if o.Shell {
		mode = "shell"
	}
	if err := os.WriteFile(filepath.Join(ctl, "mode"), []byte(mode+"\n"), 0o644); err != nil {
		return 0, err
	}
	if err := os.WriteFile(filepath.Join(ctl, "cmd.sh"), []byte(commandScript(o.Args, o.Env, share)), 0o644); err != nil {
		return 0, err
	}
	console := filepath.Join(ctl, "console.log")
	args := append(o.Accel.qemuArgs(),
		"-smp", strconv.Itoa(o.CPUs), "-m", strconv.Itoa(o.MemoryMiB),
		"-nic", "none", "-no-reboot",
		"-kernel", img.Kernel, "-initrd", img.Initrd,
		"-append", strings.TrimSpace("root=/dev/vda rw console=ttyS0 loglevel=4 panic=-1 nokaslr "+clockArgs+" "+o.KernelArgs),
		"-drive", "file="+img.Root+",if=virtio,format=raw,snapshot=on,cache=unsafe",
		"-device", "virtio-rng-pci",
		"-virtfs", "local,path="+ctl+",mount_tag=ctl,security_model=none,id=ctl",
		"-virtfs", "local,path="+share+",mount_tag=share,security_model=none,id=share",
	)
	if o.Shell {
		args = append(args, "-nographic")
	} else {
		args = append(args, "-display", "none", "-monitor", "none", "-serial", "file:"+console)
	}
	rctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	cmd := exec.Command(qemu, args...)
	var qerr bytes.Buffer
	if o.Shell {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	} else {
		cmd.Stdout, cmd.Stderr = &qerr, &qerr
	}
	start := time.Now()
	fmt.Fprintf(o.Log, "[testbed] booting the guest (%s, %d vCPUs, %d MiB; timeout %s); /share = %s\n", o.Accel.Short(), o.CPUs, o.MemoryMiB, o.Timeout, share)
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("testbed: starting qemu: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	out := filepath.Join(ctl, "output")
	var off int64
	pump := func() {
		f, err := os.Open(out)
		if err != nil {
			return
		}
		defer f.Close()
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return
		}
		n, _ := io.Copy(o.Stdout, f)
		off += n
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var waitErr error
	timedOut := false
loop:
	for {
		select {
		case waitErr = <-done:
			break loop
		case <-tick.C:
			pump()
		case <-rctx.Done():
			timedOut = ctx.Err() == nil
			cmd.Process.Kill()
			waitErr = <-done
			break loop
		}
	}
	pump()
	elapsed := time.Since(start).Round(100 * time.Millisecond)
	consoleTail := func() string {
		data, _ := os.ReadFile(console)
		return tail(strings.ReplaceAll(string(data), "\r", ""), 40)
	}
	if timedOut {
		return 124, &GuestError{Msg: fmt.Sprintf("the guest did not finish within %s and was killed (raise -timeout if the command needs longer)", o.Timeout), Console: consoleTail()}
	}
	if err := ctx.Err(); err != nil {
		return 130, fmt.Errorf("testbed: interrupted: %w", err)
	}
	code, rerr := readExitCode(filepath.Join(ctl, "exitcode"))
	setup, _ := os.ReadFile(filepath.Join(ctl, "setup.log"))
	if rerr != nil {
		msg := "the guest stopped without reporting an exit code (a kernel panic or a crash)"
		if waitErr != nil {
			msg += fmt.Sprintf("; qemu: %v %s", waitErr, strings.TrimSpace(qerr.String()))
		}
		return 1, &GuestError{Msg: msg, Console: consoleTail()}
	}
	if code == 125 && bytes.Contains(setup, []byte("setup failed")) {
		return code, &GuestError{Msg: "the guest's setup failed (RDMA or knfsd):\n" + tail(string(setup), 25), Console: consoleTail()}
	}
	fmt.Fprintf(o.Log, "[testbed] guest finished in %s: exit code %d\n", elapsed, code)
	return code, nil
}

func readExitCode(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(data)))
}

// commandScript is the guest's /ctl/cmd.sh: it checks that the command
// exists, then execs it in /share with the given environment.
func commandScript(args, env []string, share string) string {
	var b strings.Builder
	b.WriteString("# written by testbed run\n")
	for _, e := range env {
		b.WriteString("export " + shellQuote(e) + "\n")
	}
	if len(args) == 0 {
		return b.String()
	}
	fmt.Fprintf(&b, "if ! command -v %s >/dev/null 2>&1; then\n", shellQuote(args[0]))
	fmt.Fprintf(&b, "  echo %s >&2\n  exit 127\nfi\n", shellQuote(fmt.Sprintf("testbed: %s: no such command in the guest (the working directory /share is the host's %s)", args[0], share)))
	b.WriteString("exec")
	for _, a := range args {
		b.WriteString(" " + shellQuote(a))
	}
	b.WriteString("\n")
	return b.String()
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
