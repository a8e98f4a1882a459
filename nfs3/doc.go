// Package nfs3 is an NFS version 3 client (RFC 1813) on any sunrpc.Transport,
// with the MOUNT version 3 protocol (RFC 1813 Appendix I).
//
// Mount mounts an export: MOUNT over TCP for the root handle, then the NFS
// connections (MountOptions.NConnect of them; TCP, or those
// MountOptions.Dial makes), and the Target it returns owns them; MountTCP
// takes a "host:/export" spec. Package nfsrdma (the module's root) mounts
// over RDMA in one call through MountOptions.Dial; this package itself is
// pure Go.
//
// Client is the handle-based API: the 22 procedures of RFC 1813 §3.3 with
// their full arguments and results, JUKEBOX retries, directory paging with
// loop detection, and a throughput layer (ReadAt, WriteAt) that splits large
// transfers into READs and WRITEs of the negotiated size with a window of them
// outstanding, writing UNSTABLE and committing, resending if the write verifier
// changes. READ data and READLINK paths are offered to the transport as
// Request.ReplyBulk and WRITE data and SYMLINK paths travel as Request.Bulk
// (the DDP-eligible items of RFC 8267 §3), so an RDMA transport moves them
// without copies. GetACL and SetACL read and set an object's POSIX ACLs
// with NFSACL, the Linux and Solaris servers' side protocol on the same
// transport (acl.go).
//
// Target and File are the path-based API, shaped like go-nfs-client's (see
// MIGRATING.md). Paths are io/fs names ("docs/a", "." for the root); the
// methods that are not io/fs's also take go-nfs-client's rooted paths
// ("/docs/a"), a deprecated form. Every method that calls the server takes
// a context, except those whose signatures io/fs and io fix, which run
// under the Target's lifetime and each have a twin with the Context suffix
// (Stat and StatContext, Read and ReadContext). Target is also an io/fs file system (fs.FS, fs.ReadDirFS,
// fs.StatFS, fs.ReadFileFS: fs.WalkDir, fs.Glob, http.FS and testing/fstest
// work on an export) and *File an fs.File and fs.ReadDirFile. OpenFileContext takes
// os.OpenFile's flags (O_CREATE, O_EXCL as an EXCLUSIVE create, O_TRUNC,
// O_APPEND, the access modes). File's io methods honour deadlines
// (SetDeadline) and have *Context variants, so that a server that stops
// answering does not hold a caller until Target.Close.
//
// Like the Linux client, the package sends AUTH_SYS with the process's ids
// unless told otherwise (ClientOptions.AuthNone, MountOptions.Cred), connects
// over TCP from a reserved source port when the process may bind one
// (MountOptions.NoResvPort opts out), clamps the times it sends to NFSv3's
// unsigned 32-bit seconds, and maps NFS errors to errno values as the kernel
// client does: errors are Status values inside *fs.PathError that read as
// the status and its meaning ("open docs/a: NFS3ERR_ACCES (permission
// denied)") and match io/fs sentinels and syscall errors with errors.Is.
//
// Package nfs3test is a conformance suite for the path API, and gonfstest
// an in-process go-nfs server for tests.
package nfs3
