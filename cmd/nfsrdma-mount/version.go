package main

import (
	"runtime"
	"runtime/debug"
)

// version is set at build time (the Makefile passes
// -ldflags "-X main.version=$(git describe)"); without it the module
// version or VCS revision Go recorded in the binary is used.
var version string

// versionString returns the version, the VCS revision when known, the Go
// release that built the binary, and whether RDMA is in it (cgo).
func versionString() string {
	v := version
	var rev, modified string
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					modified = "-dirty"
				}
			}
		}
	}
	if v == "" {
		v = "devel"
		if rev != "" {
			v += " " + shortRev(rev) + modified
		}
	}
	return v + " (" + runtime.Version() + "; " + rdmaBuild + ")"
}

func shortRev(r string) string {
	if len(r) > 12 {
		return r[:12]
	}
	return r
}
