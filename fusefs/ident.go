package fusefs

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// The NFS calls made for a FUSE request run under a context of their own
// (FS.callCtx):
//
//   - Identity: they carry the caller's AUTH_SYS credential (uid, gid and up
//     to 16 supplementary groups, read from /proc/<pid>/status), as the
//     kernel client sends each process's own, when Options.CallerIdentity.
//     The calls made for an open file (its reads, writes, COMMITs, the
//     SETATTR of an ftruncate, its locks) carry the credential of the
//     process that opened it (openFile.callCtx).
//   - Killable: the kernel interrupts a FUSE request when its caller gets a
//     signal. As the kernel NFS client on a hard mount, only a fatal signal
//     (SIGKILL, or a signal whose default action kills and that the process
//     does not catch: the kernel makes it a SIGKILL) ends the NFS call
//     waited for; any other leaves it running. After an interrupt the
//     caller is watched until the call ends, for a fatal signal that comes
//     later (the kernel sends a request one interrupt only).
//   - The mount's lifetime (FS.Close) ends them all.

// fatalPoll is how often a caller interrupted by a signal that did not kill
// it is checked again for a fatal one.
const fatalPoll = 100 * time.Millisecond

// callCtx returns the context for the NFS calls of the FUSE request whose
// context is fctx, and the function to call when the request is done.
func (f *FS) callCtx(fctx context.Context) (context.Context, context.CancelFunc) {
	caller, ok := fuse.FromContext(fctx)
	if !ok || fctx.Done() == nil {
		// Not a request the kernel can interrupt: the mount's lifetime.
		ctx, cancel := context.WithCancel(f.ctx)
		if ok && f.opts.CallerIdentity && caller.Pid != 0 {
			if cctx, ok := f.creds.credential(caller); ok {
				cred, _ := sunrpc.CredentialFrom(cctx)
				ctx = sunrpc.WithCredential(ctx, cred)
			}
		}
		return ctx, cancel
	}
	// A request the kernel makes on its own (pid 0) has no caller: the
	// client's own credential, or the opener's (openFile.callCtx). The
	// caller's credential comes as a context of its own, cached with it,
	// that the request's context is made under: no context per request
	// for it.
	parent := context.Background()
	if f.opts.CallerIdentity && caller.Pid != 0 {
		if cctx, ok := f.creds.credential(caller); ok {
			parent = cctx
		}
	}
	// The request is watched for an interrupt only once it has lasted
	// watchAfter: most end sooner, and watching the FUSE request's
	// channel takes a goroutine of its own. One sweeper per mount looks
	// at the requests in flight (no timer or goroutine per request), and
	// FS.Close cancels them through the same list, so that the request's
	// context need not be a child of the mount's (a child costs the
	// parent's lock and an entry in its map, made and deleted per
	// request).
	ctx, cancel := context.WithCancel(parent)
	w := &reqWatch{fctx: fctx, ctx: ctx, cancel: cancel, pid: caller.Pid, log: f.log, l: &f.watches}
	f.watches.add(w)
	if f.ctx.Err() != nil { // closed before the add (Close cancels after it)
		cancel()
	}
	return ctx, w.done
}

// watchAfter is how often the requests in flight are looked at for an
// interrupt (see callCtx): a caller killed while its call waits is
// released within about that much more.
const watchAfter = 20 * time.Millisecond

// reqWatch is one request in flight, for the sweeper.
type reqWatch struct {
	fctx   context.Context // the FUSE request's: done when interrupted
	ctx    context.Context // its NFS calls'
	cancel context.CancelFunc
	pid    uint32
	log    *slog.Logger
	l      *watchList
	idx    int         // in watchList.reqs; -1 once removed
	stop   func() bool // the watch started on an interrupt
}

// done ends the request: it leaves the list and its calls' context ends.
func (w *reqWatch) done() {
	w.l.remove(w)
	w.cancel()
}

// watch runs once the request is interrupted: it cancels the request's
// calls now if the signal is fatal, else watches the caller until one is.
func (w *reqWatch) watch() {
	for {
		if fatalSignalPending(w.pid) {
			w.log.Debug("caller killed: cancelling its NFS call", "pid", w.pid)
			w.cancel()
			return
		}
		select {
		case <-w.ctx.Done():
			return
		case <-time.After(fatalPoll):
		}
	}
}

