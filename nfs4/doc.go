// Package nfs4 is an NFS version 4.1 client (RFC 8881) with the NFSv4.2
// operations of RFC 7862 (minor version 2 when the server has it), on any sunrpc.Transport: TCP (port 2049, no port
// mapper and no MOUNT protocol) or RPC-over-RDMA through package xprt (port
// 20049).
//
// # Sessions
//
// NewClient establishes a client ID (EXCHANGE_ID with SP4_NONE and an owner
// unique per host, process and Client) and a session (CREATE_SESSION without
// a back channel), then sends RECLAIM_COMPLETE. The fore channel is sized
// from the options and the transport: requests and responses for a MaxIO
// READ or WRITE and their compound; cached responses of the RDMA inline
// receive size; slots up to MaxSlots and never more than the transport's
// credit grant (xprt.Transport.Credits), so that the session's flow control
// and RPC-over-RDMA's agree. Every compound starts with SEQUENCE on a slot
// of the SlotTable, which is the session's flow control: a call waits for a
// free slot, the server's target_highest_slotid shrinks or grows the slots
// used, a slot whose request had an unknown outcome is stepped back on
// SEQ_MISORDERED. A transport that reconnects retransmits the same request
// (same slot and sequence id), which the server's reply cache recognises. A
// goroutine renews the lease with SEQUENCE alone after half a lease of
// idleness. NFS4ERR_DELAY and NFS4ERR_GRACE are retried after a pause;
// BADSESSION and DEADSESSION replace the session, STALE_CLIENTID (a server
// restart) the client ID too. Close sends DESTROY_SESSION and
// DESTROY_CLIENTID.
//
// # Operations
//
// Client is the handle API, one COMPOUND per call: PUTROOTFH, PUTFH, GETFH,
// LOOKUP (a whole path in one compound), LOOKUPP, GETATTR and SETATTR of the
// attributes a file system needs (type, size, change, mode, owner and
// owner_group as strings, numeric ids through Attr.UID/GID and OwnerID,
// times, fileid, fsid, space, lease_time, maxread/maxwrite), ACCESS, OPEN
// (UNCHECKED4, GUARDED4, EXCLUSIVE4_1; share access and deny; an open owner
// per open; delegations declined) and CLOSE, READ, WRITE, COMMIT, CREATE of
// directories and symbolic links, REMOVE, RENAME, LINK, READLINK, READDIR,
// LOCK, LOCKT and LOCKU, and NFSv4.2's SEEK, ALLOCATE, DEALLOCATE and
// (synchronous, intra-server) COPY. ReadAt and WriteAt split large
// transfers with a window of calls outstanding, UNSTABLE then COMMIT with
// the verifier checked. Errors are *OpError, naming the operation and
// unwrapping to its Status, which maps to errno values and io/fs sentinels
// as the Linux client does.
//
// Over RPC-over-RDMA the DDP-eligible items of a COMPOUND (RFC 8267 §6.1)
// travel as the request's bulk part exactly as nfs3's do: WRITE data and a
// symbolic link's text as Request.Bulk (in a Read chunk when the call does
// not fit inline), READ data landing in the caller's buffer offered as
// Request.ReplyBulk (a Write chunk). A compound carries at most one such
// item. READLINK text is DDP-eligible too but, as with the Linux client,
// comes inline or in a Reply chunk: knfsd (Linux 6.1) places the NFSv4
// READLINK payload wrongly in a Write chunk.
//
// The minor version is the highest of ClientOptions.MinorVersion (default
// 2) that the server accepts at EXCHANGE_ID; a 4.1-only server gets 1.
//
// Target is the path API and io/fs file system (fs.FS, fs.StatFS,
// fs.ReadDirFS, fs.ReadFileFS; testing/fstest passes on knfsd), shaped like
// nfs3.Target: Mount or MountTCP (or nfsrdma.MountV4 over RDMA), OpenFile
// with os.OpenFile's flags, Context variants, *File with ReadAt, WriteAt,
// Seek, Truncate and ReadDir. A regular File holds an OPEN until Close;
// Target.Close ends those still open before destroying the client ID.
//
// # Not yet
//
// No back channel (so no delegations, no CB_OFFLOAD: an asynchronous COPY
// is an error), no reclaim of open and lock state after the server restarts
// (recovery makes a new client ID; old stateids then fail; a lease that
// lapsed is recovered the same way once the server drops the client), no
// RPCSEC_GSS
// and no SP4_MACH_CRED, no pNFS, no named attributes or ACLs, no
// OPEN_DOWNGRADE, FREE_STATEID or TEST_STATEID, no READ_PLUS, no trunking or session over several
// connections, no multi-component symbolic-link resolution in the path API,
// no data or attribute caching, and no FUSE mount (fusefs speaks NFSv3).
// ca_rdma_ird is left empty, as the Linux client leaves it: RPC-over-RDMA
// version 1 negotiates its read depth in its connection setup, and the
// session's RDMA mode (CREATE_SESSION4_FLAG_CONN_RDMA) is not used
// (ClientOptions.Fore can set it).
package nfs4
