package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// daemonize mounts in a background server: this program again, with -f and
// a readiness pipe, in its own session, in "/" (so that it holds no
// directory busy). It returns once the server reports the mount live, or
// with the error the server reports.
func daemonize(inv *invocation) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := canonicalDir(inv.dir)
	if err != nil {
		return err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	args := []string{"-f", "--ready-fd=3"}
	if inv.verbose {
		args = append(args, "-v")
	}
	if inv.sloppy {
		args = append(args, "-s")
	}
	if inv.opts != "" {
		args = append(args, "-o", inv.opts)
	}
	args = append(args, "--", inv.spec, dir)
	cmd := exec.Command(exe, args...)
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if inv.verbose {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("starting the server: %w", err)
	}
	w.Close()
	line, rerr := bufio.NewReader(r).ReadString('\n')
	line = strings.TrimSpace(line)
	switch {
	case line == "ready":
		return cmd.Process.Release()
	case strings.HasPrefix(line, "error: "):
		cmd.Wait()
		return errors.New(strings.TrimPrefix(line, "error: "))
	}
	werr := cmd.Wait()
	if rerr != nil && rerr != io.EOF {
		return fmt.Errorf("the server's readiness pipe: %w", rerr)
	}
	return fmt.Errorf("the server exited before the mount was live (%v)", werr)
}

func lookPath(name string) (string, error) { return exec.LookPath(name) }

func runCommand(path string, args ...string) (string, error) {
	out, err := exec.Command(path, args...).CombinedOutput()
	return string(out), err
}
