// Package memlock sizes an RDMA transport's registered memory to the
// process's locked-memory limit (RLIMIT_MEMLOCK), before anything is
// dialed: the mount helper and the library's one-call mount (package
// nfsrdma) both use it, and so may any program that calls xprt.Dial.
//
// Every byte an RDMA transport registers (ibv_reg_mr) is pinned, and the
// kernel counts it against the process's RLIMIT_MEMLOCK unless the process
// has CAP_IPC_LOCK (root has). A transport with xprt's defaults registers
// about 42 MiB, where Debian gives users 8 MiB; ibv_reg_mr then fails with
// ENOMEM in the middle of connecting, a failure no retry repairs. Fit sizes
// the transport's pool to the limit (xprt.Config's Slots, IOBuffers and
// RegisterAhead: fewer calls and large I/Os in flight at once), or refuses
// at once, naming the fix, when even the smallest pool does not fit.
//
// What one transport registers, at most (xprt and frwr, for a given
// Config):
//   - send buffers: SendQueue (4 per slot) of Inline bytes, and receive
//     buffers: Slots+8 of Inline bytes, counted twice, since a reconnect
//     may register the new connection's before the old one's are released;
//   - the I/O buffers: IOBuffers of MaxIO+4 KiB, registered whole, and
//     counted twice: with per-I/O registration (rxe) each call in flight
//     also registers its segments, up to one I/O buffer per buffer it holds;
//   - with per-I/O registration, the registrations made ahead: at most 8
//     sizes of RegisterAhead registrations each, of up to 64 KiB;
//   - lockedSlack for the provider's own pinned queues (rxe pins none;
//     mlx5 registers its CQ and QP buffers).
//
// The pool sized to a limit keeps xprt's defaults where they fit; else it
// takes fewer slots, two registrations made ahead per size (none if need
// be) and as many I/O buffers as fit, at least GoodIOBuffers; when the
// caller fixed no I/O size, the largest I/O (from the one asked for down
// to 64 KiB, halving) for which that many fit. Below that, the largest I/O
// for which MinIOBuffers fit; below that, an *Error.
package memlock

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/xprt"
)

// Constants of xprt and frwr that size their registered memory (see
// xprt.Config's defaults and frwr's ready stock).
const (
	xprtSlots      = 128
	xprtIOBuffers  = 32
	xprtAhead      = 8
	xprtExtraRecvs = 8
	xprtInline     = 4096
	xprtMaxIO      = 1 << 20
	readyKeys      = 8
	readyMax       = 64 << 10
	readyCap       = 8 << 20
	lockedSlack    = 256 << 10
	pageSize       = 4096
	smallAhead     = 2
	minSizedIO     = 64 << 10
	capIPCLock     = 14 // CAP_IPC_LOCK's bit in the capability sets
)

// The fewest I/O buffers a sized pool takes: MinIOBuffers is the most one
// call holds (two for a position-zero Read chunk, one for its reply);
// GoodIOBuffers is what the sizing gives up I/O size for.
const (
	MinIOBuffers  = 3
	GoodIOBuffers = 8
)

// DefaultSlots is xprt's default Slots, the most a sized pool takes.
const DefaultSlots = xprtSlots

// Pool is the part of xprt.Config the locked-memory limit sizes; zero
// fields keep xprt's defaults.
type Pool struct {
	Slots, IOBuffers, RegisterAhead int
	// MaxIO is the largest READ or WRITE: the rsize and wsize to use.
	MaxIO int
	// Locked is what one transport may register with this pool, in bytes.
	Locked int64
	// Sized is set when the pool is smaller than xprt's default.
	Sized bool
}

// Apply sets the pool's fields in c.
func (p Pool) Apply(c *xprt.Config) {
	c.Slots, c.IOBuffers, c.RegisterAhead, c.MaxIO = p.Slots, p.IOBuffers, p.RegisterAhead, p.MaxIO
}

