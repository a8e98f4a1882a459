package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The commands.
const (
	cmdMount   = "mount"
	cmdUnmount = "unmount"
	cmdStats   = "stats"
	cmdHelp    = "help"
	cmdVersion = "version"
)

// The names mount(8) and umount(8) run this program by: mount.nfsrdma for
// type nfsrdma, mount.fuse.nfsrdma for fuse.nfsrdma (the type the kernel
// shows), umount.* for the unmount of either.
var (
	mountHelpers   = map[string]bool{"mount.nfsrdma": true, "mount.fuse.nfsrdma": true}
	unmountHelpers = map[string]bool{"umount.nfsrdma": true, "umount.fuse.nfsrdma": true}
)

// invocation is a parsed command line.
type invocation struct {
	cmd        string
	helper     bool   // run as mount.nfsrdma by mount(8)
	foreground bool   // serve in this process (nfsrdma-mount -f)
	fake       bool   // do everything but mount (mount.nfsrdma -f)
	verbose    bool   // -v
	sloppy     bool   // -s: ignore unknown options
	opts       string // -o, all of them joined
	spec       string // server:/export
	dir        string // the mount point, or the argument of -u and stats
	readyFD    int    // the daemon child's readiness pipe; 0: none
	lifelineFD int    // the daemon child's lifeline; 0: none

	lazy, force bool // umount(8)'s -l and -f (umount helper, -u)

	// stats
	dirs     []string      // mount points; none: all nfsrdma mounts
	json     bool          // -json
	interval time.Duration // -i SECONDS; 0: once
	count    int           // -c N reports; 0: until interrupted

	faultAction string // fault: what to inject (test-only hook, fault.go)
}

const usageHead = `usage:
  nfsrdma-mount [-f] [-v] [-o options] server:/export /mountpoint
  nfsrdma-mount -o remount,options /mountpoint
  nfsrdma-mount -u [-l] /mountpoint
  nfsrdma-mount stats [-json] [-i SECONDS [-c COUNT]] [/mountpoint...]
  nfsrdma-mount --version
  mount.nfsrdma server:/export /mountpoint [-sfnv] [-o options]   (as mount(8)'s helper)

Mounts an NFSv3 export over RPC-over-RDMA (or TCP) as a FUSE file system.
Without -f it returns once the mount is live and keeps serving it in the
background; SIGINT or SIGTERM to that server, nfsrdma-mount -u or umount(8)
unmount it. The background server logs to syslog (or -o logfile=PATH); -v
logs debug too, and with -f it stays in the foreground, logging to the
terminal. stats prints the /proc/self/mountstats format (of every nfsrdma
mount without a mount point), -json as JSON, -i every SECONDS in the manner
of nfsiostat.`

// usage is the help text; its options come from optionTable.
var usage = func() string {
	options, ignored := optionUsage()
	return usageHead + "\n\nOptions (nfs(5)'s, and this client's inline and defersetattr; see\nnfsrdma-mount(8)):\n" +
		wrapList(options, 76) + "\n\nAccepted and ignored:\n" + wrapList(ignored, 76)
}()

