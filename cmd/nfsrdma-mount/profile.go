package main

import (
	"log/slog"
	"os"
	"runtime/pprof"
)

// startProfile writes a CPU profile of the mounted server, from now until
// the returned function is called (at unmount), to the file named by
// NFSRDMA_CPUPROFILE when it is set: a developer's tool for finding what a
// FUSE request costs on the machine that runs the mount.
func startProfile(log *slog.Logger) (stop func()) {
	path := os.Getenv("NFSRDMA_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		log.Warn("CPU profile", "err", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		log.Warn("CPU profile", "err", err)
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			log.Warn("CPU profile", "err", err)
		}
	}
}