// watchList is the mount's requests in flight and their sweeper: a timer
// armed while any request is in flight, so that a request costs no
// goroutine wake-up of its own (most end long before watchAfter).
type watchList struct {
	mu    sync.Mutex
	reqs  []*reqWatch
	armed bool // a sweep is due within watchAfter
}

func (l *watchList) add(w *reqWatch) {
	l.mu.Lock()
	w.idx = len(l.reqs)
	l.reqs = append(l.reqs, w)
	if !l.armed {
		l.armed = true
		time.AfterFunc(watchAfter, l.sweep)
	}
	l.mu.Unlock()
}

func (l *watchList) remove(w *reqWatch) {
	l.mu.Lock()
	if i := w.idx; i >= 0 {
		last := len(l.reqs) - 1
		l.reqs[i] = l.reqs[last]
		l.reqs[i].idx = i
		l.reqs[last] = nil
		l.reqs = l.reqs[:last]
		w.idx = -1
	}
	stop := w.stop
	l.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// cancelAll cancels the NFS calls of every request in flight (FS.Close).
func (l *watchList) cancelAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range l.reqs {
		w.cancel()
	}
}

// sweep starts the watch of each request in flight that was interrupted,
// and comes back after watchAfter while any is in flight: a request
// interrupted while it waits is looked at within two watchAfter.
func (l *watchList) sweep() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range l.reqs {
		if w.stop != nil {
			continue
		}
		select {
		case <-w.fctx.Done():
			w.stop = context.AfterFunc(w.fctx, w.watch)
		default:
		}
	}
	if len(l.reqs) > 0 {
		time.AfterFunc(watchAfter, l.sweep)
	} else {
		l.armed = false
	}
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
	return withCred(ctx, f.wctx), done
}

// withCred returns ctx (for its deadline and cancellation) carrying the
// credential that from carries, or ctx as it is if from carries none.
func withCred(ctx, from context.Context) context.Context {
	if from == nil {
		return ctx
	}
	if cred, ok := sunrpc.CredentialFrom(from); ok {
		return sunrpc.WithCredential(ctx, cred)
	}
	return ctx
}

// sameCred reports whether a and b carry the same credential (or neither
// carries one).
func sameCred(a, b context.Context) bool {
	if a == b {
		return true
	}
	ca, oka := sunrpc.CredentialFrom(a)
	cb, okb := sunrpc.CredentialFrom(b)
	return oka == okb && ca.Flavor == cb.Flavor && bytes.Equal(ca.Body, cb.Body)
}

// callCred is the credential a call carried, kept with what it wrote for
// the calls that follow from it (the COMMIT, a resend).
type callCred struct {
	auth sunrpc.OpaqueAuth
	set  bool // the call carried one (else the client's own)
}

// credOf returns the credential ctx carries.
func credOf(ctx context.Context) callCred {
	a, ok := sunrpc.CredentialFrom(ctx)
	return callCred{a, ok}
}

// on returns ctx carrying c (ctx as it is if c is unset).
func (c callCred) on(ctx context.Context) context.Context {
	if !c.set {
		return ctx
	}
	return sunrpc.WithCredential(ctx, c.auth)
}

// fatalSignalPending reports whether thread pid has SIGKILL pending (a
// fatal signal: the kernel queues SIGKILL to every thread of a process it
// is killing) or is gone.
func fatalSignalPending(pid uint32) bool {
	if pid == 0 {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/status")
	if err != nil {
		return os.IsNotExist(err)
	}
	const sigkill = 1 << (9 - 1)
	for line := range bytes.Lines(b) {
		for _, key := range []string{"SigPnd:", "ShdPnd:"} {
			if v, ok := bytes.CutPrefix(line, []byte(key)); ok {
				m, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 16, 64)
				if err == nil && m&sigkill != 0 {
					return true
				}
			}
		}
		if v, ok := bytes.CutPrefix(line, []byte("State:")); ok {
			// Zombie or dead: the caller is gone.
			s := bytes.TrimSpace(v)
			if len(s) > 0 && (s[0] == 'Z' || s[0] == 'X') {
				return true
			}
		}
	}
	return false
}

