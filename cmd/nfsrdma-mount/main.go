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
	case cmdFault:
		return faultCommand(name, inv, stdout, stderr)
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
	if opts.Proto == "rdma" && !rdmaBuiltIn && !opts.Remount && !inv.fake {
		// Before anything else: no later step can make this work.
		fmt.Fprintf(stderr, "%s: %v\n", name, errNoRDMABuild)
		return exitMountErr
	}
	if !opts.Remount {
		// Before the server is asked anything: a refusal of this
		// machine's configuration.
		if _, err := allowOther(opts, os.Geteuid()); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return exitMountErr
		}
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
	// Every record of the mount names its mount point: several mounts'
	// servers log to the same system log.
	dir, dirErr := canonicalDir(inv.dir)
	if dirErr != nil {
		dir = inv.dir
	}
	log := slog.New(sw).With("mountpoint", dir)
	// The server daemonize started (it has a lifeline) reports on its
	// readiness pipe and then detaches from its caller. A readiness pipe
	// alone (a supervisor that keeps the server's output) only reports.
	background := inv.lifelineFD > 0 && inv.readyFD > 0
	var ready *os.File
	if inv.readyFD > 0 {
		ready = os.NewFile(uintptr(inv.readyFD), "ready")
	}
	var later slog.Handler // the log once detached
	var laterFile *logFile // and where the output goes, when a file
	var file *logFile      // logfile=, reopened on SIGHUP
	if background {
		// Nothing this server writes may kill it once its caller's
		// pipe is gone.
		signal.Ignore(syscall.SIGPIPE)
		var warning string
		later, laterFile, warning = backgroundLog(opts.LogFile, level)
		file = laterFile
		if warning != "" {
			fmt.Fprintf(stderr, "%s: warning: %s\n", name, warning)
		}
	} else if opts.LogFile != "" {
		if h, f, warning := backgroundLog(opts.LogFile, level); warning != "" {
			fmt.Fprintf(stderr, "%s: warning: %s\n", name, warning)
		} else {
			sw.set(h)
			file = f
		}
	}
	if file != nil {
		// SIGHUP reopens the log file (logrotate's postrotate).
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		done := make(chan struct{})
		defer func() {
			signal.Stop(hup)
			close(done)
		}()
		go func() {
			for {
				select {
				case <-hup:
					if err := file.reopen(); err != nil {
						log.Warn("reopening the log file", "file", file.path, "err", err)
					}
				case <-done:
					return
				}
			}
		}()
	}
	var detached atomic.Bool
	var reportOnce sync.Once
	// report tells the mount command (or supervisor) how the mount went.
	// The background server then stops writing where its caller reads:
	// its log goes to syslog or the log file, its output (a panic's, a
	// SIGQUIT's goroutines) to the log file or /dev/null.
	report := func(line string) {
		reportOnce.Do(func() {
			if ready == nil {
				return
			}
			if background {
				sw.set(later)
				var err error
				if laterFile != nil {
					err = laterFile.detachOutput()
				} else {
					err = detachOutput(nil)
				}
				if err != nil {
					log.Warn("detaching from the terminal", "err", err)
				}
				detached.Store(true)
			}
			io.WriteString(ready, strings.ReplaceAll(line, "\n", " ")+"\n")
			ready.Close()
		})
	}
	// fail reports a failed mount: to the mount command, which prints it
	// (a supervisor gets it on stderr too), or on stderr in the
	// foreground, or to the log once detached (bg).
	fail := func(err error) {
		switch {
		case detached.Load():
			log.Error("mount failed", "spec", inv.spec, "err", err)
		case background:
			report(errPrefix + err.Error())
		default:
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			report(errPrefix + err.Error())
		}
	}
	host, export, _ := splitSpec(inv.spec)
	if dirErr != nil {
		fail(dirErr)
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
				log.Warn("the mount command went away: giving up the mount")
				cancel()
			}
		}()
	}
	if opts.Background && background {
		m.onRetry = func(err error) { report(bgPrefix + err.Error()) }
	}
	if err := m.mount(ctx); err != nil {
		if errors.Is(err, context.Canceled) {
			err = fmt.Errorf("%w: %w", ErrCancelled, err)
		}
		fail(err)
		return exitMountErr
	}
	cancel()
	report(readyLine)
	if inv.lifelineFD == 0 {
		// The foreground server a service manager started (-f): tell it
		// the mount is up (systemd's Type=notify).
		if err := sdNotify("READY=1\nSTATUS=mounted " + inv.spec + " on " + dir); err != nil {
			log.Warn("telling the service manager the mount is up", "err", err)
		}
	}
	log.Info("mounted", "spec", inv.spec, "opts", opts.String())
	go func() {
		if _, ok := <-sigc; ok {
			log.Info("signal: unmounting")
			m.unmountForSignal()
		}
	}()
	stopProfile := startProfile(log)
	m.fuse.Wait()
	if inv.lifelineFD == 0 {
		sdNotify("STOPPING=1")
	}
	stopProfile()
	log.Info("unmounted")
	m.release()
	return exitOK
}
