// Package integration holds nfsrdma's integration suite and benchmarks. The
// tests (build tag "integration") are compiled on the host with cgo and run
// inside the test-bed guest (integration/testbed) against knfsd over
// Soft-RoCE: `make test` does both. Run anywhere else, the suite fails at
// once instead of passing silently.
package integration
