package frwr

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nfsrdma/nfsrdma/verbs"
)

// Direction is which way a chunk's bytes move, and so which single remote
// access its segments get (RFC 8166 §3.4, §8.1).
type Direction int

const (
	// ToPeer: the peer RDMA-READs the segment (a Read chunk: WRITE data,
	// a long call). The window grants REMOTE_READ only.
	ToPeer Direction = iota
	// FromPeer: the peer RDMA-WRITEs the segment (a Write or Reply chunk).
	// The window grants REMOTE_WRITE only (the MR has LOCAL_WRITE).
	FromPeer
)

func (d Direction) String() string {
	switch d {
	case ToPeer:
		return "to-peer"
	case FromPeer:
		return "from-peer"
	}
	return fmt.Sprintf("Direction(%d)", int(d))
}

// Mode is how segments are exposed to the peer.
type Mode int

const (
	// ModeAuto picks ModeWindows when the device has type-2 memory windows
	// (Config.Attr.Has(verbs.CapMemWindow2)), else ModeRegister.
	ModeAuto Mode = iota
	// ModeWindows binds a type-2 memory window per segment with a BIND_MW
	// WR chained before the SEND; invalidation is LOCAL_INV or the
	// server's Send With Invalidate.
	ModeWindows
	// ModeRegister registers each segment with ibv_reg_mr and deregisters
	// it after the reply: the fallback for devices without windows.
	ModeRegister
)

func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeWindows:
		return "windows"
	case ModeRegister:
		return "register"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Config configures a Registry.
type Config struct {
	PD verbs.PD
	// Attr chooses the mode in ModeAuto.
	Attr verbs.DeviceAttr
	Mode Mode
	// BufferSize is the size of each I/O buffer in bytes (for example
	// 1 MiB + 4 KiB: the largest payload plus room for XDR round-up).
	BufferSize int
	// Buffers is the number of I/O buffers in the pool.
	Buffers int
	// Windows is the number of memory windows in the pool (windows mode;
	// ignored in register mode). Register waits for a free window, so size
	// it for the most segments that can be exposed at once: the credit
	// limit times the segments one RPC may use.
	Windows int
	// Rand supplies the key bytes of new rkeys; nil means crypto/rand.
	Rand io.Reader
	// RetireWindows keeps no window Free: a window is allocated when
	// Register needs one and deallocated as soon as it is invalid (locally
	// or remotely), instead of sitting in the pool under an rkey the peer
	// has seen or can guess (an index and an 8-bit key): for a device on
	// which a Send With Invalidate naming an allocated window that is not
	// bound crashes the driver (verbs.DeviceAttr.StaleInvalidatePanics).
	// It costs a window allocation and deallocation per exposed segment.
	RetireWindows bool
	// UnsafeWindows lets Mode ModeWindows be forced on a device whose
	// windows a hostile peer can abuse (verbs.DeviceAttr.WindowsUnbounded:
	// a window's rkey reaches its whole buffer, past the segment;
	// StaleInvalidatePanics: a second Send With Invalidate of a window's
	// rkey crashes the host's kernel before any software can react). New
	// and Attach refuse ModeWindows on such a device with ErrUnsafeWindows
	// unless it is set. It is for testing the window code on such a
	// device (rxe) against a server you control, never for production.
	UnsafeWindows bool
	// Ready is, in register mode, how many registrations of each recently
	// used small segment size (per direction) the registry keeps made
	// ahead, over memory of their own (ready.go): TakeReady hands one out,
	// Refill makes more. 0 makes none; ignored in windows mode.
	Ready int
	// ReadyMax is the largest segment, in bytes, made ahead (default
	// 64 KiB when Ready is set).
	ReadyMax int
	// ReadyBytes caps the memory of all registrations made ahead
	// (default 8 MiB when Ready is set).
	ReadyBytes int
}