// UsageError is a command line that cannot be understood.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// parseArgs parses the arguments after argv[0]; argv0's base name chooses
// between the nfsrdma-mount and the mount.nfsrdma syntax.
func parseArgs(argv0 string, args []string) (*invocation, error) {
	base := filepath.Base(argv0)
	inv := &invocation{cmd: cmdMount, helper: mountHelpers[base]}
	umountHelper := unmountHelpers[base]
	if umountHelper {
		inv.cmd = cmdUnmount
	}
	var pos []string
	var opts []string
	bad := func(format string, a ...any) error { return &UsageError{Msg: fmt.Sprintf(format, a...)} }
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			pos = append(pos, args[i+1:]...)
			i = len(args)
			continue
		case a == "-h" || a == "--help":
			inv.cmd = cmdHelp
			return inv, nil
		case a == "-V" || a == "--version":
			inv.cmd = cmdVersion
			return inv, nil
		case strings.HasPrefix(a, "--ready-fd=") || strings.HasPrefix(a, "--lifeline-fd="):
			name, v, _ := strings.Cut(a, "=")
			fd, err := strconv.Atoi(v)
			if err != nil || fd < 3 {
				return nil, bad("bad %s", a)
			}
			if name == "--ready-fd" {
				inv.readyFD = fd
			} else {
				inv.lifelineFD = fd
			}
			continue
		case inv.cmd == cmdStats && (a == "-json" || a == "--json"):
			inv.json = true
			continue
		case inv.cmd == cmdStats && (a == "-i" || a == "-c"):
			if i+1 >= len(args) {
				return nil, bad("%s needs a number", a)
			}
			i++
			n, err := strconv.ParseFloat(args[i], 64)
			if err != nil || n <= 0 || (a == "-c" && n != float64(int(n))) {
				return nil, bad("%s %s: want a positive number", a, args[i])
			}
			if a == "-i" {
				inv.interval = time.Duration(n * float64(time.Second))
			} else {
				inv.count = int(n)
			}
			continue
		case !inv.helper && !umountHelper && inv.cmd == cmdMount && len(pos) == 0 && a == cmdStats:
			inv.cmd = cmdStats
			continue
		case strings.HasPrefix(a, "--"):
			return nil, bad("unknown flag %s", a)
		case !strings.HasPrefix(a, "-") || a == "-":
			pos = append(pos, a)
			continue
		}
		// One or more single-letter flags; o, t and N take a value (the rest
		// of the argument or the next one).
		for j := 1; j < len(a); j++ {
			c := a[j]
			switch c {
			case 'o', 't', 'N':
				val := a[j+1:]
				if val == "" {
					if i+1 >= len(args) {
						return nil, bad("-%c needs a value", c)
					}
					i++
					val = args[i]
				}
				switch c {
				case 'o':
					opts = append(opts, val)
				case 't':
					if t := strings.TrimPrefix(val, "fuse."); t != "nfsrdma" {
						return nil, bad("-t %s: this helper mounts type nfsrdma", val)
					}
				case 'N':
					return nil, bad("-N (mount namespaces) is not supported")
				}
				j = len(a)
			case 'v':
				inv.verbose = true
			case 's':
				inv.sloppy = true
			case 'n', 'r', 'i':
				// mount(8)'s "no /etc/mtab" (there is none to write);
				// umount(8)'s -r (remount ro on failure: not done) and -i.
				if c != 'n' && !umountHelper {
					return nil, bad("unknown flag -%c", c)
				}
			case 'l':
				if !umountHelper && inv.cmd != cmdUnmount {
					return nil, bad("unknown flag -l")
				}
				inv.lazy = true
			case 'f':
				switch {
				case umountHelper || inv.cmd == cmdUnmount:
					inv.force = true
				case inv.helper:
					inv.fake = true
				default:
					inv.foreground = true
				}
			case 'u':
				if inv.helper || umountHelper {
					return nil, bad("unknown flag -u")
				}
				inv.cmd = cmdUnmount
			default:
				return nil, bad("unknown flag -%c", c)
			}
		}
	}
	inv.opts = strings.Join(opts, ",")
	if !inv.helper && !umountHelper && inv.cmd == cmdMount && len(pos) > 0 && pos[0] == cmdStats {
		inv.cmd = cmdStats
		pos = pos[1:]
	}
	if !inv.helper && !umountHelper && inv.cmd == cmdMount && len(pos) == 3 && pos[0] == cmdFault {
		// The test-only fault hook (fault.go): not in the usage.
		inv.cmd, inv.faultAction, inv.dir = cmdFault, pos[1], pos[2]
		return inv, nil
	}
	switch inv.cmd {
	case cmdStats:
		inv.dirs = pos
		if inv.count > 0 && inv.interval == 0 {
			return nil, bad("-c needs -i")
		}
	case cmdUnmount:
		if len(pos) != 1 {
			return nil, bad("%s needs one mount point", inv.cmd)
		}
		inv.dir = pos[0]
	case cmdMount:
		if len(pos) == 1 && remountAsked(inv.opts) {
			// nfsrdma-mount -o remount,... /mountpoint, as mount(8)
			// takes it: the mount point names the mount.
			inv.dir = pos[0]
			break
		}
		if len(pos) != 2 {
			return nil, bad("need server:/export and a mount point")
		}
		inv.spec, inv.dir = pos[0], pos[1]
		if _, _, err := splitSpec(inv.spec); err != nil {
			return nil, err
		}
	}
	return inv, nil
}

// remountAsked reports whether the -o string has remount.
func remountAsked(opts string) bool {
	for _, o := range strings.Split(opts, ",") {
		if strings.TrimSpace(o) == "remount" {
			return true
		}
	}
	return false
}

// splitSpec splits "server:/export" ("[v6addr]:/export" for an IPv6
// address).
func splitSpec(spec string) (host, export string, err error) {
	bad := &UsageError{Msg: fmt.Sprintf("%q: want server:/export", spec)}
	if strings.HasPrefix(spec, "[") {
		end := strings.Index(spec, "]:")
		if end < 0 {
			return "", "", bad
		}
		host, export = spec[1:end], spec[end+2:]
	} else {
		var ok bool
		host, export, ok = strings.Cut(spec, ":")
		if !ok {
			return "", "", bad
		}
	}
	if host == "" || !strings.HasPrefix(export, "/") || strings.ContainsAny(host, "/ ") {
		return "", "", bad
	}
	return host, export, nil
}
