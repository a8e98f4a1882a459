package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nfsrdma/nfsrdma/fusefs"
	"github.com/nfsrdma/nfsrdma/rpcrdma"
)

// Ports of the NFS service (RFC 8267 §6 names 20049 for NFS over RDMA).
const (
	portRDMA = 20049
	portTCP  = 2049
)

// mountOptions is the -o string, with the nfs(5) meaning of each option.
type mountOptions struct {
	Proto     string // "rdma" or "tcp"
	Port      int    // the NFS service's port; 0 asks rpcbind (tcp only)
	MountPort int    // the MOUNT service's port; 0 asks rpcbind
	Rsize     uint32 // 0: the server's preference
	Wsize     uint32
	Timeo     time.Duration // before the first retransmission
	Retrans   int
	Hard      bool
	Retry     time.Duration // how long to keep trying to mount (retry=, minutes)
	RetrySet  bool          // retry= was given (bg changes the default)
	// Background (bg): when the first attempt to reach the server fails,
	// the command returns 0 and the server keeps trying in the background.
	Background bool
	IPv6       bool // proto=tcp6 or rdma6: the server's IPv6 address
	NConnect   int  // transports to the server, calls spread across them
	// Inline (inline=, bytes) is the RPC-over-RDMA inline size offered to
	// the server (RFC 8797); 0: the transport's default, 4096.
	Inline   int
	FS       fusefs.Options
	UID, GID *uint32 // the AUTH_SYS identity; nil: the caller's
	// MountFlags are the VFS flags of the FUSE mount (nosuid, nodev by
	// default as for every FUSE mount; suid, dev, noexec, noatime...
	// change them; user and users imply noexec, nosuid, nodev).
	MountFlags uintptr
	// Accepted nfs(5) options that this client honours in its own way
	// (see the man page): lookupcache, cto/nocto, resvport/noresvport,
	// local_lock, lock/nolock.
	LookupCache string // "all", "pos" or "none"
	NoCTO       bool
	NoResvPort  bool
	LocalLock   string // "none", "flock", "posix" or "all"
	NoLock      bool
	LogFile     string   // logfile=: the background server's log
	Remount     bool     // remount: change the VFS flags of a live mount
	Ignored     []string // options accepted and ignored (mount(8)'s own)
	canonical   []string // the options in effect, for display
}

// Limits of rsize and wsize: the RPC-over-RDMA transport's largest I/O
// buffer, and a page.
const (
	maxIOSize = 1 << 20
	minIOSize = 4096
)

// OptionError reports an -o option that is unknown, malformed or not
// supported.
type OptionError struct {
	Option string
	Reason string
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("mount option %q: %s", e.Option, e.Reason)
}

// ignoredOptions are what mount(8) and fstab pass that do not concern the
// NFS client.
var ignoredOptions = map[string]bool{
	"defaults": true, "_netdev": true, "nofail": true, "auto": true, "noauto": true,
	"nouser": true, "loud": true, "silent": true,
	"lazytime": true, "nolazytime": true,
	"intr": true, "nointr": true, "async": true, "sec=sys": true,
}

// fuseOptions are the FUSE mount's own options, which mount(8) passes back
// (from /proc/self/mountinfo) on a remount.
var fuseOptions = map[string]bool{
	"user_id": true, "group_id": true, "default_permissions": true, "allow_other": true,
	"max_read": true, "blksize": true, "fd": true, "rootmode": true, "fsname": true, "subtype": true,
}

// vfsFlags are the options that set or clear a VFS mount flag.
var vfsFlags = map[string]struct {
	bit uintptr
	set bool
}{
	"suid": {syscall.MS_NOSUID, false}, "nosuid": {syscall.MS_NOSUID, true},
	"dev": {syscall.MS_NODEV, false}, "nodev": {syscall.MS_NODEV, true},
	"exec": {syscall.MS_NOEXEC, false}, "noexec": {syscall.MS_NOEXEC, true},
	"atime": {syscall.MS_NOATIME, false}, "noatime": {syscall.MS_NOATIME, true},
	"diratime": {syscall.MS_NODIRATIME, false}, "nodiratime": {syscall.MS_NODIRATIME, true},
	"relatime": {syscall.MS_RELATIME, true}, "norelatime": {syscall.MS_RELATIME, false},
	"strictatime": {syscall.MS_STRICTATIME, true}, "nostrictatime": {syscall.MS_STRICTATIME, false},
}

