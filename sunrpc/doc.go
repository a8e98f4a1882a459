// Package sunrpc is ONC RPC version 2 (RFC 5531) for the NFS client: XDR
// encoding (RFC 4506), call and reply messages with typed errors for every
// rejection and accept status, AUTH_NONE and AUTH_SYS credentials, XID
// allocation, the Transport interface the RDMA transport implements, a TCP
// transport with record marking (RFC 5531 §11) that connects from a reserved
// source port (below 1024) when the process may bind one, as the Linux
// client's "resvport" does, and the port mapper's GETPORT (RFC 1833).
//
// A call message is handed to a Transport as a Request in three parts, Head,
// Bulk and Tail, so that a DDP-eligible argument (RFC 8267 §3: WRITE data, a
// SYMLINK path) is never copied into the inline buffer; a reply whose
// DDP-eligible result was placed apart (an RDMA Write chunk) arrives as a Reply
// with Bulk set, and Decoder.Bulk reads that item from it.
//
// MeteredTransport wraps any Transport with per-procedure accounting (calls,
// errors, timeouts, bytes each way, a round-trip histogram), the numbers of
// the per-op lines of /proc/self/mountstats; the programs' packages name
// their procedures for it (ProcNamer), so that this package imports none.
//
// Encoders append to a caller's slice. Decoders check every bound and never
// panic; a Decoder keeps its first error, which Err reports.
package sunrpc