// Counters are the registry's event counts (monotonic) and pool gauges,
// for operators and tests.
type Counters struct {
	Mode Mode // the resolved mode

	Binds               uint64 // bind WRs handed out by Register
	Aborts              uint64 // registrations given back unposted by Abort
	LocalInvalidations  uint64 // LOCAL_INV WRs handed out
	RemoteInvalidations uint64 // windows the server invalidated with Send With Invalidate, matched to their RPC
	// UnmatchedRemoteInvalidations counts receives with Send With
	// Invalidate naming no rkey of the RPC they answer (or any rkey in
	// register mode): a protocol error.
	UnmatchedRemoteInvalidations uint64

	Registrations   uint64 // register mode: ibv_reg_mr per segment
	Deregistrations uint64 // register mode: ibv_dereg_mr per segment

	// WindowsReplaced counts windows destroyed because their state was
	// unknown (ConnectionLost) and replaced by new ones.
	WindowsReplaced uint64
	// WindowAllocFailures counts replacement windows that could not be
	// allocated at once (Register retries when it needs a window).
	WindowAllocFailures uint64
	// WindowCloseErrors counts MW.Close failures (the window is dropped
	// either way).
	WindowCloseErrors uint64
	// WindowsRetired counts windows replaced after use (Config.RetireWindows).
	WindowsRetired uint64
	// Detaches and Attaches count moves of the registry between devices.
	Detaches, Attaches uint64

	// RefusedTransitions counts calls refused because the registration's
	// state did not allow them (see TransitionError).
	RefusedTransitions uint64
	// DoubleInvalidationsPrevented counts LOCAL_INVs not issued because
	// the rkey was already being invalidated (a second LOCAL_INV panics
	// the rxe kernel driver).
	DoubleInvalidationsPrevented uint64
	// BindsNotPosted counts Bound registrations found, at local
	// invalidation, never to have had their bind posted (no LOCAL_INV is
	// issued for them: their window was never valid; call Abort).
	BindsNotPosted uint64

	BufferWaits uint64 // GetBuffer calls that waited
	WindowWaits uint64 // Register calls that waited for a window
	// BuffersPutWhileExposed counts PutBuffer calls made while a
	// registration of the buffer was still exposed; such a buffer returns
	// to the pool only when its last registration is released.
	BuffersPutWhileExposed uint64
	Syncs                  uint64

	// Registrations made ahead (register mode, Config.Ready; ready.go).
	// Each is also counted in Registrations and, once deregistered, in
	// Deregistrations.
	ReadyMade     uint64 // made by Refill
	ReadyTaken    uint64 // handed to a call by TakeReady
	ReadyMisses   uint64 // TakeReady calls that found none of their size
	ReadyDropped  uint64 // deregistered without being taken (Detach, ConnectionLost, Close, a size giving way)
	ReadyFailures uint64 // Refill calls that could not make one (mapping or registration failed, memory cap)
	ReadyStocked  int    // made and not taken now (a gauge)
	// ReadyGrants counts remote rights added by TakeReady to a
	// registration made ahead (made local-only, ibv_rereg_mr at use).
	ReadyGrants uint64
	// ReadyUnsupported: the device refused to change an MR's access, so
	// the registry makes no registrations ahead (segments are registered
	// at use).
	ReadyUnsupported bool

	FreeBuffers int // buffers in the pool now
	FreeWindows int // windows Free in the pool now
}

// Registry is the I/O buffer pool and the memory-window pool of one PD,
// and the state of every registration. It is safe for concurrent use:
// Register from many goroutines, the reply-handler calls from one.
type Registry struct {
	mode          Mode
	size          int
	retire        bool // Config.RetireWindows, in windows mode
	unsafeWindows bool // Config.UnsafeWindows

	syncs atomic.Uint64

	mu     sync.Mutex
	closed bool
	pd     verbs.PD // nil while detached
	c      Counters

	// I/O buffers.
	buffers    []*Buffer
	freeBufs   []*Buffer
	bufWaiters waitQueue[*Buffer]

	// Windows (windows mode). slots holds every window; a nil slot is a
	// destroyed window whose replacement could not be allocated yet.
	slots      []*window
	deadSlots  int
	freeWins   []*window
	winWaiters waitQueue[*window]
	byIndex    map[uint32]*window // rkey>>8 → window

	// Registrations handed out and not yet released, and a free list of
	// released ones for reuse.
	active   []*Registration
	freeRegs *Registration

	// Registrations made ahead (ready.go): constant after New but for
	// the fields guarded by mu.
	ready, readyMax, readyCap int
	stocks                    map[readyKey]*readyStock
	readyTick                 uint64
	readyBytes                int
	readyOff                  bool      // the device cannot add remote access in place: none made ahead
	fills                     int       // Refills between taking the PD and putting their registration
	fillDone                  sync.Cond // on mu: signalled when fills drops to zero (Close and Detach wait for it)

	// Key bytes read ahead from rnd.
	rnd    io.Reader
	keys   [32]byte
	keyPos int
	keyLen int
}

