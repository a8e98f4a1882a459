package main

import (
	"errors"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/fusefs"
)

func TestParseOptions(t *testing.T) {
	def := fusefs.DefaultOptions()
	for _, tc := range []struct {
		opts   string
		sloppy bool
		check  func(*mountOptions) bool
		err    string // a substring of the error; "" for success
	}{
		{opts: "", check: func(o *mountOptions) bool {
			return o.Proto == "rdma" && o.Port == 20049 && o.MountPort == 0 && o.Hard && o.Timeo == 60*time.Second &&
				o.Retrans == 2 && o.FS == def && o.UID == nil && o.MountFlags == syscall.MS_NOSUID|syscall.MS_NODEV
		}},
		{opts: "vers=3,proto=rdma,port=20049", check: func(o *mountOptions) bool { return o.Proto == "rdma" && o.Port == 20049 }},
		{opts: "nfsvers=3,proto=tcp", check: func(o *mountOptions) bool { return o.Proto == "tcp" && o.Port == 2049 }},
		{opts: "tcp,port=0", check: func(o *mountOptions) bool { return o.Proto == "tcp" && o.Port == 0 }},
		{opts: "rdma,port=0", check: func(o *mountOptions) bool { return o.Port == 20049 }},
		{opts: "proto=tcp,port=12049,mountport=635,mountproto=tcp", check: func(o *mountOptions) bool { return o.Port == 12049 && o.MountPort == 635 }},
		{opts: "rsize=65536,wsize=1048576", check: func(o *mountOptions) bool { return o.Rsize == 65536 && o.Wsize == 1<<20 }},
		{opts: "rsize=100000,wsize=8000000", check: func(o *mountOptions) bool { return o.Rsize == 98304 && o.Wsize == 1<<20 }},
		{opts: "rsize=1", check: func(o *mountOptions) bool { return o.Rsize == 4096 }},
		{opts: "timeo=15,retrans=5,soft", check: func(o *mountOptions) bool {
			return o.Timeo == 1500*time.Millisecond && o.Retrans == 5 && !o.Hard
		}},
		{opts: "soft,hard", check: func(o *mountOptions) bool { return o.Hard }},
		{opts: "retry=0", check: func(o *mountOptions) bool { return o.Retry == 0 }},
		{opts: "noac", check: func(o *mountOptions) bool {
			return o.FS.AcRegMin == 0 && o.FS.AcRegMax == 0 && o.FS.AcDirMin == 0 && o.FS.AcDirMax == 0 && o.FS.Sync
		}},
		{opts: "noac,ac", check: func(o *mountOptions) bool { return o.FS == def }},
		{opts: "actimeo=7", check: func(o *mountOptions) bool {
			return o.FS.AcRegMin == 7*time.Second && o.FS.AcRegMax == 7*time.Second && o.FS.AcDirMin == 7*time.Second && o.FS.AcDirMax == 7*time.Second
		}},
		{opts: "acregmin=1,acregmax=2,acdirmin=3,acdirmax=4", check: func(o *mountOptions) bool {
			return o.FS.AcRegMin == time.Second && o.FS.AcRegMax == 2*time.Second && o.FS.AcDirMin == 3*time.Second && o.FS.AcDirMax == 4*time.Second
		}},
		{opts: "ro", check: func(o *mountOptions) bool { return o.FS.ReadOnly }},
		{opts: "ro,rw", check: func(o *mountOptions) bool { return !o.FS.ReadOnly }},
		{opts: "sync", check: func(o *mountOptions) bool { return o.FS.Sync }},
		{opts: "uid=1000,gid=100", check: func(o *mountOptions) bool { return *o.UID == 1000 && *o.GID == 100 }},
		{opts: "suid,dev,noexec", check: func(o *mountOptions) bool { return o.MountFlags == syscall.MS_NOEXEC }},
		{opts: "noatime,nodiratime", check: func(o *mountOptions) bool {
			return o.MountFlags == syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOATIME|syscall.MS_NODIRATIME
		}},
		{opts: "noatime,atime", check: func(o *mountOptions) bool { return o.MountFlags == syscall.MS_NOSUID|syscall.MS_NODEV }},
		// user and users imply noexec, nosuid and nodev; a later option
		// overrides.
		{opts: "suid,dev,user", check: func(o *mountOptions) bool {
			return o.MountFlags == syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC
		}},
		{opts: "users,exec", check: func(o *mountOptions) bool { return o.MountFlags == syscall.MS_NOSUID|syscall.MS_NODEV }},
		{opts: "user=alice", check: func(o *mountOptions) bool { return o.MountFlags&syscall.MS_NOEXEC != 0 }},
		// nfs(5) options.
		{opts: "bg", check: func(o *mountOptions) bool { return o.Background && o.Retry == 10000*time.Minute }},
		{opts: "bg,retry=1", check: func(o *mountOptions) bool { return o.Background && o.Retry == time.Minute }},
		{opts: "bg,fg", check: func(o *mountOptions) bool { return !o.Background && o.Retry == 2*time.Minute }},
		{opts: "nconnect=4", check: func(o *mountOptions) bool { return o.NConnect == 4 }},
		{opts: "inline=16384", check: func(o *mountOptions) bool { return o.Inline == 16384 && slices.Contains(o.canonical, "inline=16384") }},
		{opts: "", check: func(o *mountOptions) bool {
			return o.NConnect == 1 && o.LookupCache == "all" && o.LocalLock == "none" && !o.NoLock && !o.NoCTO && !o.NoResvPort && !o.IPv6 && !o.FS.DeferSetattr
		}},
		{opts: "lookupcache=positive", check: func(o *mountOptions) bool {
			return o.LookupCache == "pos" && o.FS.LookupCache == fusefs.LookupCachePositive && o.FS.AcDirMax == def.AcDirMax
		}},
		{opts: "nocto", check: func(o *mountOptions) bool { return o.NoCTO && o.FS.NoCTO }},
		{opts: "defersetattr", check: func(o *mountOptions) bool { return o.FS.DeferSetattr && slices.Contains(o.canonical, "defersetattr") }},
		{opts: "defersetattr,nodefersetattr", check: func(o *mountOptions) bool { return !o.FS.DeferSetattr }},
		{opts: "lookupcache=none,acdirmax=10", check: func(o *mountOptions) bool {
			return o.FS.AcDirMin == 0 && o.FS.AcDirMax == 0 && o.FS.AcRegMin == def.AcRegMin
		}},
		{opts: "lookupcache=none,nocto,noresvport,nolock,local_lock=all", check: func(o *mountOptions) bool {
			return o.LookupCache == "none" && o.NoCTO && o.NoResvPort && o.NoLock && o.LocalLock == "all"
		}},
		{opts: "nocto,cto,noresvport,resvport,nolock,lock", check: func(o *mountOptions) bool { return !o.NoCTO && !o.NoResvPort && !o.NoLock }},
		{opts: "proto=tcp6", check: func(o *mountOptions) bool { return o.Proto == "tcp" && o.IPv6 && o.Port == 2049 }},
		{opts: "proto=rdma6,mountproto=tcp6", check: func(o *mountOptions) bool { return o.Proto == "rdma" && o.IPv6 && o.Port == 20049 }},
		{opts: "logfile=/var/log/x.log", check: func(o *mountOptions) bool { return o.LogFile == "/var/log/x.log" }},
		{opts: "remount,ro", check: func(o *mountOptions) bool { return o.Remount && o.FS.ReadOnly }},
		{opts: "remount,user_id=0,group_id=0,default_permissions,allow_other", check: func(o *mountOptions) bool { return len(o.Ignored) == 4 }},
		{opts: "rw,nosuid,user_id=0,max_read=1048576,remount,ro", check: func(o *mountOptions) bool { return o.Remount && len(o.Ignored) == 2 && o.FS.ReadOnly }},
		// What mount(8) and fstab pass along is ignored.
		{opts: "rw,_netdev,nofail,auto,noauto,user,users,defaults,x-systemd.automount,x-systemd.mount-timeout=30,x-foo,comment=x,sec=sys", check: func(o *mountOptions) bool {
			return len(o.Ignored) == 12 && o.FS == def
		}},
		{opts: " proto=tcp , ro ", check: func(o *mountOptions) bool { return o.Proto == "tcp" && o.FS.ReadOnly }},
		{opts: "bogus,ro", sloppy: true, check: func(o *mountOptions) bool { return o.FS.ReadOnly && o.Ignored[0] == "bogus" }},

		{opts: "bogus", err: `"bogus": unknown option`},
		{opts: "vers=4", err: `"vers=4": only NFS version 3`},
		{opts: "nfsvers=4.1", err: `"nfsvers=4.1": only NFS version 3`},
		{opts: "vers", err: "only NFS version 3"},
		{opts: "proto=udp", err: "supported protocols are rdma, rdma6, tcp and tcp6"},
		{opts: "proto=sctp", err: "want rdma, rdma6, tcp or tcp6"},
		{opts: "nconnect=17", err: "want a number in [1, 16]"},
		{opts: "nconnect=0", err: "want a number in [1, 16]"},
		{opts: "inline=512", err: "want a number in [1024, 262144]"},
		{opts: "inline=1048576", err: "want a number in [1024, 262144]"},
		{opts: "proto=tcp,inline=8192", err: "only proto=rdma has an inline size"},
		{opts: "lookupcache=some", err: "want all, none or pos"},
		{opts: "local_lock=yes", err: "want none, flock, posix or all"},
		{opts: "logfile=rel.log", err: "want an absolute path"},
		{opts: "nolock=1", err: "takes no value"},
		{opts: "user_id=0", err: "unknown option"},
		{opts: "mountproto=udp", err: "MOUNT goes over tcp only"},
		{opts: "port=70000", err: `"port=70000": want a number in [0, 65535]`},
		{opts: "port=x", err: "want a number"},
		{opts: "port", err: "needs a value"},
		{opts: "rsize=-1", err: "want a number"},
		{opts: "timeo=0", err: "want a number"},
		{opts: "acregmin=10,acregmax=5", err: "minimum above its maximum"},
		{opts: "ro=1", err: "takes no value"},
		{opts: "uid=4294967295", err: "want a number"},
		{opts: "sec=krb5", err: "only sec=sys"},
	} {
		o, err := parseOptions(tc.opts, tc.sloppy)
		if tc.err != "" {
			var oe *OptionError
			if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.As(err, &oe) {
				t.Errorf("parseOptions(%q): %v, want an OptionError with %q", tc.opts, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseOptions(%q): %v", tc.opts, err)
			continue
		}
		if !tc.check(o) {
			t.Errorf("parseOptions(%q) = %+v", tc.opts, o)
		}
	}
}

func TestDescribeOptions(t *testing.T) {
	o, err := parseOptions("proto=tcp6,rsize=65536,soft,ro,noac,uid=5,nconnect=2,nocto,nolock,local_lock=all,bg,lookupcache=pos,user", false)
	if err != nil {
		t.Fatal(err)
	}
	want := "vers=3,proto=tcp6,port=2049,nconnect=2,rsize=65536,timeo=600,retrans=2,soft,acregmin=0,acregmax=0,acdirmin=0,acdirmax=0,sync,ro,uid=5," +
		"sec=sys,lookupcache=pos,nocto,nolock,local_lock=all,bg,nosuid,nodev,noexec"
	if o.String() != want {
		t.Errorf("got  %s\nwant %s", o, want)
	}
}

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		argv0 string
		args  []string
		want  invocation
		err   string
	}{
		{"nfsrdma-mount", []string{"srv:/export", "/mnt"},
			invocation{cmd: cmdMount, spec: "srv:/export", dir: "/mnt"}, ""},
		{"/usr/bin/nfsrdma-mount", []string{"-f", "-v", "-o", "proto=tcp", "10.0.0.1:/", "m"},
			invocation{cmd: cmdMount, foreground: true, verbose: true, opts: "proto=tcp", spec: "10.0.0.1:/", dir: "m"}, ""},
		{"nfsrdma-mount", []string{"-fv", "-oro", "srv:/e", "/mnt", "-o", "soft"},
			invocation{cmd: cmdMount, foreground: true, verbose: true, opts: "ro,soft", spec: "srv:/e", dir: "/mnt"}, ""},
		{"nfsrdma-mount", []string{"-u", "/mnt"}, invocation{cmd: cmdUnmount, dir: "/mnt"}, ""},
		{"nfsrdma-mount", []string{"stats", "/mnt"}, invocation{cmd: cmdStats, dirs: []string{"/mnt"}}, ""},
		{"nfsrdma-mount", []string{"stats"}, invocation{cmd: cmdStats}, ""},
		{"nfsrdma-mount", []string{"stats", "-json", "-i", "0.5", "-c", "3", "/a", "/b"},
			invocation{cmd: cmdStats, json: true, interval: 500 * time.Millisecond, count: 3, dirs: []string{"/a", "/b"}}, ""},
		{"nfsrdma-mount", []string{"--version"}, invocation{cmd: cmdVersion}, ""},
		{"nfsrdma-mount", []string{"-u", "-l", "/mnt"}, invocation{cmd: cmdUnmount, lazy: true, dir: "/mnt"}, ""},
		{"nfsrdma-mount", []string{"-f", "--ready-fd=3", "--lifeline-fd=4", "s:/e", "/m"},
			invocation{cmd: cmdMount, foreground: true, readyFD: 3, lifelineFD: 4, spec: "s:/e", dir: "/m"}, ""},
		// The type the kernel shows, fuse.nfsrdma, has its helper too.
		{"/sbin/mount.fuse.nfsrdma", []string{"srv:/export", "/mnt", "-o", "remount,ro", "-t", "fuse.nfsrdma"},
			invocation{cmd: cmdMount, helper: true, opts: "remount,ro", spec: "srv:/export", dir: "/mnt"}, ""},
		// umount(8)'s helpers: umount.<type> dir [-flnrv] [-t type].
		{"/sbin/umount.fuse.nfsrdma", []string{"/mnt", "-n", "-l", "-t", "fuse.nfsrdma"}, invocation{cmd: cmdUnmount, lazy: true, dir: "/mnt"}, ""},
		{"umount.nfsrdma", []string{"/mnt", "-f", "-v"}, invocation{cmd: cmdUnmount, force: true, verbose: true, dir: "/mnt"}, ""},
		{"nfsrdma-mount", []string{"-f", "--ready-fd=3", "--", "[fe80::1]:/x", "/mnt"},
			invocation{cmd: cmdMount, foreground: true, readyFD: 3, spec: "[fe80::1]:/x", dir: "/mnt"}, ""},
		{"nfsrdma-mount", []string{"--help"}, invocation{cmd: cmdHelp}, ""},
		// mount(8)'s helper syntax: options after the operands, -f is fake.
		{"/sbin/mount.nfsrdma", []string{"srv:/export", "/mnt", "-sfnv", "-o", "rw,_netdev"},
			invocation{cmd: cmdMount, helper: true, sloppy: true, fake: true, verbose: true, opts: "rw,_netdev", spec: "srv:/export", dir: "/mnt"}, ""},
		{"mount.nfsrdma", []string{"srv:/export", "/mnt", "-o", "ro", "-t", "nfsrdma"},
			invocation{cmd: cmdMount, helper: true, opts: "ro", spec: "srv:/export", dir: "/mnt"}, ""},

		// A remount names the mount by its mount point alone.
		{"nfsrdma-mount", []string{"-o", "remount,ro", "/mnt"}, invocation{cmd: cmdMount, opts: "remount,ro", dir: "/mnt"}, ""},
		{"nfsrdma-mount", []string{"-o", "ro", "-o", "remount", "/mnt"}, invocation{cmd: cmdMount, opts: "ro,remount", dir: "/mnt"}, ""},
		{"nfsrdma-mount", []string{"-o", "ro", "/mnt"}, invocation{}, "need server:/export and a mount point"},
		{"nfsrdma-mount", []string{"srv:/export"}, invocation{}, "need server:/export and a mount point"},
		{"nfsrdma-mount", []string{"srv", "/mnt"}, invocation{}, `"srv": want server:/export`},
		{"nfsrdma-mount", []string{"srv:export", "/mnt"}, invocation{}, "want server:/export"},
		{"nfsrdma-mount", []string{":/export", "/mnt"}, invocation{}, "want server:/export"},
		{"nfsrdma-mount", []string{"-x", "s:/e", "/m"}, invocation{}, "unknown flag -x"},
		{"nfsrdma-mount", []string{"s:/e", "/m", "-o"}, invocation{}, "-o needs a value"},
		{"nfsrdma-mount", []string{"-u"}, invocation{}, "unmount needs one mount point"},
		{"nfsrdma-mount", []string{"stats", "-i", "0", "/m"}, invocation{}, "want a positive number"},
		{"nfsrdma-mount", []string{"stats", "-c", "2", "/m"}, invocation{}, "-c needs -i"},
		{"umount.nfsrdma", []string{"/a", "/b"}, invocation{}, "unmount needs one mount point"},
		{"nfsrdma-mount", []string{"-l", "s:/e", "/m"}, invocation{}, "unknown flag -l"},
		{"mount.nfsrdma", []string{"s:/e", "/m", "-t", "nfs"}, invocation{}, "this helper mounts type nfsrdma"},
		{"mount.nfsrdma", []string{"s:/e", "/m", "-N", "/proc/1/ns/mnt"}, invocation{}, "not supported"},
		{"mount.nfsrdma", []string{"-u", "/m"}, invocation{}, "unknown flag -u"},
	} {
		got, err := parseArgs(tc.argv0, tc.args)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseArgs(%q, %q): %v, want %q", tc.argv0, tc.args, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseArgs(%q, %q): %v", tc.argv0, tc.args, err)
			continue
		}
		if !reflect.DeepEqual(*got, tc.want) {
			t.Errorf("parseArgs(%q, %q) = %+v, want %+v", tc.argv0, tc.args, *got, tc.want)
		}
	}
}

