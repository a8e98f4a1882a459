package caller

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// credTTL is how long a caller's supplementary groups, read from /proc, are
// reused for the same pid, uid and gid.
const credTTL = time.Second

// maxCreds bounds the credential cache.
const maxCreds = 4096

// Credentials builds and caches the AUTH_SYS credentials of callers. mu
// guards m; an entry is used for credTTL after it was built, and m holds
// at most maxCreds entries.
type Credentials struct {
	host    string
	stamp   uint32
	procDir string
	now     func() time.Time

	mu sync.Mutex
	m  map[credKey]credEntry
}

type credKey struct{ pid, uid, gid uint32 }

type credEntry struct {
	ctx context.Context // holds the credential (sunrpc.WithCredential)
	at  time.Time
}

// NewCredentials returns an empty cache that reads the callers' groups
// from procDir ("" for /proc) and tells the time with now (nil for
// time.Now).
func NewCredentials(procDir string, now func() time.Time) *Credentials {
	if procDir == "" {
		procDir = "/proc"
	}
	if now == nil {
		now = time.Now
	}
	host, _ := os.Hostname()
	if len(host) > sunrpc.MaxMachineName {
		host = host[:sunrpc.MaxMachineName]
	}
	return &Credentials{host: host, stamp: uint32(now().Unix()), procDir: procDir, now: now, m: make(map[credKey]credEntry)}
}

// For returns a context that carries the AUTH_SYS credential of the
// caller, thread pid running as uid and gid (sunrpc.CredentialFrom), and
// nothing else, never cancelled: the parent of its requests' contexts. It
// is false when no credential can be built (a machine name or group list
// AUTH_SYS cannot carry).
func (c *Credentials) For(pid, uid, gid uint32) (context.Context, bool) {
	k := credKey{pid, uid, gid}
	now := c.now()
	c.mu.Lock()
	e, ok := c.m[k]
	c.mu.Unlock()
	if ok && now.Sub(e.at) < credTTL {
		return e.ctx, true
	}
	a := sunrpc.AuthSys{Stamp: c.stamp, MachineName: c.host, UID: uid, GID: gid, GIDs: c.groups(pid)}
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
// line of its /proc status, at most sunrpc.MaxAuthSysGIDs (as the kernel
// client, which sends the first 16).
func (c *Credentials) groups(pid uint32) []uint32 {
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

// WithCredOf returns ctx (for its deadline and cancellation) carrying the
// credential that from carries, or ctx as it is if from is nil or carries
// none.
func WithCredOf(ctx, from context.Context) context.Context {
	if from == nil {
		return ctx
	}
	if cred, ok := sunrpc.CredentialFrom(from); ok {
		return sunrpc.WithCredential(ctx, cred)
	}
	return ctx
}

// SameCred reports whether a and b carry the same credential (or neither
// carries one).
func SameCred(a, b context.Context) bool {
	if a == b {
		return true
	}
	ca, oka := sunrpc.CredentialFrom(a)
	cb, okb := sunrpc.CredentialFrom(b)
	return oka == okb && ca.Flavor == cb.Flavor && bytes.Equal(ca.Body, cb.Body)
}

// Cred is the credential a call carried, kept with what it wrote for the
// calls that follow from it (the COMMIT, a resend). The zero Cred is the
// client's own.
type Cred struct {
	auth sunrpc.OpaqueAuth
	set  bool // the call carried one (else the client's own)
}

// CredOf returns the credential ctx carries.
func CredOf(ctx context.Context) Cred {
	a, ok := sunrpc.CredentialFrom(ctx)
	return Cred{a, ok}
}

// On returns ctx carrying c (ctx as it is if c is the client's own).
func (c Cred) On(ctx context.Context) context.Context {
	if !c.set {
		return ctx
	}
	return sunrpc.WithCredential(ctx, c.auth)
}
