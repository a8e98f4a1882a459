// Package rpcrdma is the wire codec of RPC-over-RDMA version 1: the
// transport header that precedes every RPC message on an RDMA Send
// (RFC 8166 §4), its chunk lists (RFC 8166 §3.4, §4.3), the RDMA_ERROR body
// (RFC 8166 §4.5), and the RDMA-CM private data exchanged when a connection
// is established (RFC 8797 §4).
//
// The package is pure: no I/O, no goroutines, no global state. Encoders
// append to a caller's buffer; decoders take a byte slice, never panic,
// check every length against the input and against the limits below, and
// report malformed input with the typed errors of this package. A Header
// that is decoded into repeatedly reuses its slices, so the steady-state
// receive path does not allocate.
//
// Decoding is syntactic only. Whether a reply may carry a Read list, or
// whether a Write chunk matches the one the call offered, is the caller's
// business: the codec only guarantees that what it returns is well formed
// and bounded.
package rpcrdma
