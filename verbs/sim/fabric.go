package sim

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nfsrdma/nfsrdma/verbs"
)

// Option configures a Fabric.
type Option func(*config)

type config struct {
	devices        []verbs.DeviceAttr
	noWindows      bool
	manual         bool
	seed           uint64
	seeded         bool
	panicOnDoubleI bool
	noRereg        bool
}

// Manual makes the fabric deterministic: no goroutine executes work; the
// test runs it with Step, RunUntilIdle and Advance, and time is virtual
// (it moves only with Advance). CQ.Wait still works but returns only when
// another goroutine steps the fabric.
func Manual() Option { return func(c *config) { c.manual = true } }

// WithDevice adds a device with these attributes. Without any WithDevice
// the fabric has one device, DefaultDeviceAttr("sim0"). Connections
// (Resolve, Listen) go through the first device.
func WithDevice(attr verbs.DeviceAttr) Option {
	return func(c *config) { c.devices = append(c.devices, attr) }
}

// WithoutMemWindows removes the type-2 memory window capability from every
// device (AllocMW then fails with EOPNOTSUPP), to test the fallback to
// dynamic memory registration.
func WithoutMemWindows() Option { return func(c *config) { c.noWindows = true } }

// WithoutRereg makes MR.ChangeAccess fail with EOPNOTSUPP, as on a device
// whose driver cannot re-register an MR (rxe before Linux 6.2).
func WithoutRereg() Option { return func(c *config) { c.noRereg = true } }

// WithSeed seeds the generator of key bytes, for reproducible rkeys.
func WithSeed(seed uint64) Option {
	return func(c *config) { c.seed, c.seeded = seed, true }
}

// PanicOnDoubleInvalidation makes a LOCAL_INV or SEND_WITH_INV of an rkey
// that is not a valid window panic the engine, as it panics the rxe kernel
// driver, instead of only completing in error and counting it.
func PanicOnDoubleInvalidation() Option { return func(c *config) { c.panicOnDoubleI = true } }

// DefaultDeviceAttr returns the attributes of a generous simulated device
// with type-2B memory windows.
func DefaultDeviceAttr(name string) verbs.DeviceAttr {
	return verbs.DeviceAttr{
		Name:        name,
		Driver:      "sim",
		MaxQPWR:     16384,
		MaxSGE:      32,
		MaxCQE:      1 << 20,
		MaxMR:       1 << 20,
		MaxMW:       1 << 19,
		MaxQPRdAtom: 128,
		MaxMRSize:   1 << 40,
		Caps:        verbs.CapMemWindow2 | verbs.CapMemWindow2B | verbs.CapMemMgtExtensions,
	}
}

// MaxInlineData is the largest inline send the simulated devices accept.
const MaxInlineData = 1024

// Private data limits of the IB CM as rdma_cm enforces them.
const (
	maxConnectPrivateData = 56
	maxAcceptPrivateData  = 196
	maxRejectPrivateData  = 148
)

// Anomalies counts what real hardware or drivers punish later, so tests can
// assert that none happened (compare with the zero value).
type Anomalies struct {
	// DoubleInvalidations counts LOCAL_INV of an rkey that was not a
	// currently valid window, and SEND_WITH_INV of the rkey of an open
	// window that is already invalid. On rxe these panic the kernel.
	DoubleInvalidations int
	// DoubleLocalInvalidations counts those of DoubleInvalidations that
	// were the QP owner's own LOCAL_INV (the rest: a peer's Send With
	// Invalidate, which a conforming device only fails).
	DoubleLocalInvalidations int
	// QPClosedWithBoundWindows counts windows still bound to a QP when it
	// was closed (rxe logs a kernel warning; close windows first).
	QPClosedWithBoundWindows int
	// CQOverflows counts completion queues that overflowed.
	CQOverflows int
	// SendBuffersReusedEarly counts SEND and RDMA WRITE source buffers whose
	// bytes changed after the device read them and before the completion
	// that retires the WR was polled (rule: a send buffer belongs to the
	// device until its completion is reaped). It watches every QP, a test's
	// simulated server included.
	SendBuffersReusedEarly int
	// DroppedCMEvents counts CM events lost because an endpoint's Events
	// channel was full.
	DroppedCMEvents int
}

// Fabric is the simulated fabric: devices, the address space of registered
// memory, the rkey table, rdma_cm, and the engine that executes work.
// Everything is guarded by one mutex.
type Fabric struct {
	mu   sync.Mutex
	cfg  config
	rng  *rand.Rand
	hash maphash.Seed

	hw []*hwDevice

	// engine
	clock         time.Time // virtual time in manual mode
	engineRunning bool
	wake          chan struct{}
	stop          chan struct{}
	wg            sync.WaitGroup
	seq           uint64

	closed    bool
	objs      []resource
	live      verbs.ResourceCounts
	anomalies Anomalies

	keys       map[uint32]any // key index (rkey>>8) → *MR or *MW
	nextKeyIdx uint32
	nextAddr   uint64
	nextQPN    uint32
	nextCQ     int
	qps        []*QP // live QPs in creation order
	listeners  map[netip.AddrPort]*Listener
	nextPort   uint16
}

