package sim

import (
	"context"
	"fmt"
	"runtime"
	"syscall"
	"time"

	"github.com/nfsrdma/nfsrdma/verbs"
)

// Device is a simulated device context. Contexts from OpenDevice are
// counted and must be closed after their PDs and CQs; the context of an
// rdma_cm endpoint is shared by every endpoint on the device (as librdmacm
// shares one per device) and its Close does nothing.
type Device struct {
	f        *Fabric
	hw       *hwDevice
	owned    bool
	closed   bool
	children int // PDs and CQs
}

var _ verbs.Device = (*Device)(nil)
var _ verbs.SpinPoller = (*CQ)(nil)

func (d *Device) Name() string           { return d.hw.attr.Name }
func (d *Device) Attr() verbs.DeviceAttr { return d.hw.attr }
func (d *Device) isClosed() bool         { return d.closed }

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (verbs.PD, error) {
	f := d.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || d.closed {
		return nil, verbs.ErrClosed
	}
	p := &PD{f: f, dev: d}
	d.children++
	f.live.PDs++
	f.addLocked(p)
	return p, nil
}

// CreateCQ creates a completion queue of exactly depth entries.
func (d *Device) CreateCQ(depth int) (verbs.CQ, error) {
	f := d.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || d.closed {
		return nil, verbs.ErrClosed
	}
	if depth <= 0 || depth > d.hw.attr.MaxCQE {
		return nil, opErr("ibv_create_cq", d.Name(), syscall.EINVAL, "depth %d not in [1, %d]", depth, d.hw.attr.MaxCQE)
	}
	f.nextCQ++
	c := &CQ{f: f, dev: d, id: f.nextCQ, depth: depth}
	d.children++
	f.live.CQs++
	f.addLocked(c)
	return c, nil
}

// Close closes a context from OpenDevice; it fails with EBUSY while PDs or
// CQs of the context are live. For an endpoint's device it does nothing.
func (d *Device) Close() error {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	return d.closeLocked(false)
}

func (d *Device) closeLocked(force bool) error {
	if !d.owned || d.closed {
		return nil
	}
	if d.children > 0 && !force {
		return opErr("ibv_close_device", d.Name(), syscall.EBUSY, "close its %d PDs and CQs first", d.children)
	}
	d.closed = true
	d.f.live.Devices--
	return nil
}

// PD is a simulated protection domain.
type PD struct {
	f        *Fabric
	dev      *Device
	closed   bool
	children int // MRs, MWs, QPs
}

var _ verbs.PD = (*PD)(nil)

func (p *PD) isClosed() bool { return p.closed }