func pages(n int64) int64 { return (n + pageSize - 1) / pageSize * pageSize }

// transportLocked is the most one transport registers with slots, sendq
// send buffers, ioBufs I/O buffers and ahead (RegisterAhead; negative:
// none), for maxIO and inline.
func transportLocked(slots, sendq, ioBufs, ahead, maxIO, inline int) int64 {
	queues := pages(int64(sendq)*int64(inline)) + pages(int64(slots+xprtExtraRecvs)*int64(inline))
	bufs := int64(ioBufs) * pages(int64(maxIO)+4096)
	var stock int64
	if ahead > 0 {
		stock = min(int64(readyKeys)*int64(ahead)*readyMax, readyCap)
	}
	return 2*queues + 2*bufs + stock + lockedSlack
}

// Need is the most one transport with Config c registers, in bytes (xprt's
// defaults for the fields left zero).
func Need(c xprt.Config) int64 {
	def := func(v, d int) int {
		if v == 0 {
			return d
		}
		return v
	}
	slots := def(c.Slots, xprtSlots)
	return transportLocked(slots, def(c.SendQueue, 4*slots), def(c.IOBuffers, xprtIOBuffers),
		def(c.RegisterAhead, xprtAhead), def(c.MaxIO, xprtMaxIO), def(c.Inline, xprtInline))
}

// Size returns the pool for nconnect transports under a locked-memory
// limit of limit bytes (negative: no limit), for I/O of maxIO bytes
// (which it may lower unless maxIOFixed: the caller chose the I/O size)
// and an inline size of inline (0: xprt's default).
func Size(limit int64, nconnect, maxIO int, maxIOFixed bool, inline int) (Pool, error) {
	nconnect = max(nconnect, 1)
	if inline <= 0 {
		inline = xprtInline
	}
	if maxIO <= 0 {
		maxIO = xprtMaxIO
	}
	def := transportLocked(xprtSlots, 4*xprtSlots, xprtIOBuffers, xprtAhead, maxIO, inline)
	if limit < 0 || int64(nconnect)*def <= limit {
		return Pool{MaxIO: maxIO, Locked: def}, nil
	}
	each := limit / int64(nconnect)
	// Fewer slots, as many as the default's send and receive buffers
	// would be at a 4 KiB inline size with 32 slots.
	slots := max(8, 32*xprtInline/inline)
	sizes := []int{maxIO}
	for io := maxIO / 2; !maxIOFixed && io >= minSizedIO; io /= 2 {
		sizes = append(sizes, io)
	}
	fit := func(io, ahead int) int {
		fixed := transportLocked(slots, 4*slots, 0, ahead, io, inline)
		if each < fixed {
			return 0
		}
		return min(int((each-fixed)/(2*pages(int64(io)+4096))), xprtIOBuffers)
	}
	for _, least := range []int{GoodIOBuffers, MinIOBuffers} {
		for _, io := range sizes {
			for _, ahead := range []int{smallAhead, -1} {
				if n := fit(io, ahead); n >= least {
					return Pool{Slots: slots, IOBuffers: n, RegisterAhead: ahead, MaxIO: io,
						Locked: transportLocked(slots, 4*slots, n, ahead, io, inline), Sized: true}, nil
				}
			}
		}
	}
	io := sizes[len(sizes)-1]
	least := int64(nconnect) * transportLocked(slots, 4*slots, MinIOBuffers, -1, io, inline)
	return Pool{}, &Error{Limit: limit, Need: least, NConnect: nconnect, MaxIO: io}
}

