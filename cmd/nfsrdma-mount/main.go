// Command nfsrdma-mount mounts an NFSv3 export over RPC-over-RDMA (or TCP) as
// a FUSE file system, and is mount(8)'s helper for type nfsrdma when
// installed as /sbin/mount.nfsrdma:
//
//	nfsrdma-mount [-f] [-v] [-o options] server:/export /mountpoint
//	nfsrdma-mount -u /mountpoint
//	nfsrdma-mount stats /mountpoint
//	mount -t nfsrdma -o options server:/export /mountpoint
//
// Without -f the command returns once the mount is live (or fails with the
// reason) and a background server, the same program re-executed with -f,
// serves it; SIGINT or SIGTERM to it, "nfsrdma-mount -u" or umount(8)
// unmount it. "stats" prints its transport counters and per-operation
// counts and round-trip times, fetched through its control socket.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Exit codes, as mount(8) reads them from a helper.
const (
	exitOK       = 0
	exitUsage    = 1  // incorrect invocation or options
	exitMountErr = 32 // mount failure
)

func main() {
	os.Exit(run(os.Args[0], os.Args[1:], os.Stdout, os.Stderr))
}

func run(argv0 string, args []string, stdout, stderr io.Writer) int {
	name := filepath.Base(argv0)
	inv, err := parseArgs(argv0, args)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n\n%s\n", name, err, usage)
		return exitUsage
	}
	switch inv.cmd {
	case cmdHelp:
		fmt.Fprintln(stdout, usage)
		return exitOK
	case cmdStats:
		text, err := controlRequest(inv.dir, "stats", 10*time.Second)
		if err != nil {
			fmt.Fprintf(stderr, "%s: stats: %v\n", name, err)
			return exitMountErr
		}
		io.WriteString(stdout, text)
		return exitOK
	case cmdUnmount:
		if err := unmountDir(inv.dir); err != nil {
			fmt.Fprintf(stderr, "%s: unmount %s: %v\n", name, inv.dir, err)
			return exitMountErr
		}
		return exitOK
	}
	opts, err := parseOptions(inv.opts, inv.sloppy)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitUsage
	}
	switch {
	case inv.fake:
		// mount(8) -f: everything but the mount.
		if err := checkMountPoint(inv.dir); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return exitMountErr
		}
		return exitOK
	case inv.foreground || inv.readyFD > 0:
		return serve(name, inv, opts, stderr)
	}
	if err := daemonize(inv); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitMountErr
	}
	return exitOK
}

// serve mounts and serves until unmounted. With a readiness fd (the daemon
// child) it reports "ready" or the error there.
func serve(name string, inv *invocation, opts *mountOptions, stderr io.Writer) int {
	level := slog.LevelWarn
	if inv.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if inv.readyFD > 0 && !inv.verbose {
		// The background server: its stderr goes nowhere, so its warnings
		// go to the system log when there is one.
		if sl, err := newSyslogLogger("", "", "nfsrdma-mount", slog.LevelWarn); err == nil {
			log = sl
		}
	}
	var ready *os.File
	if inv.readyFD > 0 {
		ready = os.NewFile(uintptr(inv.readyFD), "ready")
	}
	report := func(err error) {
		if ready == nil {
			return
		}
		msg := "ready\n"
		if err != nil {
			msg = "error: " + strings.ReplaceAll(err.Error(), "\n", " ") + "\n"
		}
		io.WriteString(ready, msg)
		ready.Close()
		ready = nil
	}
	host, export, _ := splitSpec(inv.spec)
	dir, err := canonicalDir(inv.dir)
	if err != nil {
		report(err)
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitMountErr
	}
	m := &mountServer{inv: inv, opts: opts, host: host, export: export, dir: dir, log: log}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigc)
	go func() {
		// A signal during the mount abandons it.
		select {
		case <-sigc:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := m.mount(ctx); err != nil {
		report(err)
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitMountErr
	}
	cancel()
	log.Info("mounted", "spec", inv.spec, "dir", dir, "opts", opts.String())
	report(nil)
	go func() {
		if _, ok := <-sigc; ok {
			log.Info("signal: unmounting", "dir", dir)
			m.unmountForSignal()
		}
	}()
	m.fuse.Wait()
	m.release()
	log.Info("unmounted", "dir", dir)
	return exitOK
}

// unmountDir asks dir's server to unmount and waits for it to finish; with
// no server answering it unmounts directly (umount2, or fusermount -u when
// not root).
func unmountDir(dir string) error {
	reply, err := controlRequest(dir, "unmount", time.Minute)
	var nse *NoServerError
	if errors.As(err, &nse) {
		return unmountDirect(dir)
	}
	if err != nil {
		return err
	}
	if msg, ok := strings.CutPrefix(strings.TrimSpace(reply), "error: "); ok {
		return errors.New(msg)
	}
	// The server removes its socket last, once it has let go of everything.
	path, _ := socketPath(dir)
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return nil
		}
	}
	return fmt.Errorf("unmounted, but the server has not exited (socket %s remains)", path)
}

func unmountDirect(dir string) error {
	c, err := canonicalDir(dir)
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		for _, name := range []string{"fusermount3", "fusermount"} {
			if path, err := lookPath(name); err == nil {
				out, err := runCommand(path, "-u", c)
				if err != nil {
					return fmt.Errorf("%s -u: %v: %s", name, err, strings.TrimSpace(out))
				}
				return nil
			}
		}
		return errors.New("no server answers, and without root neither fusermount3 nor fusermount is installed")
	}
	switch err := syscall.Unmount(c, 0); {
	case errors.Is(err, syscall.EINVAL):
		return fmt.Errorf("%s: %w", c, errNotMounted)
	case err != nil:
		return err
	}
	return nil
}