// RegMR registers mem (any byte slice; verbs.Map memory in production) at a
// synthetic address of the fabric's address space.
func (p *PD) RegMR(mem []byte, access verbs.Access) (verbs.MR, error) {
	f := p.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || p.closed {
		return nil, verbs.ErrClosed
	}
	attr := p.dev.hw.attr
	switch {
	case len(mem) == 0:
		return nil, opErr("ibv_reg_mr", attr.Name, syscall.EINVAL, "empty memory")
	case uint64(len(mem)) > attr.MaxMRSize:
		return nil, opErr("ibv_reg_mr", attr.Name, syscall.EINVAL, "%d bytes exceeds max_mr_size %d", len(mem), attr.MaxMRSize)
	case access&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 && access&verbs.AccessLocalWrite == 0:
		return nil, opErr("ibv_reg_mr", attr.Name, syscall.EINVAL, "remote write or atomic access needs local write access")
	case f.live.MRs >= attr.MaxMR:
		return nil, opErr("ibv_reg_mr", attr.Name, syscall.ENOMEM, "max_mr %d reached", attr.MaxMR)
	}
	m := &MR{f: f, pd: p, mem: mem, access: access}
	idx, err := f.newKeyIndexLocked(m)
	if err != nil {
		return nil, opErr("ibv_reg_mr", attr.Name, err, "key space exhausted")
	}
	m.lkey = idx<<8 | f.keyByteLocked()
	if access&(verbs.AccessRemoteRead|verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 {
		m.rkey = m.lkey
	}
	m.addr = f.nextAddr
	f.nextAddr += (uint64(len(mem))+4095)&^4095 + 4096 // a guard page between regions
	p.children++
	f.live.MRs++
	f.addLocked(m)
	return m, nil
}

// AllocMW allocates a type-2 memory window; EOPNOTSUPP on a device without
// type-2 windows.
func (p *PD) AllocMW() (verbs.MW, error) {
	f := p.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || p.closed {
		return nil, verbs.ErrClosed
	}
	attr := p.dev.hw.attr
	if !attr.Has(verbs.CapMemWindow2) {
		return nil, opErr("ibv_alloc_mw", attr.Name, syscall.EOPNOTSUPP, "the device has no type-2 memory windows; register memory per I/O instead")
	}
	if f.live.MWs >= attr.MaxMW {
		return nil, opErr("ibv_alloc_mw", attr.Name, syscall.ENOMEM, "max_mw %d reached", attr.MaxMW)
	}
	w := &MW{f: f, pd: p}
	idx, err := f.newKeyIndexLocked(w)
	if err != nil {
		return nil, opErr("ibv_alloc_mw", attr.Name, err, "key space exhausted")
	}
	w.idx = idx
	w.hwKey = idx<<8 | f.keyByteLocked()
	w.rkey = w.hwKey
	p.children++
	f.live.MWs++
	f.addLocked(w)
	return w, nil
}

// Close deallocates the PD; EBUSY while MRs, MWs or QPs of it are live.
func (p *PD) Close() error {
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	return p.closeLocked(false)
}

func (p *PD) closeLocked(force bool) error {
	if p.closed {
		return nil
	}
	if p.children > 0 && !force {
		return opErr("ibv_dealloc_pd", p.dev.Name(), syscall.EBUSY, "close its %d MRs, MWs and QPs first", p.children)
	}
	p.closed = true
	p.dev.children--
	p.f.live.PDs--
	return nil
}

// MR is a simulated memory region.
type MR struct {
	f          *Fabric
	pd         *PD
	mem        []byte
	addr       uint64
	lkey, rkey uint32
	access     verbs.Access
	closed     bool
	bound      int // windows currently bound on it
}

var _ verbs.MR = (*MR)(nil)

func (m *MR) Bytes() []byte        { return m.mem }
func (m *MR) Addr() uint64         { return m.addr }
func (m *MR) LKey() uint32         { return m.lkey }
func (m *MR) RKey() uint32         { return m.rkey }
func (m *MR) Access() verbs.Access { return m.access }
func (m *MR) isClosed() bool       { return m.closed }
func (m *MR) contains(addr, n uint64) bool {
	return addr >= m.addr && n <= uint64(len(m.mem)) && addr-m.addr <= uint64(len(m.mem))-n
}

// ChangeAccess changes the MR's rights in place (verbs.AccessChanger),
// as ibv_rereg_mr with IBV_REREG_MR_CHANGE_ACCESS: the rkey is valid
// exactly while the access has a remote right. EBUSY while windows are
// bound on it.
func (m *MR) ChangeAccess(access verbs.Access) error {
	f := m.f
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case m.closed:
		return verbs.ErrClosed
	case f.cfg.noRereg:
		return opErr("ibv_rereg_mr", m.pd.dev.hw.attr.Name, syscall.EOPNOTSUPP, "the device cannot change an MR's access")
	case access&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 && access&verbs.AccessLocalWrite == 0:
		return opErr("ibv_rereg_mr", m.pd.dev.hw.attr.Name, syscall.EINVAL, "remote write or atomic access needs local write access")
	case m.bound > 0:
		return opErr("ibv_rereg_mr", m.pd.dev.hw.attr.Name, syscall.EBUSY, "%d windows bound on it", m.bound)
	}
	m.access = access
	m.rkey = 0
	if access&(verbs.AccessRemoteRead|verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 {
		m.rkey = m.lkey
	}
	return nil
}

// Close deregisters the MR; EBUSY while windows are bound on it (rxe
// refuses too). Its keys are never valid again.
func (m *MR) Close() error {
	m.f.mu.Lock()
	defer m.f.mu.Unlock()
	return m.closeLocked(false)
}

func (m *MR) closeLocked(force bool) error {
	if m.closed {
		return nil
	}
	if m.bound > 0 && !force {
		return opErr("ibv_dereg_mr", fmt.Sprintf("lkey %#x", m.lkey), syscall.EBUSY, "%d memory windows are still bound on it; invalidate or close them first", m.bound)
	}
	if m.bound > 0 {
		for _, o := range m.f.keys {
			if w, ok := o.(*MW); ok && w.valid && w.mr == m {
				w.unbindLocked()
			}
		}
	}
	m.closed = true
	delete(m.f.keys, m.lkey>>8)
	m.pd.children--
	m.f.live.MRs--
	return nil
}

// MW is a simulated type-2B memory window.
type MW struct {
	f      *Fabric
	pd     *PD
	idx    uint32
	rkey   uint32 // the key the consumer knows: the last posted bind's
	hwKey  uint32 // the key the device holds
	valid  bool
	qp     *QP
	mr     *MR
	addr   uint64
	length uint64
	access verbs.Access
	closed bool
}

var _ verbs.MW = (*MW)(nil)

// RKey is the rkey of the last posted bind (or the initial key).
func (w *MW) RKey() uint32 {
	w.f.mu.Lock()
	defer w.f.mu.Unlock()
	return w.rkey
}

// Valid reports whether the window is bound (valid) in the device, and its
// device-side rkey. Tests use it to check window state.
func (w *MW) Valid() (valid bool, rkey uint32) {
	w.f.mu.Lock()
	defer w.f.mu.Unlock()
	return w.valid, w.hwKey
}

func (w *MW) isClosed() bool { return w.closed }

// unbindLocked makes the window invalid.
func (w *MW) unbindLocked() {
	if !w.valid {
		return
	}
	w.valid = false
	w.mr.bound--
	w.mr, w.qp = nil, nil
}

// Close deallocates the window (invalidating it if bound).
func (w *MW) Close() error {
	w.f.mu.Lock()
	defer w.f.mu.Unlock()
	return w.closeLocked(false)
}

func (w *MW) closeLocked(bool) error {
	if w.closed {
		return nil
	}
	w.unbindLocked()
	w.closed = true
	delete(w.f.keys, w.idx)
	w.pd.children--
	w.f.live.MWs--
	return nil
}

// CQ is a simulated completion queue.
type CQ struct {
	f        *Fabric
	dev      *Device
	id       int
	depth    int
	q        []cqe
	notify   chan struct{} // closed at the next completion; nil when nobody waits
	overflow bool
	closed   bool
	refs     int // QPs using it
}

var _ verbs.CQ = (*CQ)(nil)

// cqe is a completion with what polling it releases.
type cqe struct {
	wc     verbs.Completion
	qp     *QP
	send   bool       // a send-queue completion: polling it frees slots
	slots  int        // send-queue slots it retires
	checks []bufCheck // source buffers it retires
}

func (c *CQ) isClosed() bool { return c.closed }

func (c *CQ) overflowErr() error {
	return opErr("ibv_poll_cq", fmt.Sprintf("cq %d", c.id), syscall.EOVERFLOW,
		"completion queue overflow: more than %d completions were outstanding; the QPs using it are in the error state", c.depth)
}

// pushLocked appends a completion, overflowing the CQ if it is full.
func (c *CQ) pushLocked(e cqe) {
	if c.closed || c.overflow {
		return
	}
	if len(c.q) >= c.depth {
		c.overflow = true
		c.f.anomalies.CQOverflows++
		c.wakeLocked()
		for _, q := range c.f.qps {
			if q.scq == c || q.rcq == c {
				q.toErrorLocked()
			}
		}
		return
	}
	c.q = append(c.q, e)
	c.wakeLocked()
}

func (c *CQ) wakeLocked() {
	if c.notify != nil {
		close(c.notify)
		c.notify = nil
	}
}

// Poll reaps up to len(wcs) completions. Polling a send completion frees
// the send-queue slots of the WRs it retires.
func (c *CQ) Poll(wcs []verbs.Completion) (int, error) {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if c.closed {
		return 0, verbs.ErrClosed
	}
	if c.overflow {
		return 0, c.overflowErr()
	}
	n := min(len(wcs), len(c.q))
	for i := range n {
		e := &c.q[i]
		wcs[i] = e.wc
		if e.qp != nil && !e.qp.closed {
			if e.send {
				e.qp.sqUsed -= e.slots
			} else {
				e.qp.rqUsed--
			}
		}
		for _, b := range e.checks {
			if !b.unchanged(f) {
				f.anomalies.SendBuffersReusedEarly++
			}
		}
	}
	rest := copy(c.q, c.q[n:])
	clear(c.q[rest:])
	c.q = c.q[:rest]
	return n, nil
}

// PollSpin is Poll that keeps polling for up to spin before returning
// empty (verbs.SpinPoller), yielding the processor between polls.
func (c *CQ) PollSpin(wcs []verbs.Completion, spin time.Duration) (int, error) {
	deadline := time.Now().Add(spin)
	for {
		n, err := c.Poll(wcs)
		if n > 0 || err != nil || !time.Now().Before(deadline) {
			return n, err
		}
		runtime.Gosched()
	}
}

// Wait returns when the CQ has a completion or ctx is done. It blocks on a
// channel: no CPU is used while waiting.
func (c *CQ) Wait(ctx context.Context) error {
	f := c.f
	f.mu.Lock()
	if c.closed {
		f.mu.Unlock()
		return verbs.ErrClosed
	}
	if c.overflow {
		f.mu.Unlock()
		return c.overflowErr()
	}
	if len(c.q) > 0 {
		f.mu.Unlock()
		return nil
	}
	if c.notify == nil {
		c.notify = make(chan struct{})
	}
	ch := c.notify
	f.mu.Unlock()
	if err := waitCtx(ctx, ch); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if c.closed {
		return verbs.ErrClosed
	}
	return nil
}

// Close destroys the CQ; EBUSY while QPs use it.
func (c *CQ) Close() error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	return c.closeLocked(false)
}

func (c *CQ) closeLocked(force bool) error {
	if c.closed {
		return nil
	}
	if c.refs > 0 && !force {
		return opErr("ibv_destroy_cq", fmt.Sprintf("cq %d", c.id), syscall.EBUSY, "destroy the %d QPs using it first", c.refs)
	}
	c.closed = true
	c.q = nil
	c.wakeLocked()
	c.dev.children--
	c.f.live.CQs--
	return nil
}