type hwDevice struct {
	attr  verbs.DeviceAttr
	cmCtx *Device   // the context rdma_cm endpoints share, never closed
	async asyncSubs // its own lock: events are raised without f.mu
}

// resource is a live object the fabric releases on Close.
type resource interface {
	closeLocked(force bool) error
	isClosed() bool
}

// NewFabric returns a simulated fabric. Close it to release everything it
// still holds and stop its engine.
func NewFabric(opts ...Option) *Fabric {
	f := &Fabric{
		hash:       maphash.MakeSeed(),
		wake:       make(chan struct{}, 1),
		stop:       make(chan struct{}),
		keys:       make(map[uint32]any),
		nextKeyIdx: 1,
		nextAddr:   0x7f0000000000,
		nextQPN:    0x11,
		listeners:  make(map[netip.AddrPort]*Listener),
		nextPort:   20000,
		clock:      time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	for _, o := range opts {
		o(&f.cfg)
	}
	if f.cfg.seeded {
		f.rng = rand.New(rand.NewPCG(f.cfg.seed, f.cfg.seed^0x9e3779b97f4a7c15))
	} else {
		f.rng = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	attrs := f.cfg.devices
	if len(attrs) == 0 {
		attrs = []verbs.DeviceAttr{DefaultDeviceAttr("sim0")}
	}
	for _, a := range attrs {
		if f.cfg.noWindows {
			a.Caps &^= verbs.CapMemWindow2 | verbs.CapMemWindow2A | verbs.CapMemWindow2B
			a.MaxMW = 0
		}
		hw := &hwDevice{attr: a}
		hw.cmCtx = &Device{f: f, hw: hw}
		f.hw = append(f.hw, hw)
	}
	return f
}

var _ verbs.Fabric = (*Fabric)(nil)

// Devices lists the device names.
func (f *Fabric) Devices() ([]string, error) {
	names := make([]string, len(f.hw))
	for i, hw := range f.hw {
		names[i] = hw.attr.Name
	}
	return names, nil
}

// OpenDevice opens a device context by name.
func (f *Fabric) OpenDevice(name string) (verbs.Device, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, verbs.ErrClosed
	}
	for _, hw := range f.hw {
		if hw.attr.Name == name {
			d := &Device{f: f, hw: hw, owned: true}
			f.live.Devices++
			f.addLocked(d)
			return d, nil
		}
	}
	names, _ := f.Devices()
	return nil, &verbs.OpError{Verb: "ibv_open_device", Object: name, Err: syscall.ENODEV,
		Hint: "no such device; devices present: " + strings.Join(names, ", ")}
}

// Live counts the resources created and not yet released. Listeners count
// as Endpoints (they are rdma_cm ids); device contexts of endpoints do not
// count (the endpoint owns them).
func (f *Fabric) Live() verbs.ResourceCounts {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.live
}

// Anomalies returns the anomaly counters.
func (f *Fabric) Anomalies() Anomalies {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.anomalies
}

// ResetAnomalies zeroes the anomaly counts, for a test that caused one on
// purpose and checks for none afterwards.
func (f *Fabric) ResetAnomalies() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.anomalies = Anomalies{}
}

// DoubleInvalidations is Anomalies().DoubleInvalidations: invalidations of
// an rkey that was not a valid window. Tests assert it is zero.
func (f *Fabric) DoubleInvalidations() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.anomalies.DoubleInvalidations
}

// QP returns the live QP with this number, or nil.
func (f *Fabric) QP(num uint32) *QP {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, q := range f.qps {
		if q.num == num {
			return q
		}
	}
	return nil
}

// Close releases every resource still live, in reverse order of creation,
// and stops the engine. Close is idempotent; after it, every operation on
// the fabric fails with verbs.ErrClosed.
func (f *Fabric) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	for i := len(f.objs) - 1; i >= 0; i-- {
		if !f.objs[i].isClosed() {
			f.objs[i].closeLocked(true)
		}
	}
	f.objs = nil
	close(f.stop)
	f.mu.Unlock()
	f.wg.Wait()
	return nil
}

// addLocked records a new resource for Fabric.Close, compacting the list of
// closed ones now and then.
func (f *Fabric) addLocked(r resource) {
	if len(f.objs) >= 64 && len(f.objs)%64 == 0 {
		live := f.objs[:0]
		for _, o := range f.objs {
			if !o.isClosed() {
				live = append(live, o)
			}
		}
		clear(f.objs[len(live):])
		f.objs = live
	}
	f.objs = append(f.objs, r)
}

