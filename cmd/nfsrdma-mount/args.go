package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// The commands.
const (
	cmdMount   = "mount"
	cmdUnmount = "unmount"
	cmdStats   = "stats"
	cmdHelp    = "help"
)

// helperName is the name mount(8) runs for "-t nfsrdma".
const helperName = "mount.nfsrdma"

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
}

const usage = `usage:
  nfsrdma-mount [-f] [-v] [-o options] server:/export /mountpoint
  nfsrdma-mount -u /mountpoint
  nfsrdma-mount stats /mountpoint
  mount.nfsrdma server:/export /mountpoint [-sfnv] [-o options]   (as mount(8)'s helper)

Mounts an NFSv3 export over RPC-over-RDMA (or TCP) as a FUSE file system.
Without -f it returns once the mount is live and keeps serving it in the
background; SIGINT or SIGTERM to that server, nfsrdma-mount -u or umount(8)
unmount it. The background server logs its warnings to syslog; with -v it
logs everything, debug included, to the terminal. Options are nfs(5)'s: vers=3, proto=rdma|tcp, port, mountport,
mountproto=tcp, rsize, wsize, timeo, retrans, hard, soft, retry, ac, noac,
actimeo, acregmin, acregmax, acdirmin, acdirmax, ro, rw, sync, uid, gid
(the AUTH_SYS identity), suid, nosuid, dev, nodev, exec, noexec; what
mount(8) adds for itself (_netdev, nofail, auto, user, defaults, x-*...) is
ignored.`

// UsageError is a command line that cannot be understood.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// parseArgs parses the arguments after argv[0]; argv0's base name chooses
// between the nfsrdma-mount and the mount.nfsrdma syntax.
func parseArgs(argv0 string, args []string) (*invocation, error) {
	inv := &invocation{cmd: cmdMount, helper: filepath.Base(argv0) == helperName}
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
		case strings.HasPrefix(a, "--ready-fd="):
			fd, err := strconv.Atoi(strings.TrimPrefix(a, "--ready-fd="))
			if err != nil || fd < 3 {
				return nil, bad("bad %s", a)
			}
			inv.readyFD = fd
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
			case 'n':
				// mount(8)'s "no /etc/mtab": there is none to write.
			case 'f':
				if inv.helper {
					inv.fake = true
				} else {
					inv.foreground = true
				}
			case 'u':
				if inv.helper {
					return nil, bad("unknown flag -u")
				}
				inv.cmd = cmdUnmount
			default:
				return nil, bad("unknown flag -%c", c)
			}
		}
	}
	inv.opts = strings.Join(opts, ",")
	if !inv.helper && inv.cmd == cmdMount && len(pos) > 0 && pos[0] == cmdStats {
		inv.cmd = cmdStats
		pos = pos[1:]
	}
	switch inv.cmd {
	case cmdUnmount, cmdStats:
		if len(pos) != 1 {
			return nil, bad("%s needs one mount point", inv.cmd)
		}
		inv.dir = pos[0]
	case cmdMount:
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

var errNotMounted = errors.New("not mounted")
