package main

import (
	"fmt"
	"math"
	"slices"
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
	// AllowOther (allow_other, noallow_other) lets other users than the
	// mounting one use the mount; nil: root's mounts yes, users' no
	// (allowother.go).
	AllowOther *bool
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

// maxNConnect is nfs(5)'s limit of nconnect.
const maxNConnect = 16

// What an option takes after "=".
type valueKind int

const (
	noValue  valueKind = iota // a flag: "ro"; "ro=1" is refused
	number                    // an integer in [lo, hi]
	choice                    // one of choices
	anyValue                  // anything, or nothing; set checks it
)

// option is one row of optionTable: the names of one -o option, what it
// takes, how it changes mountOptions and how stats shows it.
type option struct {
	names   []string // "x-*" matches every name with the prefix
	value   valueKind
	lo, hi  int64    // number: its range
	unit    string   // number: what it counts, for the hint
	choices []string // choice: the values taken
	// hint is what a bad value is told (choice, anyValue); a number's is
	// its range and unit.
	hint string
	// arg is what an anyValue option takes, for the usage ("" and no
	// value: the bare name).
	arg string
	// ignored: accepted and ignored (mount(8)'s and fstab's own, nfs(5)'s
	// obsolete ones); the usage names them apart.
	ignored bool
	// remountOnly: known only after "remount" (the FUSE options mount(8)
	// passes back from /proc/self/mountinfo); unknown otherwise.
	remountOnly bool
	// vfs: the VFS mount flag the option sets (set) or clears, per name.
	vfs map[string]vfsFlag
	// set applies the option; n is the number of a number option.
	set func(p *optionParser, name, val string, n int64) error
	// show lists the option as it is in effect, for stats (as
	// /proc/self/mountstats shows the kernel's); nil: not shown. The
	// table's order is the order shown.
	show func(o *mountOptions) []string
}

type vfsFlag struct {
	bit uintptr
	set bool
}

// optionParser is parseOptions' state: the options so far, and what is
// settled once all are read.
type optionParser struct {
	o       *mountOptions
	opt     string // the option being parsed, whole, for errors
	noac    bool
	actimeo *time.Duration
}

func (p *optionParser) bad(reason string) error { return &OptionError{Option: p.opt, Reason: reason} }

func (p *optionParser) ignore(string, string, int64) error {
	p.o.Ignored = append(p.o.Ignored, p.opt)
	return nil
}

// flagPair is a pair of flag options, the first setting *field (through
// get) false, the second true.
func flagPair(on, off string, field func(*mountOptions) *bool, show func(*mountOptions) []string) option {
	return option{names: []string{on, off}, set: func(p *optionParser, name, _ string, _ int64) error {
		*field(p.o) = name == off
		return nil
	}, show: show}
}

// vfsPair is a pair of options that clear and set a VFS mount flag; shown
// is whether stats shows the set one.
func vfsPair(clear, set string, bit uintptr, setMeans bool, shown bool) option {
	op := option{names: []string{clear, set}, vfs: map[string]vfsFlag{clear: {bit, !setMeans}, set: {bit, setMeans}}}
	if shown {
		op.show = func(o *mountOptions) []string {
			if o.MountFlags&bit != 0 {
				return []string{set}
			}
			return nil
		}
	}
	return op
}

func showIf(cond bool, s ...string) []string {
	if cond {
		return s
	}
	return nil
}

// optionTable is every -o option the helper knows: the parser, its error
// messages, the stats echo of the options in effect and the check of the
// man page's MOUNT OPTIONS section (TestManPageOptions) come from it.
var optionTable = []option{
	{names: []string{"vers", "nfsvers"}, value: choice, choices: []string{"3"}, hint: "only NFS version 3 is supported",
		show: func(*mountOptions) []string { return []string{"vers=3"} }},
	{names: []string{"proto"}, value: anyValue, arg: "rdma|rdma6|tcp|tcp6", hint: "want rdma, rdma6, tcp or tcp6",
		set: func(p *optionParser, _, val string, _ int64) error {
			switch val {
			case "rdma", "tcp":
				p.o.Proto, p.o.IPv6 = val, false
			case "rdma6", "tcp6":
				p.o.Proto, p.o.IPv6 = strings.TrimSuffix(val, "6"), true
			case "udp", "udp6":
				return p.bad("supported protocols are rdma, rdma6, tcp and tcp6")
			default:
				return p.bad("want rdma, rdma6, tcp or tcp6")
			}
			return nil
		},
		show: func(o *mountOptions) []string {
			if o.IPv6 {
				return []string{"proto=" + o.Proto + "6"}
			}
			return []string{"proto=" + o.Proto}
		}},
	{names: []string{"rdma", "tcp"}, set: func(p *optionParser, name, _ string, _ int64) error {
		p.o.Proto = name
		return nil
	}},
	{names: []string{"port"}, value: number, lo: 0, hi: 65535,
		set:  func(p *optionParser, _, _ string, n int64) error { p.o.Port = int(n); return nil },
		show: func(o *mountOptions) []string { return []string{fmt.Sprintf("port=%d", o.Port)} }},
	{names: []string{"nconnect"}, value: number, lo: 1, hi: maxNConnect, unit: "transports",
		set:  func(p *optionParser, _, _ string, n int64) error { p.o.NConnect = int(n); return nil },
		show: func(o *mountOptions) []string { return showIf(o.NConnect > 1, fmt.Sprintf("nconnect=%d", o.NConnect)) }},
	{names: []string{"inline"}, value: number, lo: 1024, hi: rpcrdma.MaxInlineSize, unit: "bytes",
		set:  func(p *optionParser, _, _ string, n int64) error { p.o.Inline = int(n); return nil },
		show: func(o *mountOptions) []string { return showIf(o.Inline != 0, fmt.Sprintf("inline=%d", o.Inline)) }},
	{names: []string{"mountport"}, value: number, lo: 0, hi: 65535,
		set: func(p *optionParser, _, _ string, n int64) error { p.o.MountPort = int(n); return nil },
		show: func(o *mountOptions) []string {
			return showIf(o.MountPort != 0, fmt.Sprintf("mountport=%d", o.MountPort))
		}},
	{names: []string{"mountproto"}, value: choice, choices: []string{"tcp", "tcp6"}, hint: "MOUNT goes over tcp only"},
	{names: []string{"mountvers"}, value: choice, choices: []string{"3"}, hint: "only MOUNT version 3 is supported"},
	{names: []string{"rsize"}, value: number, lo: 1, hi: math.MaxUint32, unit: "bytes",
		set:  func(p *optionParser, _, _ string, n int64) error { p.o.Rsize = ioSize(n); return nil },
		show: func(o *mountOptions) []string { return showIf(o.Rsize != 0, fmt.Sprintf("rsize=%d", o.Rsize)) }},
	{names: []string{"wsize"}, value: number, lo: 1, hi: math.MaxUint32, unit: "bytes",
		set:  func(p *optionParser, _, _ string, n int64) error { p.o.Wsize = ioSize(n); return nil },
		show: func(o *mountOptions) []string { return showIf(o.Wsize != 0, fmt.Sprintf("wsize=%d", o.Wsize)) }},
	{names: []string{"timeo"}, value: number, lo: 1, hi: 6000, unit: "deciseconds", // at most 600 s
		set: func(p *optionParser, _, _ string, n int64) error {
			p.o.Timeo = time.Duration(n) * 100 * time.Millisecond
			return nil
		},
		show: func(o *mountOptions) []string {
			return []string{fmt.Sprintf("timeo=%d", o.Timeo/(100*time.Millisecond))}
		}},
	{names: []string{"retrans"}, value: number, lo: 0, hi: 100,
		set:  func(p *optionParser, _, _ string, n int64) error { p.o.Retrans = int(n); return nil },
		show: func(o *mountOptions) []string { return []string{fmt.Sprintf("retrans=%d", o.Retrans)} }},
	{names: []string{"hard", "soft"}, set: func(p *optionParser, name, _ string, _ int64) error {
		p.o.Hard = name == "hard"
		return nil
	}, show: func(o *mountOptions) []string {
		if o.Hard {
			return []string{"hard"}
		}
		return []string{"soft"}
	}},
	{names: []string{"retry"}, value: number, lo: 0, hi: 10000, unit: "minutes",
		set: func(p *optionParser, _, _ string, n int64) error {
			p.o.Retry, p.o.RetrySet = time.Duration(n)*time.Minute, true
			return nil
		}},
	{names: []string{"acregmin", "acregmax", "acdirmin", "acdirmax"}, value: number, lo: 0, hi: 24 * 3600, unit: "seconds",
		set: func(p *optionParser, name, _ string, n int64) error {
			d := time.Duration(n) * time.Second
			switch name {
			case "acregmin":
				p.o.FS.AcRegMin = d
			case "acregmax":
				p.o.FS.AcRegMax = d
			case "acdirmin":
				p.o.FS.AcDirMin = d
			default:
				p.o.FS.AcDirMax = d
			}
			return nil
		},
		show: func(o *mountOptions) []string {
			secs := func(d time.Duration) int { return int(d / time.Second) }
			return []string{fmt.Sprintf("acregmin=%d,acregmax=%d,acdirmin=%d,acdirmax=%d",
				secs(o.FS.AcRegMin), secs(o.FS.AcRegMax), secs(o.FS.AcDirMin), secs(o.FS.AcDirMax))}
		}},
	{names: []string{"actimeo"}, value: number, lo: 0, hi: 24 * 3600, unit: "seconds",
		set: func(p *optionParser, _, _ string, n int64) error {
			d := time.Duration(n) * time.Second
			p.actimeo = &d
			return nil
		}},
	{names: []string{"ac", "noac"}, set: func(p *optionParser, name, _ string, _ int64) error {
		p.noac = name == "noac"
		return nil
	}},
	{names: []string{"sync"}, set: func(p *optionParser, _, _ string, _ int64) error { p.o.FS.Sync = true; return nil },
		show: func(o *mountOptions) []string { return showIf(o.FS.Sync, "sync") }},
	flagPair("rw", "ro", func(o *mountOptions) *bool { return &o.FS.ReadOnly }, func(o *mountOptions) []string {
		if o.FS.ReadOnly {
			return []string{"ro"}
		}
		return []string{"rw"}
	}),
	{names: []string{"uid"}, value: number, lo: 0, hi: math.MaxUint32 - 1,
		set: func(p *optionParser, _, _ string, n int64) error {
			id := uint32(n)
			p.o.UID = &id
			return nil
		},
		show: func(o *mountOptions) []string {
			if o.UID == nil {
				return nil
			}
			return []string{fmt.Sprintf("uid=%d", *o.UID)}
		}},
	{names: []string{"gid"}, value: number, lo: 0, hi: math.MaxUint32 - 1,
		set: func(p *optionParser, _, _ string, n int64) error {
			id := uint32(n)
			p.o.GID = &id
			return nil
		},
		show: func(o *mountOptions) []string {
			if o.GID == nil {
				return nil
			}
			return []string{fmt.Sprintf("gid=%d", *o.GID)}
		}},
	{names: []string{"sec"}, value: choice, choices: []string{"sys"}, hint: "only sec=sys (AUTH_SYS) is supported",
		set:  (*optionParser).ignore,
		show: func(*mountOptions) []string { return []string{"sec=sys"} }},
	{names: []string{"lookupcache"}, value: choice, choices: []string{"all", "none", "pos", "positive"}, hint: "want all, none or pos",
		set: func(p *optionParser, _, val string, _ int64) error {
			p.o.LookupCache = val
			if val == "positive" {
				p.o.LookupCache = "pos"
			}
			return nil
		},
		show: func(o *mountOptions) []string { return []string{"lookupcache=" + o.LookupCache} }},
	flagPair("cto", "nocto", func(o *mountOptions) *bool { return &o.NoCTO },
		func(o *mountOptions) []string { return showIf(o.NoCTO, "nocto") }),
	// Not nfs(5)'s: fusefs.Options.DeferSetattr (see the man page).
	flagPair("nodefersetattr", "defersetattr", func(o *mountOptions) *bool { return &o.FS.DeferSetattr },
		func(o *mountOptions) []string { return showIf(o.FS.DeferSetattr, "defersetattr") }),
	flagPair("resvport", "noresvport", func(o *mountOptions) *bool { return &o.NoResvPort },
		func(o *mountOptions) []string { return showIf(o.NoResvPort, "noresvport") }),
	flagPair("lock", "nolock", func(o *mountOptions) *bool { return &o.NoLock },
		func(o *mountOptions) []string { return showIf(o.NoLock, "nolock") }),
	flagPair("acl", "noacl", func(o *mountOptions) *bool { return &o.FS.NoACL },
		func(o *mountOptions) []string { return showIf(o.FS.NoACL, "noacl") }),
	{names: []string{"local_lock"}, value: choice, choices: []string{"none", "flock", "posix", "all"}, hint: "want none, flock, posix or all",
		set:  func(p *optionParser, _, val string, _ int64) error { p.o.LocalLock = val; return nil },
		show: func(o *mountOptions) []string { return []string{"local_lock=" + o.LocalLock} }},
	flagPair("fg", "bg", func(o *mountOptions) *bool { return &o.Background },
		func(o *mountOptions) []string { return showIf(o.Background, "bg") }),
	// The VFS flags of the FUSE mount; stats shows those set that the
	// kernel's mountstats shows.
	vfsPair("suid", "nosuid", syscall.MS_NOSUID, true, true),
	vfsPair("dev", "nodev", syscall.MS_NODEV, true, true),
	vfsPair("exec", "noexec", syscall.MS_NOEXEC, true, true),
	vfsPair("atime", "noatime", syscall.MS_NOATIME, true, true),
	vfsPair("diratime", "nodiratime", syscall.MS_NODIRATIME, true, true),
	vfsPair("norelatime", "relatime", syscall.MS_RELATIME, true, false),
	vfsPair("nostrictatime", "strictatime", syscall.MS_STRICTATIME, true, false),
	// mount(8)'s: who may mount (user=NAME is what it records). user and
	// users imply noexec, nosuid and nodev, which a later exec, suid or
	// dev overrides.
	{names: []string{"user", "users"}, value: anyValue, set: func(p *optionParser, _, _ string, _ int64) error {
		p.o.MountFlags |= syscall.MS_NOEXEC | syscall.MS_NOSUID | syscall.MS_NODEV
		p.o.Ignored = append(p.o.Ignored, p.opt)
		return nil
	}},
	// FUSE's (fuse(8), sshfs): whether users other than the mounting one
	// may use the mount. A remount cannot change it (mount(8) passes
	// allow_other back from /proc/self/mountinfo): ignored there.
	{names: []string{"allow_other", "noallow_other"}, set: func(p *optionParser, name, _ string, _ int64) error {
		if p.o.Remount {
			return p.ignore(name, "", 0)
		}
		v := name == "allow_other"
		p.o.AllowOther = &v
		return nil
	}, show: func(o *mountOptions) []string {
		if o.AllowOther == nil {
			return nil
		}
		if *o.AllowOther {
			return []string{"allow_other"}
		}
		return []string{"noallow_other"}
	}},
	{names: []string{"owner", "group", "comment", "x-*"}, value: anyValue, ignored: true, set: (*optionParser).ignore},
	{names: []string{"logfile"}, value: anyValue, arg: "PATH", hint: "want an absolute path",
		set: func(p *optionParser, _, val string, _ int64) error {
			if !strings.HasPrefix(val, "/") {
				return p.bad("want an absolute path")
			}
			p.o.LogFile = val
			return nil
		}},
	{names: []string{"remount"}, set: func(p *optionParser, _, _ string, _ int64) error { p.o.Remount = true; return nil }},
	// What mount(8) and fstab pass that does not concern the NFS client.
	{names: []string{"defaults", "_netdev", "nofail", "auto", "noauto", "nouser", "loud", "silent",
		"lazytime", "nolazytime", "intr", "nointr", "async"}, ignored: true, set: (*optionParser).ignore},
	// The FUSE mount's own options, which mount(8) passes back (from
	// /proc/self/mountinfo) on a remount.
	{names: []string{"user_id", "group_id", "default_permissions",
		"max_read", "blksize", "fd", "rootmode", "fsname", "subtype"}, value: anyValue, remountOnly: true, set: (*optionParser).ignore},
}

// optionUsage lists the options for the usage: nfs(5)'s and nfsrdma's
// with what each takes, then mount(8)'s own that the helper ignores.
func optionUsage() (options, ignored []string) {
	for _, op := range optionTable {
		if op.remountOnly {
			continue
		}
		for _, n := range op.names {
			switch {
			case op.ignored:
				ignored = append(ignored, n)
			case op.value == number:
				options = append(options, n+"=N")
			case op.value == choice:
				options = append(options, n+"="+strings.Join(op.choices, "|"))
			case op.arg != "":
				options = append(options, n+"="+op.arg)
			default:
				options = append(options, n)
			}
		}
	}
	return options, ignored
}

// wrapList joins items with ", " in lines of at most width columns.
func wrapList(items []string, width int) string {
	var b strings.Builder
	col := 0
	for i, it := range items {
		if i < len(items)-1 {
			it += ","
		}
		if col > 0 && col+1+len(it) > width {
			b.WriteString("\n")
			col = 0
		} else if col > 0 {
			b.WriteString(" ")
			col++
		}
		b.WriteString(it)
		col += len(it)
	}
	return b.String()
}

// ioSize is an rsize or wsize as used: whole pages, within the limits.
func ioSize(n int64) uint32 {
	size := uint32(min(max(n, minIOSize), maxIOSize))
	return size - size%minIOSize
}

// optionNames maps each name of optionTable to its row ("x-*" is matched
// by prefix, see lookupOption).
var optionNames = func() map[string]*option {
	m := make(map[string]*option)
	for i := range optionTable {
		for _, n := range optionTable[i].names {
			if m[n] != nil {
				panic("option " + n + " twice in optionTable")
			}
			m[n] = &optionTable[i]
		}
	}
	return m
}()

// vfsFlags are the options that set or clear a VFS mount flag (remount
// applies them to a live mount).
var vfsFlags = func() map[string]vfsFlag {
	m := make(map[string]vfsFlag)
	for _, op := range optionTable {
		for n, f := range op.vfs {
			m[n] = f
		}
	}
	return m
}()

func lookupOption(name string) *option {
	if op := optionNames[name]; op != nil {
		return op
	}
	if i := strings.IndexByte(name, '-'); i > 0 {
		return optionNames[name[:i+1]+"*"]
	}
	return nil
}

// unknownOption is the error of an option the table does not know, with
// the nearest known name when one is near.
func unknownOption(opt, name string) error {
	reason := "unknown option"
	best, bestD := "", 3 // at most two edits away
	for _, op := range optionTable {
		if op.remountOnly {
			continue
		}
		for _, n := range op.names {
			if d := editDistance(name, n); d < bestD && !strings.HasSuffix(n, "*") {
				best, bestD = n, d
			}
		}
	}
	if best != "" {
		reason += fmt.Sprintf(" (did you mean %q?)", best)
	}
	return &OptionError{Option: opt, Reason: reason}
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := 1
			if a[i-1] == b[j-1] {
				c = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+c)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// parse applies one option (not empty, trimmed) by its row of the table.
func (p *optionParser) parse(opt string, sloppy bool) error {
	p.opt = opt
	name, val, hasVal := strings.Cut(opt, "=")
	op := lookupOption(name)
	if op == nil || op.remountOnly && !p.o.Remount {
		if sloppy {
			p.o.Ignored = append(p.o.Ignored, opt)
			return nil
		}
		return unknownOption(opt, name)
	}
	var n int64
	switch op.value {
	case noValue:
		if hasVal {
			return p.bad("takes no value")
		}
	case number:
		if !hasVal || val == "" {
			return p.bad("needs a value")
		}
		var err error
		n, err = strconv.ParseInt(val, 10, 64)
		if err != nil || n < op.lo || n > op.hi {
			reason := fmt.Sprintf("want a number in [%d, %d]", op.lo, op.hi)
			if op.unit != "" {
				reason += " (" + op.unit + ")"
			}
			return p.bad(reason)
		}
	case choice:
		if !slices.Contains(op.choices, val) {
			return p.bad(op.hint)
		}
	}
	if f, ok := op.vfs[name]; ok {
		if f.set {
			p.o.MountFlags |= f.bit
		} else {
			p.o.MountFlags &^= f.bit
		}
	}
	if op.set != nil {
		return op.set(p, name, val, n)
	}
	return nil
}

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
	p := &optionParser{o: o}
	for _, opt := range strings.Split(s, ",") {
		// A remount's options (the mount's own, which mount(8) passes
		// back, FUSE's included) may come before "remount".
		if strings.TrimSpace(opt) == "remount" {
			o.Remount = true
		}
	}
	for _, opt := range strings.Split(s, ",") {
		if opt = strings.TrimSpace(opt); opt == "" {
			continue
		}
		if err := p.parse(opt, sloppy); err != nil {
			return nil, err
		}
	}
	if p.actimeo != nil {
		d := *p.actimeo
		o.FS.AcRegMin, o.FS.AcRegMax, o.FS.AcDirMin, o.FS.AcDirMax = d, d, d, d
	}
	if p.noac {
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

// describe lists the options in effect, as /proc/self/mountstats would:
// each row of optionTable that shows itself, in the table's order.
func (o *mountOptions) describe() []string {
	var s []string
	for _, op := range optionTable {
		if op.show != nil {
			s = append(s, op.show(o)...)
		}
	}
	return s
}

// String returns the options in effect.
func (o *mountOptions) String() string { return strings.Join(o.canonical, ",") }
