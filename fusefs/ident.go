package fusefs

import (
	"context"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nfsrdma/nfsrdma/fusefs/internal/caller"
)

// The NFS calls made for a FUSE request run under a context of their own
// (FS.callCtx), as package caller makes it:
//
//   - Identity: they carry the caller's AUTH_SYS credential (uid, gid and up
//     to 16 supplementary groups) when Options.CallerIdentity. The calls
//     made for an open file (its reads, writes, COMMITs, the SETATTR of an
//     ftruncate, its locks) carry the credential of the process that
//     opened it (openFile.callCtx).
//   - Killable: only a fatal signal to the caller ends the NFS call it
//     waits for, as on the kernel client's hard mount (caller.Watches).
//   - The mount's lifetime (FS.Close) ends them all.

// credCache is the mount's caller.Credentials, asked with go-fuse's
// description of the caller.
type credCache struct{ *caller.Credentials }

func newCredCache() credCache { return credCache{caller.NewCredentials("", nil)} }

// credential returns the context carrying c's credential (see
// caller.Credentials.For).
func (cc credCache) credential(c *fuse.Caller) (context.Context, bool) {
	return cc.For(c.Pid, c.Uid, c.Gid)
}

// callCtx returns the context for the NFS calls of the FUSE request whose
// context is fctx, and the function to call when the request is done.
func (f *FS) callCtx(fctx context.Context) (context.Context, context.CancelFunc) {
	c, ok := fuse.FromContext(fctx)
	// A request the kernel makes on its own (pid 0) has no caller: the
	// client's own credential, or the opener's (openFile.callCtx).
	var cred context.Context
	if ok && f.opts.CallerIdentity && c.Pid != 0 {
		cred, _ = f.creds.credential(c)
	}
	if !ok || fctx.Done() == nil {
		// Not a request the kernel can interrupt: the mount's lifetime.
		ctx, cancel := context.WithCancel(f.ctx)
		return caller.WithCredOf(ctx, cred), cancel
	}
	parent := context.Background()
	if cred != nil {
		parent = cred
	}
	return f.watches.Start(fctx, parent, c.Pid)
}

// callCtx is FS.callCtx for a request on the open file f: its calls carry
// the credential of the process that opened the file, whoever makes the
// request (a descriptor inherited across a change of user, as a shell's
// redirection under runuser or setpriv gives, one passed over a unix
// socket, a daemon that drops its privileges after opening), as the
// kernel client's READ, WRITE, COMMIT, SETATTR of an ftruncate and NLM
// calls carry the credential of the file's open context
// (nfs_file_cred). The kernel makes some requests on its own (pid 0: the
// write-back of mmap-ed pages, through any handle of the file open for
// writing): the same.
func (f *openFile) callCtx(fctx context.Context) (context.Context, context.CancelFunc) {
	ctx, done := f.n.fsys.callCtx(fctx)
	return caller.WithCredOf(ctx, f.wctx), done
}