// maxNConnect is nfs(5)'s limit of nconnect.
const maxNConnect = 16

// parseOptions parses a comma-separated -o string. With sloppy (mount -s),
// unknown options are ignored instead of refused.
func parseOptions(s string, sloppy bool) (*mountOptions, error) {
	o := &mountOptions{
		Proto:       "rdma",
		Port:        -1,
		Hard:        true,
		Timeo:       60 * time.Second,
		Retrans:     2,
		Retry:       2 * time.Minute,
		NConnect:    1,
		FS:          fusefs.DefaultOptions(),
		MountFlags:  syscall.MS_NOSUID | syscall.MS_NODEV,
		LookupCache: "all",
		LocalLock:   "none",
	}
	var noac bool
	var actimeo *time.Duration
	for _, opt := range strings.Split(s, ",") {
		// A remount's options (the mount's own, which mount(8) passes
		// back, FUSE's included) may come before "remount".
		if strings.TrimSpace(opt) == "remount" {
			o.Remount = true
		}
	}
	for _, opt := range strings.Split(s, ",") {
		opt = strings.TrimSpace(opt)
		if opt == "" {
			continue
		}
		name, val, hasVal := strings.Cut(opt, "=")
		bad := func(reason string) error { return &OptionError{Option: opt, Reason: reason} }
		num := func(lo, hi int64) (int64, error) {
			if !hasVal || val == "" {
				return 0, bad("needs a value")
			}
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil || n < lo || n > hi {
				return 0, bad(fmt.Sprintf("want a number in [%d, %d]", lo, hi))
			}
			return n, nil
		}
		seconds := func() (time.Duration, error) {
			n, err := num(0, 24*3600)
			return time.Duration(n) * time.Second, err
		}
		flag := func() error {
			if hasVal {
				return bad("takes no value")
			}
			return nil
		}
		var err error
		switch {
		case ignoredOptions[opt]:
			o.Ignored = append(o.Ignored, opt)
			continue
		case strings.HasPrefix(name, "x-") || name == "comment":
			o.Ignored = append(o.Ignored, opt)
			continue
		case fuseOptions[name] && o.Remount:
			o.Ignored = append(o.Ignored, opt)
			continue
		}
		if f, ok := vfsFlags[name]; ok {
			if err := flag(); err != nil {
				return nil, err
			}
			if f.set {
				o.MountFlags |= f.bit
			} else {
				o.MountFlags &^= f.bit
			}
			continue
		}
		switch name {
		case "vers", "nfsvers":
			if val != "3" {
				return nil, bad("only NFS version 3 is supported")
			}
		case "proto":
			switch val {
			case "rdma", "tcp":
				o.Proto, o.IPv6 = val, false
			case "rdma6", "tcp6":
				o.Proto, o.IPv6 = strings.TrimSuffix(val, "6"), true
			case "udp", "udp6":
				return nil, bad("supported protocols are rdma, rdma6, tcp and tcp6")
			default:
				return nil, bad("want rdma, rdma6, tcp or tcp6")
			}
		case "rdma":
			err = flag()
			o.Proto = "rdma"
		case "tcp":
			err = flag()
			o.Proto = "tcp"
		case "port":
			var n int64
			n, err = num(0, 65535)
			o.Port = int(n)
		case "mountport":
			var n int64
			n, err = num(0, 65535)
			o.MountPort = int(n)
		case "mountproto":
			if val != "tcp" && val != "tcp6" {
				return nil, bad("MOUNT goes over tcp only")
			}
		case "mountvers":
			if val != "3" {
				return nil, bad("only MOUNT version 3 is supported")
			}
		case "rsize", "wsize":
			var n int64
			n, err = num(1, math.MaxUint32)
			size := uint32(min(max(n, minIOSize), maxIOSize))
			size -= size % minIOSize
			if name == "rsize" {
				o.Rsize = size
			} else {
				o.Wsize = size
			}
		case "timeo":
			var n int64
			n, err = num(1, 6000) // deciseconds, at most 600 s
			o.Timeo = time.Duration(n) * 100 * time.Millisecond
		case "retrans":
			var n int64
			n, err = num(0, 100)
			o.Retrans = int(n)
		case "retry":
			var n int64
			n, err = num(0, 10000) // minutes
			o.Retry = time.Duration(n) * time.Minute
			o.RetrySet = true
		case "bg":
			err = flag()
			o.Background = true
		case "fg":
			err = flag()
			o.Background = false
		case "nconnect":
			var n int64
			n, err = num(1, maxNConnect)
			o.NConnect = int(n)
		case "inline":
			var n int64
			n, err = num(1024, rpcrdma.MaxInlineSize)
			o.Inline = int(n)
		case "lookupcache":
			switch val {
			case "all", "none":
				o.LookupCache = val
			case "pos", "positive":
				o.LookupCache = "pos"
			default:
				return nil, bad("want all, none or pos")
			}
		case "cto", "nocto":
			err = flag()
			o.NoCTO = name == "nocto"
		case "defersetattr", "nodefersetattr":
			// Not nfs(5)'s: fusefs.Options.DeferSetattr (see the man page).
			err = flag()
			o.FS.DeferSetattr = name == "defersetattr"
		case "resvport", "noresvport":
			err = flag()
			o.NoResvPort = name == "noresvport"
		case "local_lock":
			switch val {
			case "none", "flock", "posix", "all":
				o.LocalLock = val
			default:
				return nil, bad("want none, flock, posix or all")
			}
		case "lock", "nolock":
			err = flag()
			o.NoLock = name == "nolock"
		case "user", "users", "owner", "group":
			// mount(8)'s: who may mount (user=NAME is what it records).
			// user and users imply noexec, nosuid and nodev, which a
			// later exec, suid or dev overrides.
			if name == "user" || name == "users" {
				o.MountFlags |= syscall.MS_NOEXEC | syscall.MS_NOSUID | syscall.MS_NODEV
			}
			o.Ignored = append(o.Ignored, opt)
		case "logfile":
			if !hasVal || !strings.HasPrefix(val, "/") {
				return nil, bad("want an absolute path")
			}
			o.LogFile = val
		case "remount":
			err = flag()
			o.Remount = true
		case "hard":
			err = flag()
			o.Hard = true
		case "soft":
			err = flag()
			o.Hard = false
		case "ac":
			err = flag()
			noac = false
		case "noac":
			err = flag()
			noac = true
		case "actimeo":
			var d time.Duration
			d, err = seconds()
			actimeo = &d
		case "acregmin":
			o.FS.AcRegMin, err = seconds()
		case "acregmax":
			o.FS.AcRegMax, err = seconds()
		case "acdirmin":
			o.FS.AcDirMin, err = seconds()
		case "acdirmax":
			o.FS.AcDirMax, err = seconds()
		case "ro":
			err = flag()
			o.FS.ReadOnly = true
		case "rw":
			err = flag()
			o.FS.ReadOnly = false
		case "sync":
			err = flag()
			o.FS.Sync = true
		case "uid", "gid":
			var n int64
			n, err = num(0, math.MaxUint32-1)
			id := uint32(n)
			if name == "uid" {
				o.UID = &id
			} else {
				o.GID = &id
			}
		case "sec":
			return nil, bad("only sec=sys (AUTH_SYS) is supported")
		default:
			if sloppy {
				o.Ignored = append(o.Ignored, opt)
				continue
			}
			return nil, bad("unknown option")
		}
		if err != nil {
			return nil, err
		}
	}
	if actimeo != nil {
		o.FS.AcRegMin, o.FS.AcRegMax, o.FS.AcDirMin, o.FS.AcDirMax = *actimeo, *actimeo, *actimeo, *actimeo
	}
	if noac {
		o.FS.NoAC()
	}
	if o.LookupCache == "none" {
		// The kernel keeps a name as long as its directory's attributes:
		// no directory attribute caching, no name caching.
		o.FS.AcDirMin, o.FS.AcDirMax = 0, 0
	}
	switch o.LookupCache {
	case "pos":
		o.FS.LookupCache = fusefs.LookupCachePositive
	case "none":
		o.FS.LookupCache = fusefs.LookupCacheNone
	default:
		o.FS.LookupCache = fusefs.LookupCacheAll
	}
	o.FS.NoCTO = o.NoCTO
	if o.FS.AcRegMin > o.FS.AcRegMax || o.FS.AcDirMin > o.FS.AcDirMax {
		return nil, &OptionError{Option: "acregmin/acdirmin", Reason: "a minimum above its maximum"}
	}
	if o.Port < 0 {
		o.Port = portTCP
		if o.Proto == "rdma" {
			o.Port = portRDMA
		}
	}
	if o.Inline != 0 && o.Proto != "rdma" {
		return nil, &OptionError{Option: fmt.Sprintf("inline=%d", o.Inline), Reason: "only proto=rdma has an inline size"}
	}
	if o.Port == 0 && o.Proto == "rdma" {
		o.Port = portRDMA // rpcbind does not advertise RPC-over-RDMA
	}
	if o.Background && !o.RetrySet {
		o.Retry = 10000 * time.Minute // nfs(5)'s default for bg
	}
	o.canonical = o.describe()
	return o, nil
}