// New creates a registry: it maps and registers cfg.Buffers I/O buffers
// and, in windows mode, allocates cfg.Windows type-2 memory windows.
func New(cfg Config) (*Registry, error) {
	switch {
	case cfg.PD == nil:
		return nil, errors.New("frwr: Config.PD is nil")
	case cfg.BufferSize <= 0:
		return nil, fmt.Errorf("frwr: Config.BufferSize %d must be positive", cfg.BufferSize)
	case cfg.Buffers <= 0:
		return nil, fmt.Errorf("frwr: Config.Buffers %d must be positive", cfg.Buffers)
	}
	mode := cfg.Mode
	switch mode {
	case ModeAuto:
		// Windows only where a window confines the peer to its segment:
		// on a device where it reaches the whole MR, a segment's
		// neighbours in its buffer (the caller's other bytes, an earlier
		// RPC's leftovers) would be exposed. Per-segment MRs are checked
		// exactly there.
		mode = ModeRegister
		if cfg.Attr.Has(verbs.CapMemWindow2) && !cfg.Attr.WindowsUnbounded && !cfg.Attr.StaleInvalidatePanics {
			mode = ModeWindows
		}
	case ModeWindows:
		if err := windowsSafe(cfg.Attr); err != nil && !cfg.UnsafeWindows {
			return nil, err
		}
	case ModeRegister:
	default:
		return nil, fmt.Errorf("frwr: unknown %v", mode)
	}
	if mode == ModeWindows && cfg.Windows <= 0 {
		return nil, fmt.Errorf("frwr: Config.Windows %d must be positive in windows mode", cfg.Windows)
	}
	r := &Registry{pd: cfg.PD, mode: mode, size: cfg.BufferSize, rnd: cfg.Rand, retire: cfg.RetireWindows && mode == ModeWindows,
		unsafeWindows: cfg.UnsafeWindows}
	if r.rnd == nil {
		r.rnd = rand.Reader
	}
	r.c.Mode = mode
	r.fillDone.L = &r.mu
	if mode == ModeRegister && cfg.Ready > 0 {
		r.ready, r.readyMax, r.readyCap = cfg.Ready, cfg.ReadyMax, cfg.ReadyBytes
		if r.readyMax <= 0 {
			r.readyMax = 64 << 10
		}
		if r.readyCap <= 0 {
			r.readyCap = 8 << 20
		}
	}

	access := r.bufferAccess()
	for i := range cfg.Buffers {
		m, err := verbs.Map(cfg.BufferSize)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("frwr: mapping I/O buffer %d: %w", i, err), r.Close())
		}
		mem := m.Bytes()[:cfg.BufferSize:cfg.BufferSize]
		mr, err := cfg.PD.RegMR(mem, access)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("frwr: registering I/O buffer %d: %w", i, err), m.Close(), r.Close())
		}
		b := &Buffer{r: r, mapping: m, mr: mr, mem: mem, state: bufFree}
		r.buffers = append(r.buffers, b)
		r.freeBufs = append(r.freeBufs, b)
	}
	if mode == ModeWindows && r.retire {
		// No window before Register needs it (RetireWindows).
		r.byIndex = make(map[uint32]*window, cfg.Windows)
		r.slots = make([]*window, cfg.Windows)
		r.deadSlots = cfg.Windows
	} else if mode == ModeWindows {
		r.byIndex = make(map[uint32]*window, cfg.Windows)
		for i := range cfg.Windows {
			mw, err := cfg.PD.AllocMW()
			if err != nil {
				return nil, errors.Join(fmt.Errorf("frwr: allocating memory window %d: %w", i, err), r.Close())
			}
			w := &window{mw: mw, slot: i, state: StateFree}
			r.slots = append(r.slots, w)
			r.byIndex[mw.RKey()>>8] = w
			r.freeWins = append(r.freeWins, w)
		}
	}
	return r, nil
}

