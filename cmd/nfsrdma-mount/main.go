// Command nfsrdma-mount mounts an NFSv3 export over RPC-over-RDMA (or TCP) as
// a FUSE file system, and is mount(8)'s helper for type nfsrdma when
// installed as /sbin/mount.nfsrdma:
//
//	nfsrdma-mount [-f] [-v] [-o options] server:/export /mountpoint
//	nfsrdma-mount -u [-l] /mountpoint
//	nfsrdma-mount stats [-json] [-i SECONDS [-c COUNT]] [/mountpoint...]
//	nfsrdma-mount --version
//	mount -t nfsrdma -o options server:/export /mountpoint
//
// Without -f the command returns once the mount is live (or fails with the
// reason; with bg, once the first attempt failed) and a background server,
// the same program re-executed with -f, serves it; SIGINT or SIGTERM to it,
// "nfsrdma-mount -u" or umount(8) unmount it. "stats" prints its
// counters in the format of /proc/self/mountstats (which mountstats(8) and
// nfsiostat(8) read), fetched through its control socket. Installed as
// mount.fuse.nfsrdma and umount.fuse.nfsrdma too, it serves mount(8) and
// umount(8) for the type the kernel shows, fuse.nfsrdma. The manual page is
// doc/nfsrdma-mount.8.
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
	"sync"
	"sync/atomic"
	"syscall"
)

// Exit codes, as mount(8) reads them from a helper.
const (
	exitOK       = 0
	exitUsage    = 1  // incorrect invocation or options
	exitMountErr = 32 // mount failure
)

func main() {
	if os.Getenv("PATH") == "" {
		// mount(8) may run its helpers without a PATH; fusermount (and
		// go-fuse, which runs it) must still be found.
		os.Setenv("PATH", standardPath)
	}
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
	case cmdVersion:
		fmt.Fprintf(stdout, "nfsrdma-mount %s\n", versionString())
		return exitOK
	case cmdStats:
		return statsCommand(name, inv, stdout, stderr)
	case cmdUnmount:
		if err := unmountDir(inv.dir, inv.lazy, inv.force); err != nil {
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
		if opts.Remount {
			return exitOK
		}
		if err := checkMountPoint(inv.dir); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return exitMountErr
		}
		return exitOK
	case opts.Remount:
		if err := remount(inv, opts); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return exitMountErr
		}
		return exitOK
	case inv.foreground || inv.readyFD > 0:
		return serve(name, inv, opts, stderr)
	}
	if _, err := daemonize(inv, stderr); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitMountErr
	}
	return exitOK
}

// serve mounts and serves until unmounted. As the background server (with a
// readiness fd) it reports "ready", "bg: ..." or the error there, and then
// lets go of its stderr (see daemonize).
func serve(name string, inv *invocation, opts *mountOptions, stderr io.Writer) int {
	level := slog.LevelWarn
	if inv.verbose {
		level = slog.LevelDebug
	}
	sw := newSwitchHandler(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	log := slog.New(sw)
	background := inv.readyFD > 0
	var ready *os.File
	var later slog.Handler // the log once detached
	if background {
		// Nothing this server writes may kill it once its caller's
		// pipe is gone.
		signal.Ignore(syscall.SIGPIPE)
		ready = os.NewFile(uintptr(inv.readyFD), "ready")
		var warning string
		later, warning = backgroundLog(opts.LogFile, level)
		if warning != "" {
			fmt.Fprintf(stderr, "%s: warning: %s\n", name, warning)
		}
	} else if opts.LogFile != "" {
		if h, warning := backgroundLog(opts.LogFile, level); warning != "" {
			fmt.Fprintf(stderr, "%s: warning: %s\n", name, warning)
		} else {
			sw.set(h)
		}
	}
	var detached atomic.Bool
	var detachOnce sync.Once
	// detach reports to the mount command and stops writing where it
	// reads: the log goes to syslog or the log file from then on.
	detach := func(report string) {
		detachOnce.Do(func() {
			if ready == nil {
				return
			}
			sw.set(later)
			if err := detachOutput(); err != nil {
				log.Warn("detaching from the terminal", "err", err)
			}
			detached.Store(true)
			io.WriteString(ready, strings.ReplaceAll(report, "\n", " ")+"\n")
			ready.Close()
		})
	}
	// fail reports a failed mount: to the mount command, which prints it,
	// or on stderr in the foreground, or to the log once detached (bg).
	fail := func(err error) {
		switch {
		case detached.Load():
			log.Error("mount failed", "spec", inv.spec, "dir", inv.dir, "err", err)
		case background:
			detach(errPrefix + err.Error())
		default:
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
		}
	}
	host, export, _ := splitSpec(inv.spec)
	dir, err := canonicalDir(inv.dir)
	if err != nil {
		fail(err)
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
	if inv.lifelineFD > 0 {
		lifeline := os.NewFile(uintptr(inv.lifelineFD), "lifeline")
		go func() {
			// End of file: the mount command exited (Ctrl-C, killed).
			// Before the report that ends its wait, that abandons the
			// mount; after it, nothing.
			io.Copy(io.Discard, lifeline)
			lifeline.Close()
			if !detached.Load() {
				log.Warn("the mount command went away: giving up the mount", "dir", dir)
				cancel()
			}
		}()
	}
	if opts.Background && background {
		m.onRetry = func(err error) { detach(bgPrefix + err.Error()) }
	}
	if err := m.mount(ctx); err != nil {
		if errors.Is(err, context.Canceled) {
			err = fmt.Errorf("%w: %w", ErrCancelled, err)
		}
		fail(err)
		return exitMountErr
	}
	cancel()
	detach(readyLine)
	log.Info("mounted", "spec", inv.spec, "dir", dir, "opts", opts.String())
	go func() {
		if _, ok := <-sigc; ok {
			log.Info("signal: unmounting", "dir", dir)
			m.unmountForSignal()
		}
	}()
	m.fuse.Wait()
	log.Info("unmounted", "dir", dir)
	m.release()
	return exitOK
}
