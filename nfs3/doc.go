// Package nfs3 is an NFS version 3 client (RFC 1813) on any sunrpc.Transport,
// with the MOUNT version 3 protocol (RFC 1813 Appendix I).
//
// Client is the handle-based API: the 22 procedures of RFC 1813 §3.3 with
// their full arguments and results, JUKEBOX retries, directory paging with
// loop detection, and a throughput layer (ReadAt, WriteAt) that splits large
// transfers into READs and WRITEs of the negotiated size with a window of them
// outstanding, writing UNSTABLE and committing, resending if the write verifier
// changes. READ data and READLINK paths are offered to the transport as
// Request.ReplyBulk and WRITE data and SYMLINK paths travel as Request.Bulk
// (the DDP-eligible items of RFC 8267 §3), so an RDMA transport moves them
// without copies.
//
// Target and File are the path-based API, shaped like go-nfs-client's (see
// MIGRATING.md). Errors are Status values (NFS3ERR_*) that match io/fs and
// syscall errors with errors.Is.
package nfs3