func TestSplitSpec(t *testing.T) {
	for _, tc := range []struct{ spec, host, export string }{
		{"10.99.0.1:/export", "10.99.0.1", "/export"},
		{"server.example:/a/b", "server.example", "/a/b"},
		{"[fd00::1]:/x", "fd00::1", "/x"},
		{"srv:/", "srv", "/"},
	} {
		h, e, err := splitSpec(tc.spec)
		if err != nil || h != tc.host || e != tc.export {
			t.Errorf("splitSpec(%q) = %q %q %v", tc.spec, h, e, err)
		}
	}
}

func TestSocketPath(t *testing.T) {
	a, _ := socketPath("/mnt/x")
	b, _ := socketPath("/mnt/./x/")
	c, _ := socketPath("/mnt/y")
	if a != b || a == c || !strings.HasSuffix(a, ".sock") {
		t.Errorf("socket paths %q %q %q", a, b, c)
	}
}

// Errors name what is wrong and what would do: a number's range and unit,
// an unknown option's nearest known name.
func TestOptionHints(t *testing.T) {
	for _, tc := range []struct{ opts, err string }{
		{"nconect=2", `"nconect=2": unknown option (did you mean "nconnect"?)`},
		{"lookupcahce=pos", `did you mean "lookupcache"?`},
		{"noatim", `did you mean "noatime"?`},
		{"timeo=0", "want a number in [1, 6000] (deciseconds)"},
		{"retry=x", "want a number in [0, 10000] (minutes)"},
		{"acregmax=-1", "(seconds)"},
		{"rsize=0", "want a number in [1, 4294967295] (bytes)"},
	} {
		_, err := parseOptions(tc.opts, false)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("parseOptions(%q): %v, want %q", tc.opts, err, tc.err)
		}
	}
	if _, err := parseOptions("bogus", false); err == nil || strings.Contains(err.Error(), "did you mean") {
		t.Errorf("bogus: %v, want no suggestion", err)
	}
}

