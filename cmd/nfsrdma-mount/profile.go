package main

import (
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
)

// memProfileRate is the allocation profile's sampling interval when
// NFSRDMA_MEMPROFILE is set: one sample per 4 KiB allocated, fine enough
// that the small allocations a call makes are each seen, where the
// runtime's default (512 KiB) samples only the bulk.
const memProfileRate = 4096

// startProfile writes a CPU profile of the mounted server, from now until
// the returned function is called (at unmount), to the file named by
// NFSRDMA_CPUPROFILE, and an execution trace (go tool trace: where a FUSE
// request waits between goroutines) to the file named by NFSRDMA_TRACE,
// when they are set, and an allocation profile (go tool pprof
// -sample_index=alloc_objects: what allocates, how often) to the file named
// by NFSRDMA_MEMPROFILE at unmount: developers' tools for finding what a
// FUSE request costs on the machine that runs the mount.
func startProfile(log *slog.Logger) (stop func()) {
	var stops []func()
	if os.Getenv("NFSRDMA_MEMPROFILE") != "" {
		// Set before the allocations it is to see; the profile is
		// written at unmount, after a collection so that it is complete.
		runtime.MemProfileRate = memProfileRate
		stops = append(stops, func() {
			if f := createProfile(log, "NFSRDMA_MEMPROFILE"); f != nil {
				runtime.GC()
				if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
					log.Warn("allocation profile", "err", err)
				}
				closeProfile(log, f)
			}
		})
	}
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
