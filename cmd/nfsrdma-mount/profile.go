package main

import (
	"log/slog"
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// startProfile writes a CPU profile of the mounted server, from now until
// the returned function is called (at unmount), to the file named by
// NFSRDMA_CPUPROFILE, and an execution trace (go tool trace: where a FUSE
// request waits between goroutines) to the file named by NFSRDMA_TRACE,
// when they are set: developers' tools for finding what a FUSE request
// costs on the machine that runs the mount.
func startProfile(log *slog.Logger) (stop func()) {
	var stops []func()
	if f := createProfile(log, "NFSRDMA_CPUPROFILE"); f != nil {
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Warn("CPU profile", "err", err)
			f.Close()
		} else {
			stops = append(stops, func() { pprof.StopCPUProfile(); closeProfile(log, f) })
		}
	}
	if f := createProfile(log, "NFSRDMA_TRACE"); f != nil {
		if err := trace.Start(f); err != nil {
			log.Warn("execution trace", "err", err)
			f.Close()
		} else {
			stops = append(stops, func() { trace.Stop(); closeProfile(log, f) })
		}
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}
}

func createProfile(log *slog.Logger, env string) *os.File {
	path := os.Getenv(env)
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		log.Warn("profile", "env", env, "err", err)
		return nil
	}
	return f
}

func closeProfile(log *slog.Logger, f *os.File) {
	if err := f.Close(); err != nil {
		log.Warn("profile", "file", f.Name(), "err", err)
	}
}
