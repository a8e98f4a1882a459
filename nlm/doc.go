// Package nlm is a client of the Network Lock Manager, version 4 (the X/Open
// NLM protocol with the 64-bit offsets and NFSv3 file handles of RFC 1813
// Appendix II), and of the status monitor (NSM, rpc.statd) the lock manager
// relies on, so that byte-range locks taken through an NFSv3 mount are seen
// by every client of the server, as the kernel client's "lock" gives them.
//
// Client encodes and sends the calls (TEST, LOCK, CANCEL, UNLOCK, and NSM's
// SM_STAT) over TCP with the sunrpc package, even when the NFS traffic goes
// over RDMA, as the Linux client does; the ports of the server's lockd
// (program 100021) and statd (100024) come from its port mapper, and are
// looked up again after a lost connection, since lockd takes a new port when
// it restarts.
//
// Locker is the lock table of one mount:
//
//   - Owners: each lock owner (FUSE's lock owner: a process's file table for
//     POSIX locks, an open file for flock) gets its own svid and owner
//     handle ("svid@host"); the svids are random above 2^30, because the
//     server keeps the locks of every NLM client of this host (one caller
//     name, one address) in one table, where the kernel's own client numbers
//     its owners from 1.
//   - Blocking locks (F_SETLKW) are sent with block set and sent again every
//     RetryInterval until granted: the server's NLM_GRANTED callback goes to
//     this host's lockd (the kernel's), which a user-space client cannot
//     replace. When the caller gives up (interrupted), a CANCEL withdraws the
//     request. A close gives back the whole file for the owner, so that a
//     lock granted after its caller gave up does not outlive it.
//   - Grace: a call the server answers with NLM4_DENIED_GRACE_PERIOD is sent
//     again until the grace period is over (F_SETLK and F_GETLK wait, as on
//     the Linux client).
//   - Server restarts: while locks are held, the server is watched every
//     MonitorInterval: its lockd's connection (lost, or lockd on a new port)
//     and its statd's NSM state (SM_STAT; it changes at a reboot), and any
//     grace period a call meets. Then every held lock is sent again with
//     reclaim set, within the grace period. A server that did not lose the
//     locks refuses a reclaim outside its grace period; unless it is known
//     to have restarted (a new NSM state, or its reboot notification) the
//     lock is then asked for as a new one, which it grants to the owner that
//     still holds it. A lock another client took meanwhile, or whose
//     server's grace period was missed, is lost: logged, counted (Lost) and
//     reported to the function given to OnLost.
//   - Reboot notifications: while locks are held, this host's statd
//     monitors the server for the Locker (SM_MON; SM_UNMON when the last
//     lock goes), calling back a UDP listener of the Locker when the
//     server's statd announces a reboot (SM_NOTIFY); the reclaim then starts
//     at once (see notify.go for how the callback gets past rpc.statd's
//     rules). Without a local statd and rpcbind to take it, the watching
//     above alone finds restarts.
//   - This host's NSM state (SM_STAT to the local statd) is sent in every
//     LOCK.
package nlm