// manPageOptions returns the option names of the MOUNT OPTIONS section of
// the man page: the names in each .TP entry's tag line.
func manPageOptions(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../../doc/nfsrdma-mount.8")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n.SH MOUNT OPTIONS\n")
	if !ok {
		t.Fatal("no MOUNT OPTIONS section in the man page")
	}
	sec, _, _ = strings.Cut(sec, "\n.SH ")
	italic := regexp.MustCompile(`\\fI.*?\\fR`)
	names := make(map[string]bool)
	lines := strings.Split(sec, "\n")
	for i, l := range lines {
		if l != ".TP" || i+1 >= len(lines) {
			continue
		}
		tag := lines[i+1]
		_, tag, _ = strings.Cut(tag, " ") // the macro: .B, .BR, .BI
		tag = italic.ReplaceAllString(tag, "")
		tag = strings.NewReplacer(`"`, "", `\-`, "-", "...", "").Replace(tag)
		for _, item := range strings.Split(tag, ",") {
			item = strings.Join(strings.Fields(item), "")
			item, _, _ = strings.Cut(item, "|") // values after the first
			name, _, _ := strings.Cut(item, "=")
			if name != "" {
				names[name] = true
			}
		}
	}
	return names
}

// The man page's MOUNT OPTIONS section documents every option of the
// table, and no option the table does not know.
func TestManPageOptions(t *testing.T) {
	man := manPageOptions(t)
	if len(man) < 40 {
		t.Fatalf("only %d options found in the man page: %v", len(man), man)
	}
	for _, op := range optionTable {
		for _, n := range op.names {
			if !man[n] {
				t.Errorf("option %s is not in the man page's MOUNT OPTIONS", n)
			}
		}
	}
	for n := range man {
		if optionNames[n] == nil {
			t.Errorf("the man page's MOUNT OPTIONS names %s, which the parser does not know", n)
		}
	}
}

// The usage names every option the parser knows but FUSE's (remount only).
func TestUsageOptions(t *testing.T) {
	words := make(map[string]bool)
	for _, w := range strings.FieldsFunc(usage, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' }) {
		name, _, _ := strings.Cut(w, "=")
		words[name] = true
	}
	for _, op := range optionTable {
		for _, n := range op.names {
			if !words[n] && !op.remountOnly {
				t.Errorf("option %s is not in the usage", n)
			}
		}
	}
	if words["user_id"] {
		t.Errorf("FUSE's user_id in the usage")
	}
}
