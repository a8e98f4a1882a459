package main

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

// Locked memory.
//
// Every byte an RDMA transport registers (ibv_reg_mr) is pinned, and the
// kernel counts it against the process's RLIMIT_MEMLOCK unless the process
// has CAP_IPC_LOCK (root has). A user's mount with the transport's
// defaults registers about 42 MiB per connection, where Debian gives users
// 8 MiB; ibv_reg_mr then fails with ENOMEM in the middle of connecting, a
// failure no retry repairs. So before dialing, the mount sizes the
// transport's pool to the limit (xprt.Config's Slots, IOBuffers and
// RegisterAhead: fewer calls and large I/Os in flight at once), and
// refuses at once, naming the fix, when even the smallest pool does not
// fit.
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
// be) and as many I/O buffers as fit, at least goodIOBuffers; when the
// user gave neither rsize nor wsize, the largest I/O (from 1 MiB down to
// 64 KiB, halving) for which that many fit. Below that, the largest I/O
// for which minIOBuffers fit; below that, an error.

// Constants of xprt and frwr that size their registered memory (see
// xprt.Config's defaults and frwr's ready stock).
const (
	xprtSlots      = 128
	xprtIOBuffers  = 32
	xprtAhead      = 8
	xprtExtraRecvs = 8
	xprtInline     = 4096
	readyKeys      = 8
	readyMax       = 64 << 10
	readyCap       = 8 << 20
	lockedSlack    = 256 << 10
	pageSize       = 4096
	minIOBuffers   = 3 // the most one call takes (two for a position-zero Read chunk, one for its reply)
	goodIOBuffers  = 8
	smallAhead     = 2
	minSizedIO     = 64 << 10
	capIPCLock     = 14 // CAP_IPC_LOCK's bit in the capability sets
)

// poolConfig is the part of xprt.Config the locked-memory limit sizes;
// zero fields keep xprt's defaults.
type poolConfig struct {
	Slots, IOBuffers, RegisterAhead int
	// MaxIO is the largest READ or WRITE: the rsize and wsize to use.
	MaxIO int
	// Locked is what one transport may register with this pool, in bytes.
	Locked int64
	// Sized is set when the pool is smaller than xprt's default.
	Sized bool
}

// apply sets the pool's fields in c.
func (p poolConfig) apply(c *xprt.Config) {
	c.Slots, c.IOBuffers, c.RegisterAhead, c.MaxIO = p.Slots, p.IOBuffers, p.RegisterAhead, p.MaxIO
}

func pages(n int64) int64 { return (n + pageSize - 1) / pageSize * pageSize }

// transportLocked is the most one transport registers with slots,
// ioBufs and ahead (RegisterAhead; negative: none), for maxIO and inline.
func transportLocked(slots, ioBufs, ahead, maxIO, inline int) int64 {
	queues := pages(int64(4*slots)*int64(inline)) + pages(int64(slots+xprtExtraRecvs)*int64(inline))
	bufs := int64(ioBufs) * pages(int64(maxIO)+4096)
	var stock int64
	if ahead > 0 {
		stock = min(int64(readyKeys)*int64(ahead)*readyMax, readyCap)
	}
	return 2*queues + 2*bufs + stock + lockedSlack
}

// sizePool returns the pool for nconnect transports under a locked-memory
// limit of limit bytes (negative: no limit), for I/O of maxIO bytes
// (which it may lower unless maxIOFixed: rsize or wsize given) and an
// inline size of inline (0: xprt's default).
func sizePool(limit int64, nconnect, maxIO int, maxIOFixed bool, inline int) (poolConfig, error) {
	nconnect = max(nconnect, 1)
	if inline <= 0 {
		inline = xprtInline
	}
	def := transportLocked(xprtSlots, xprtIOBuffers, xprtAhead, maxIO, inline)
	if limit < 0 || int64(nconnect)*def <= limit {
		return poolConfig{MaxIO: maxIO, Locked: def}, nil
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
		fixed := transportLocked(slots, 0, ahead, io, inline)
		if each < fixed {
			return 0
		}
		return min(int((each-fixed)/(2*pages(int64(io)+4096))), xprtIOBuffers)
	}
	for _, least := range []int{goodIOBuffers, minIOBuffers} {
		for _, io := range sizes {
			for _, ahead := range []int{smallAhead, -1} {
				if n := fit(io, ahead); n >= least {
					return poolConfig{Slots: slots, IOBuffers: n, RegisterAhead: ahead, MaxIO: io,
						Locked: transportLocked(slots, n, ahead, io, inline), Sized: true}, nil
				}
			}
		}
	}
	io := sizes[len(sizes)-1]
	least := int64(nconnect) * transportLocked(slots, minIOBuffers, -1, io, inline)
	return poolConfig{}, &MemlockError{Limit: limit, Need: least, NConnect: nconnect, MaxIO: io}
}

// MemlockError is an RDMA mount whose locked-memory limit is too small.
type MemlockError struct {
	Limit, Need int64 // bytes; Limit -1 when the kernel refused below it
	NConnect    int
	MaxIO       int
	Err         error // the refused registration, when it came to that
}

func (e *MemlockError) Error() string {
	var s string
	if e.Limit >= 0 {
		s = fmt.Sprintf("the locked-memory limit (RLIMIT_MEMLOCK, ulimit -l) is %d KiB; an RDMA mount with rsize/wsize %d KiB and nconnect=%d needs at least %d KiB of registered memory",
			e.Limit>>10, e.MaxIO>>10, e.NConnect, (e.Need+1023)>>10)
	} else {
		s = fmt.Sprintf("registering memory for RDMA failed (%v): the locked-memory limit (RLIMIT_MEMLOCK, ulimit -l) is too small", e.Err)
	}
	return s + "; raise it (for a user: `memlock` in /etc/security/limits.conf, e.g. \"username hard memlock 65536\" and \"username soft memlock 65536\", then log in again; for a systemd unit: LimitMEMLOCK=64M), mount with smaller rsize/wsize, or mount as root"
}

func (e *MemlockError) Unwrap() error { return e.Err }

// memlockLimit returns the soft RLIMIT_MEMLOCK in bytes, or -1 when
// registrations are not limited (RLIM_INFINITY, or CAP_IPC_LOCK in the
// effective set).
func memlockLimit() (int64, error) {
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

// errDeviceAccess is an RDMA device that refused this process.
var errDeviceAccess = errors.New("the RDMA device refused this user")

// localRDMAError returns the explanation of a failure to connect over RDMA
// that this machine caused and that trying again cannot repair: memory
// registration refused (ENOMEM: the locked-memory limit) or the device not
// opened (EACCES, EPERM). nil for anything else.
func localRDMAError(err error, nconnect, maxIO int) error {
	var oe *verbs.OpError
	if !errors.As(err, &oe) {
		return nil
	}
	switch {
	case errors.Is(oe.Err, syscall.ENOMEM):
		return &MemlockError{Limit: -1, NConnect: nconnect, MaxIO: maxIO, Err: err}
	case errors.Is(oe.Err, syscall.EACCES), errors.Is(oe.Err, syscall.EPERM):
		return fmt.Errorf("%w (%w): it needs read and write access to /dev/infiniband/uverbs* and /dev/infiniband/rdma_cm (rdma-core's udev rules make them 0666), or mount as root", errDeviceAccess, err)
	}
	return nil
}
