//go:build integration

package integration

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The bed's commands (rpc.nfsd, rdma link, testbed-nfsd-restart) run in a
// child process, the runner, started by TestMain before any test opens a
// file. A command started from the test process itself can deadlock with
// a fault: its execve closes every close-on-exec descriptor it inherited,
// and each close of a file on a FUSE mount (as on the kernel's NFS mount)
// flushes that file's dirty data to the server, so while knfsd is stopped
// the child that is to start it again never finishes its exec (the hard
// mount waits for the server, the server for the child). The runner holds
// no such file, and neither do its children.

const runnerEnv = "NFSRDMA_BED_RUNNER"

type runnerRequest struct {
	Name string
	Args []string
}

type runnerReply struct {
	Pid  int    // the command started (sent first)
	Done bool   // the command ended (sent second)
	Err  string // its error, if any
	Out  string // its standard output and error
}

// runnerMain is the runner process: one JSON request per line on stdin,
// two JSON replies per request on stdout.
func runnerMain() int {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64<<10), 1<<20)
	enc := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var req runnerRequest
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			enc.Encode(runnerReply{Done: true, Err: "runner: " + err.Error()})
			continue
		}
		var out strings.Builder
		cmd := exec.Command(req.Name, req.Args...)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			enc.Encode(runnerReply{Done: true, Err: err.Error()})
			continue
		}
		enc.Encode(runnerReply{Pid: cmd.Process.Pid})
		rep := runnerReply{Done: true}
		if err := cmd.Wait(); err != nil {
			rep.Err = err.Error()
		}
		rep.Out = out.String()
		enc.Encode(rep)
	}
	return 0
}

var bedRunner struct {
	mu     sync.Mutex
	in     io.Writer
	out    *json.Decoder
	broken error // set when a command never ended: the runner is lost
}

// startRunner starts the runner; TestMain calls it before the tests run.
func startRunner() error {
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), runnerEnv+"=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("bed command runner: %w", err)
	}
	bedRunner.in, bedRunner.out = in, json.NewDecoder(out)
	return nil
}

// runBed runs a bed command through the runner. A command still running
// after timeout is reported with its kernel stack and killed; the runner
// is then given up (later commands fail at once).
func runBed(timeout time.Duration, name string, args ...string) error {
	bedRunner.mu.Lock()
	defer bedRunner.mu.Unlock()
	if bedRunner.broken != nil {
		return bedRunner.broken
	}
	if bedRunner.in == nil {
		return errors.New("bed command runner not started (TestMain starts it)")
	}
	line, _ := json.Marshal(runnerRequest{Name: name, Args: args})
	if _, err := bedRunner.in.Write(append(line, '\n')); err != nil {
		bedRunner.broken = fmt.Errorf("bed command runner: %w", err)
		return bedRunner.broken
	}
	replies := make(chan runnerReply, 2)
	go func() {
		for i := 0; i < 2; i++ {
			var r runnerReply
			if err := bedRunner.out.Decode(&r); err != nil {
				replies <- runnerReply{Done: true, Err: "bed command runner: " + err.Error()}
				return
			}
			replies <- r
			if r.Done {
				return
			}
		}
	}()
	deadline := time.After(timeout)
	pid := 0
	for {
		select {
		case r := <-replies:
			if !r.Done {
				pid = r.Pid
				continue
			}
			if r.Err != "" {
				return fmt.Errorf("%s %s: %s: %s", name, strings.Join(args, " "), r.Err, strings.TrimSpace(r.Out))
			}
			return nil
		case <-deadline:
			stack := "(not read)"
			if pid != 0 {
				stack = readStack(pid)
				syscall.Kill(pid, syscall.SIGKILL)
			}
			dmesg := blockedTasksLog()
			bedRunner.broken = fmt.Errorf("bed command runner lost: %s %s did not end", name, strings.Join(args, " "))
			return fmt.Errorf("%s %s: still running after %v; its kernel stack:\n%s\ndmesg:\n%s", name, strings.Join(args, " "), timeout, stack, dmesg)
		}
	}
}

// readStack reads a task's kernel stack, giving up after 5 s (the read
// waits for a task in the middle of an exec).
func readStack(pid int) string {
	ch := make(chan string, 1)
	go func() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stack", pid))
		if err != nil {
			ch <- err.Error()
			return
		}
		ch <- string(b)
	}()
	select {
	case s := <-ch:
		return s
	case <-time.After(5 * time.Second):
		return "(unreadable: the task is in the middle of an exec)"
	}
}

// blockedTasksLog writes every blocked task's kernel stack to the kernel
// log (sysrq w; the console shows it too) and returns the log's last
// 32 KiB, read directly: no command may be started from this process while
// a fault may make its exec wait (see runBed).
func blockedTasksLog() []byte {
	os.WriteFile("/proc/sysrq-trigger", []byte("w"), 0)
	dmesg := make([]byte, 1<<20)
	n, _ := unix.Klogctl(unix.SYSLOG_ACTION_READ_ALL, dmesg)
	dmesg = dmesg[:max(n, 0)]
	if len(dmesg) > 32<<10 {
		dmesg = dmesg[len(dmesg)-32<<10:]
	}
	return dmesg
}
