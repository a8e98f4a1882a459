// Package caller is who a FUSE request's NFS calls run as and how long they
// may run: the AUTH_SYS credential of the process that made the request,
// and the cancellation of the calls of a request whose process got a fatal
// signal. It knows nothing of go-fuse or of the file system's types: a
// caller is a pid, uid and gid, and an interrupt is the end of a context.
//
// Identity (Credentials, Cred): the calls carry the caller's uid, gid and
// up to sunrpc.MaxAuthSysGIDs supplementary groups, read from
// /proc/<pid>/status, as the kernel client sends each process's own. A
// credential is built once per pid, uid and gid and reused for credTTL;
// the cache holds at most maxCreds. A credential travels as a context
// (sunrpc.WithCredential) that carries nothing else and is never
// cancelled, so that a request's context can be made under it with no
// context per request for the credential. Cred keeps the credential a
// call carried for the calls that follow from it (a COMMIT, a resend).
//
// Interrupts (Watches): as the kernel NFS client on a hard mount, only a
// fatal signal (SIGKILL, or a signal whose default action kills and that
// the process does not catch: the kernel makes it a SIGKILL) ends the NFS
// call waited for; any other leaves it running. A request is looked at
// only once it has lasted about watchAfter (most end sooner): one sweep
// per Watches, armed by a timer while any request is in flight, starts a
// watch of each request the kernel interrupted; the watch cancels the
// request's calls when its process has a fatal signal pending or is gone,
// and looks again every fatalPoll until the request ends (the kernel
// interrupts a request once only, however many signals follow). Close
// cancels every request in flight and each one started after it.
//
// Invariants: a request is in Watches.reqs from Start until its done
// function runs, at most one watch runs per request, and a request's
// context is cancelled by its done function, by its watch (fatal signal),
// or by Close, whichever comes first.
package caller