// windowsSafe reports why memory windows on a device with attr would let
// a hostile peer reach past a segment or crash the host (nil: they would
// not).
func windowsSafe(attr verbs.DeviceAttr) error {
	var why []string
	if attr.WindowsUnbounded {
		why = append(why, "a window's rkey reaches its whole buffer, past the segment")
	}
	if attr.StaleInvalidatePanics {
		why = append(why, "a peer's Send With Invalidate of an invalid window crashes the kernel")
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("%w: device %s (driver %s): %s; use ModeAuto or ModeRegister (per-segment MRs), or Config.UnsafeWindows for tests against a server you control",
		ErrUnsafeWindows, attr.Name, attr.Driver, strings.Join(why, "; "))
}

// Mode returns the resolved mode: ModeWindows or ModeRegister.
func (r *Registry) Mode() Mode { return r.mode }

// RemoteInvalidationOK reports whether the transport may offer Send With
// Invalidate in its RFC 8797 private data: only in windows mode, where the
// server's invalidation of a window's rkey is what LOCAL_INV would do. In
// register mode the rkeys are plain MRs that only deregistration revokes.
func (r *Registry) RemoteInvalidationOK() bool { return r.mode == ModeWindows }

// Counters returns a snapshot of the counters.
func (r *Registry) Counters() Counters {
	r.mu.Lock()
	c := r.c
	c.FreeBuffers = len(r.freeBufs)
	c.FreeWindows = len(r.freeWins)
	for _, s := range r.stocks {
		c.ReadyStocked += len(s.ready)
	}
	r.mu.Unlock()
	c.Syncs = r.syncs.Load()
	return c
}

// Sync is the DMA sync stage of the reply handler, run after every window
// of the RPC is invalid and before the caller reads b.
//
// Host memory registered with verbs is cache-coherent with the device, and
// the completion that reported the reply was read after the device wrote
// the data (the provider's poll orders it, as rdma-core's
// udma_from_device_barrier does), so all that is needed here is a full
// memory fence: the sequentially consistent atomic below. This is the hook
// where a non-coherent pool (or device memory) would flush or invalidate
// the CPU cache lines of b before handing its bytes over.
func (r *Registry) Sync(b *Buffer) {
	r.syncs.Add(1)
}

// Close releases everything in reverse order of dependency: the windows
// first (a window pins its MR), then the MRs of register-mode segments
// still registered, then each buffer's MR, then its memory. Waiters in
// GetBuffer and Register return ErrClosed. Close is idempotent. Buffers
// and registrations must not be used after Close: the memory is unmapped.
func (r *Registry) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	r.bufWaiters.closeAllLocked()
	r.winWaiters.closeAllLocked()
	r.waitFillsLocked() // a registration under way on the PD ends first
	var errs []error
	for i, w := range r.slots {
		if w == nil {
			continue
		}
		if err := w.mw.Close(); err != nil {
			errs = append(errs, fmt.Errorf("frwr: closing memory window %d: %w", i, err))
		}
		w.state = StateDead
		r.slots[i] = nil
	}
	r.freeWins = nil
	if err := r.unstockAllLocked(); err != nil {
		errs = append(errs, err)
	}
	for _, g := range r.active {
		if g.mr != nil {
			if err := g.mr.Close(); err != nil {
				errs = append(errs, fmt.Errorf("frwr: deregistering segment rkey %#x: %w", g.seg.Handle, err))
			} else {
				r.c.Deregistrations++
			}
			g.mr = nil
		}
		g.state = StateDead
	}
	for i, b := range r.buffers {
		if b.mr == nil { // detached: only the memory is left
			if err := b.mapping.Close(); err != nil {
				errs = append(errs, fmt.Errorf("frwr: unmapping I/O buffer %d: %w", i, err))
			}
			continue
		}
		if err := b.mr.Close(); err != nil {
			// Never unmap memory the device may still reach.
			errs = append(errs, fmt.Errorf("frwr: deregistering I/O buffer %d: %w", i, err))
			continue
		}
		if err := b.mapping.Close(); err != nil {
			errs = append(errs, fmt.Errorf("frwr: unmapping I/O buffer %d: %w", i, err))
		}
	}
	r.freeBufs = nil
	for _, s := range r.stocks {
		s.gone = true
		for _, b := range s.all {
			if b.exposed > 0 {
				continue // never unmap memory the device may still reach
			}
			if err := r.unmapReadyLocked(b); err != nil {
				errs = append(errs, fmt.Errorf("frwr: unmapping a buffer made ahead: %w", err))
			}
		}
	}
	r.stocks = nil
	return errors.Join(errs...)
}