// nowLocked is the fabric's time: virtual in manual mode.
func (f *Fabric) nowLocked() time.Time {
	if f.cfg.manual {
		return f.clock
	}
	return time.Now()
}

// Now returns the fabric's time (virtual in manual mode).
func (f *Fabric) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nowLocked()
}

func (f *Fabric) nextSeqLocked() uint64 {
	f.seq++
	return f.seq
}

// newKeyIndexLocked allocates a key index (the upper 24 bits of an lkey or
// rkey). Indexes are never reused within a fabric.
func (f *Fabric) newKeyIndexLocked(obj any) (uint32, error) {
	if f.nextKeyIdx >= 1<<24 {
		return 0, syscall.ENOMEM
	}
	idx := f.nextKeyIdx
	f.nextKeyIdx++
	f.keys[idx] = obj
	return idx, nil
}

func (f *Fabric) keyByteLocked() uint32 { return uint32(f.rng.UintN(256)) }

// --- the engine ---

// kickLocked makes sure pending work will run: it wakes the engine or
// starts one. In manual mode it does nothing.
func (f *Fabric) kickLocked() {
	if f.cfg.manual || f.closed {
		return
	}
	if f.engineRunning {
		select {
		case f.wake <- struct{}{}:
		default:
		}
		return
	}
	f.engineRunning = true
	f.wg.Add(1)
	go f.engine()
}

// engine runs work until nothing is pending, then exits; kickLocked starts
// a new one when work arrives. It sleeps (no spinning) until the next
// delayed item is due.
func (f *Fabric) engine() {
	defer f.wg.Done()
	f.mu.Lock()
	for !f.closed {
		for n := 0; f.stepLocked(); n++ {
			if n%64 == 63 { // let posters and pollers in
				f.mu.Unlock()
				f.mu.Lock()
				if f.closed {
					break
				}
			}
		}
		if f.closed {
			break
		}
		due, ok := f.nextDueLocked()
		if !ok {
			break
		}
		d := time.Until(due)
		if d <= 0 {
			continue
		}
		f.mu.Unlock()
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-f.wake:
		case <-f.stop:
		}
		t.Stop()
		f.mu.Lock()
	}
	f.engineRunning = false
	f.mu.Unlock()
}

// Step executes the next unit of work that is due (one WR, or the release
// of one delayed completion), in global posting order. It reports whether
// it did anything. Step also works without Manual, alongside the engine.
func (f *Fabric) Step() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stepLocked()
}

// RunUntilIdle steps until no work is due at the current time and returns
// the number of steps. Work delayed into the future, held, or blocked on
// a receive stays pending.
func (f *Fabric) RunUntilIdle() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for f.stepLocked() {
		n++
	}
	return n
}

// Advance moves the virtual clock forward by d, running every item that
// becomes due on the way, in time order. Manual mode only: it panics
// otherwise.
func (f *Fabric) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.cfg.manual {
		panic("sim: Fabric.Advance needs a fabric made with sim.Manual()")
	}
	end := f.clock.Add(max(d, 0))
	for {
		for f.stepLocked() {
		}
		due, ok := f.nextDueLocked()
		if !ok || due.After(end) || !due.After(f.clock) {
			break
		}
		f.clock = due
	}
	f.clock = end
}

// stepLocked runs the runnable item with the lowest sequence number.
func (f *Fabric) stepLocked() bool {
	if f.closed {
		return false
	}
	now := f.nowLocked()
	var (
		best    *QP
		bestSeq uint64
		isCQE   bool
	)
	for _, q := range f.qps {
		if seq, ok := q.dueCQELocked(now); ok && (best == nil || seq < bestSeq) {
			best, bestSeq, isCQE = q, seq, true
		}
		if seq, ok := q.runnableWRLocked(now); ok && (best == nil || seq < bestSeq) {
			best, bestSeq, isCQE = q, seq, false
		}
	}
	if best == nil {
		return false
	}
	if isCQE {
		best.releaseCQELocked()
	} else {
		f.executeLocked(best)
	}
	return true
}

// nextDueLocked returns the earliest time at which a pending item (not
// held, not blocked) becomes runnable.
func (f *Fabric) nextDueLocked() (time.Time, bool) {
	var (
		best time.Time
		ok   bool
	)
	for _, q := range f.qps {
		for _, t := range q.pendingDueLocked() {
			if !ok || t.Before(best) {
				best, ok = t, true
			}
		}
	}
	return best, ok
}

// opErr builds the error of a failed verb.
func opErr(verb, object string, errno error, hint string, args ...any) error {
	if len(args) > 0 {
		hint = fmt.Sprintf(hint, args...)
	}
	return &verbs.OpError{Verb: verb, Object: object, Err: errno, Hint: hint}
}

// waitCtx blocks on ch or ctx.
func waitCtx(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