// credTTL is how long a caller's supplementary groups, read from /proc, are
// reused for the same pid, uid and gid.
const credTTL = time.Second

// maxCreds bounds the credential cache.
const maxCreds = 4096

// credCache builds and caches the AUTH_SYS credentials of FUSE callers.
type credCache struct {
	host    string
	stamp   uint32
	procDir string // "/proc"; tests may point it elsewhere
	now     func() time.Time

	mu sync.Mutex
	m  map[credKey]credEntry
}

type credKey struct{ pid, uid, gid uint32 }

type credEntry struct {
	ctx context.Context // holds the credential (sunrpc.WithCredential)
	at  time.Time
}

func newCredCache() *credCache {
	host, _ := os.Hostname()
	if len(host) > sunrpc.MaxMachineName {
		host = host[:sunrpc.MaxMachineName]
	}
	return &credCache{host: host, stamp: uint32(time.Now().Unix()), procDir: "/proc", now: time.Now, m: make(map[credKey]credEntry)}
}

// credential returns a context that carries the AUTH_SYS credential of
// caller (sunrpc.CredentialFrom) and nothing else, never cancelled: the
// parent of its requests' contexts.
func (c *credCache) credential(caller *fuse.Caller) (context.Context, bool) {
	k := credKey{caller.Pid, caller.Uid, caller.Gid}
	now := c.now()
	c.mu.Lock()
	e, ok := c.m[k]
	c.mu.Unlock()
	if ok && now.Sub(e.at) < credTTL {
		return e.ctx, true
	}
	a := sunrpc.AuthSys{Stamp: c.stamp, MachineName: c.host, UID: caller.Uid, GID: caller.Gid, GIDs: c.groups(caller.Pid)}
	cred, err := a.Credential()
	if err != nil {
		return nil, false
	}
	ctx := sunrpc.WithCredential(context.Background(), cred)
	c.mu.Lock()
	if len(c.m) >= maxCreds {
		for k, e := range c.m {
			if now.Sub(e.at) >= credTTL {
				delete(c.m, k)
			}
		}
		if len(c.m) >= maxCreds {
			clear(c.m)
		}
	}
	c.m[k] = credEntry{ctx: ctx, at: now}
	c.mu.Unlock()
	return ctx, true
}

// groups returns the supplementary groups of thread pid from the "Groups:"
// line of its /proc status, at most sunrpc.MaxAuthSysGIDs
// (as the kernel client, which sends the first 16).
func (c *credCache) groups(pid uint32) []uint32 {
	if pid == 0 {
		return nil
	}
	// A plain open and read, not os.Open: an os.File would also try the
	// netpoller and set flags, four more system calls per caller met.
	fd, err := syscall.Open(c.procDir+"/"+strconv.FormatUint(uint64(pid), 10)+"/status", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	// The Groups line comes early (after about 20 short lines), and the
	// first 16 groups take at most 176 bytes of it.
	var buf [4096]byte
	n := 0
	for n < len(buf) {
		m, err := syscall.Read(fd, buf[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil || m <= 0 {
			break
		}
		n += m
		if i := bytes.Index(buf[:n], []byte("\nGroups:")); i >= 0 && bytes.IndexByte(buf[i+1:n], '\n') >= 0 {
			break // the line is whole: no read for the end of the file
		}
	}
	syscall.Close(fd)
	for line := range bytes.Lines(buf[:n]) {
		v, ok := bytes.CutPrefix(line, []byte("Groups:"))
		if !ok {
			continue
		}
		fields := bytes.Fields(v)
		if !bytes.HasSuffix(v, []byte("\n")) && len(fields) > 0 {
			fields = fields[:len(fields)-1] // cut by the buffer: may be partial
		}
		var gids []uint32
		for _, w := range fields {
			g, err := strconv.ParseUint(string(w), 10, 32)
			if err != nil {
				continue
			}
			gids = append(gids, uint32(g))
			if len(gids) == sunrpc.MaxAuthSysGIDs {
				break
			}
		}
		return gids
	}
	return nil
}
