//go:build !linux || !cgo

package main

// rdmaBuild says whether this build has RDMA: not without cgo on Linux.
const rdmaBuild = "no RDMA: built without cgo, proto=tcp only"

// rdmaBuiltIn reports whether proto=rdma can work in this build.
const rdmaBuiltIn = false