// describe lists the options in effect, as /proc/self/mountstats would.
func (o *mountOptions) describe() []string {
	proto := o.Proto
	if o.IPv6 {
		proto += "6"
	}
	s := []string{"vers=3", "proto=" + proto, fmt.Sprintf("port=%d", o.Port)}
	if o.NConnect > 1 {
		s = append(s, fmt.Sprintf("nconnect=%d", o.NConnect))
	}
	if o.Inline != 0 {
		s = append(s, fmt.Sprintf("inline=%d", o.Inline))
	}
	if o.MountPort != 0 {
		s = append(s, fmt.Sprintf("mountport=%d", o.MountPort))
	}
	if o.Rsize != 0 {
		s = append(s, fmt.Sprintf("rsize=%d", o.Rsize))
	}
	if o.Wsize != 0 {
		s = append(s, fmt.Sprintf("wsize=%d", o.Wsize))
	}
	s = append(s, fmt.Sprintf("timeo=%d", o.Timeo/(100*time.Millisecond)), fmt.Sprintf("retrans=%d", o.Retrans))
	if o.Hard {
		s = append(s, "hard")
	} else {
		s = append(s, "soft")
	}
	secs := func(d time.Duration) int { return int(d / time.Second) }
	s = append(s, fmt.Sprintf("acregmin=%d,acregmax=%d,acdirmin=%d,acdirmax=%d",
		secs(o.FS.AcRegMin), secs(o.FS.AcRegMax), secs(o.FS.AcDirMin), secs(o.FS.AcDirMax)))
	if o.FS.Sync {
		s = append(s, "sync")
	}
	if o.FS.ReadOnly {
		s = append(s, "ro")
	} else {
		s = append(s, "rw")
	}
	if o.UID != nil {
		s = append(s, fmt.Sprintf("uid=%d", *o.UID))
	}
	if o.GID != nil {
		s = append(s, fmt.Sprintf("gid=%d", *o.GID))
	}
	s = append(s, "sec=sys", "lookupcache="+o.LookupCache)
	if o.NoCTO {
		s = append(s, "nocto")
	}
	if o.FS.DeferSetattr {
		s = append(s, "defersetattr")
	}
	if o.NoResvPort {
		s = append(s, "noresvport")
	}
	if o.NoLock {
		s = append(s, "nolock")
	}
	s = append(s, "local_lock="+o.LocalLock)
	if o.Background {
		s = append(s, "bg")
	}
	for _, f := range []struct {
		bit  uintptr
		name string
	}{{syscall.MS_NOSUID, "nosuid"}, {syscall.MS_NODEV, "nodev"}, {syscall.MS_NOEXEC, "noexec"}, {syscall.MS_NOATIME, "noatime"}, {syscall.MS_NODIRATIME, "nodiratime"}} {
		if o.MountFlags&f.bit != 0 {
			s = append(s, f.name)
		}
	}
	return s
}

// String returns the options in effect.
func (o *mountOptions) String() string { return strings.Join(o.canonical, ",") }