// Fit makes nconnect transports of Config c fit under a locked-memory
// limit of limit bytes (negative: no limit; Limit reads the process's).
// When c leaves the pool to xprt (Slots, IOBuffers, RegisterAhead and
// SendQueue zero) the pool is sized (Size) and set in c, lowering c.MaxIO
// unless maxIOFixed; otherwise c is checked as it is. It returns the pool
// in effect, or an *Error naming the fix when it does not fit.
func Fit(c *xprt.Config, nconnect int, limit int64, maxIOFixed bool) (Pool, error) {
	nconnect = max(nconnect, 1)
	if c.Slots == 0 && c.IOBuffers == 0 && c.RegisterAhead == 0 && c.SendQueue == 0 {
		p, err := Size(limit, nconnect, c.MaxIO, maxIOFixed, c.Inline)
		if err == nil && p.Sized {
			p.Apply(c)
		}
		return p, err
	}
	need := Need(*c)
	if limit >= 0 && int64(nconnect)*need > limit {
		return Pool{}, &Error{Limit: limit, Need: int64(nconnect) * need, NConnect: nconnect, MaxIO: max(c.MaxIO, 0)}
	}
	return Pool{Slots: c.Slots, IOBuffers: c.IOBuffers, RegisterAhead: c.RegisterAhead, MaxIO: c.MaxIO, Locked: need}, nil
}

// Error is an RDMA transport whose locked-memory limit is too small: found
// before dialing (Limit, Need), or when the kernel refused a registration
// (Limit -1, Err).
type Error struct {
	Limit, Need int64 // bytes; Limit -1 when the kernel refused below it
	NConnect    int
	MaxIO       int   // the I/O size (rsize/wsize) of the smallest pool tried; 0: xprt's default
	Err         error // the refused registration, when it came to that
}

func (e *Error) Error() string {
	var s string
	if e.Limit >= 0 {
		io := e.MaxIO
		if io == 0 {
			io = xprtMaxIO
		}
		s = fmt.Sprintf("the locked-memory limit (RLIMIT_MEMLOCK, ulimit -l) is %d KiB; RDMA with rsize/wsize %d KiB and nconnect=%d needs at least %d KiB of registered memory",
			e.Limit>>10, io>>10, e.NConnect, (e.Need+1023)>>10)
	} else {
		s = fmt.Sprintf("registering memory for RDMA failed (%v): the locked-memory limit (RLIMIT_MEMLOCK, ulimit -l) is too small", e.Err)
	}
	return s + "; raise it (in a shell: ulimit -l 65536; for a user: `memlock` in /etc/security/limits.conf, e.g. \"username hard memlock 65536\" and \"username soft memlock 65536\", then log in again; for a systemd unit: LimitMEMLOCK=64M), use a smaller rsize/wsize, or run as root (CAP_IPC_LOCK)"
}

func (e *Error) Unwrap() error { return e.Err }

// FromRegistration returns the *Error of err when it is a registration the
// kernel refused for the locked-memory limit (ENOMEM from a verb), nil
// otherwise.
func FromRegistration(err error, nconnect, maxIO int) error {
	var oe *verbs.OpError
	if !errors.As(err, &oe) || !errors.Is(oe.Err, syscall.ENOMEM) {
		return nil
	}
	return &Error{Limit: -1, NConnect: nconnect, MaxIO: maxIO, Err: err}
}

// Limit returns the soft RLIMIT_MEMLOCK in bytes, or -1 when registrations
// are not limited (RLIM_INFINITY, or CAP_IPC_LOCK in the effective set).
func Limit() (int64, error) {
	if hasCap(capIPCLock) {
		return -1, nil
	}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(rlimitMemlock, &rl); err != nil {
		return 0, fmt.Errorf("reading RLIMIT_MEMLOCK: %w", err)
	}
	if rl.Cur == rlimInfinity || rl.Cur > 1<<62 {
		return -1, nil
	}
	return int64(rl.Cur), nil
}

const (
	rlimitMemlock = 8 // RLIMIT_MEMLOCK on Linux
	rlimInfinity  = ^uint64(0)
)

// hasCap reports whether capability bit is in this process's effective set
// (CapEff of /proc/self/status; false when it cannot be read).
func hasCap(bit uint) bool {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<bit) != 0
		}
	}
	return false
}
