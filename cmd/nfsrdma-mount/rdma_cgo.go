//go:build linux && cgo

package main

// rdmaBuild says whether this build has RDMA: verbs/ibv through cgo.
const rdmaBuild = "RDMA built in: cgo verbs, libibverbs and librdmacm"

// rdmaBuiltIn reports whether proto=rdma can work in this build.
const rdmaBuiltIn = true
