//go:build linux && cgo

// Package ibv binds nfsrdma's verbs interfaces to rdma-core (libibverbs and
// librdmacm) through cgo. It is the only package with cgo and unsafe.
//
// One cgo crossing posts a whole WR chain or reaps a batch of completions;
// the C helpers take scalars and flat descriptor arrays in C memory.
// Completion-channel and CM-event descriptors wait on Go's netpoller.
// Memory handed to the device must come from verbs.Map (mmap), never the
// Go heap.
package ibv

/*
#cgo LDFLAGS: -libverbs -lrdmacm
#include <stdlib.h>
#include <errno.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/nfsrdma/nfsrdma/verbs"
)

// Fabric is the rdma-core implementation of verbs.Fabric.
type Fabric struct {
	live struct {
		endpoints, devices, pds, cqs, qps, mrs, mws atomic.Int64
	}
	asyncMu sync.Mutex
	hubs    map[uintptr]*asyncHub // asynchronous-event readers, one per ibv_context
}

// Open returns the rdma-core fabric. It fails when no RDMA device exists,
// with a message saying how to create one.
func Open() (*Fabric, error) {
	f := &Fabric{}
	names, err := f.Devices()
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, errNoDevice
	}
	return f, nil
}

var errNoDevice = &verbs.OpError{Verb: "ibv_get_device_list", Err: syscall.ENODEV,
	Hint: "no RDMA device: load a driver or create a Soft-RoCE device with 'rdma link add rxe0 type rxe netdev IFACE'"}

// Live counts the resources created through f and not yet closed.
func (f *Fabric) Live() verbs.ResourceCounts {
	return verbs.ResourceCounts{
		Endpoints: int(f.live.endpoints.Load()), Devices: int(f.live.devices.Load()), PDs: int(f.live.pds.Load()),
		CQs: int(f.live.cqs.Load()), QPs: int(f.live.qps.Load()), MRs: int(f.live.mrs.Load()), MWs: int(f.live.mws.Load()),
	}
}

// Devices lists the RDMA devices.
func (f *Fabric) Devices() ([]string, error) {
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		if err == syscall.ENOSYS || err == syscall.ENOENT || err == nil {
			return nil, nil
		}
		return nil, &verbs.OpError{Verb: "ibv_get_device_list", Err: err}
	}
	defer C.ibv_free_device_list(list)
	devs := unsafe.Slice(list, int(n))
	names := make([]string, 0, len(devs))
	for _, d := range devs {
		names = append(names, C.GoString(C.ibv_get_device_name(d)))
	}
	return names, nil
}

// OpenDevice opens a device by name.
func (f *Fabric) OpenDevice(name string) (verbs.Device, error) {
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		if err == nil {
			err = syscall.ENODEV
		}
		return nil, &verbs.OpError{Verb: "ibv_get_device_list", Object: name, Err: err, Hint: errNoDevice.Hint}
	}
	defer C.ibv_free_device_list(list)
	var names []string
	for _, d := range unsafe.Slice(list, int(n)) {
		dn := C.GoString(C.ibv_get_device_name(d))
		names = append(names, dn)
		if dn != name {
			continue
		}
		ctx, err := C.ibv_open_device(d)
		if ctx == nil {
			return nil, &verbs.OpError{Verb: "ibv_open_device", Object: name, Err: err}
		}
		dev, err := newDevice(f, ctx, true)
		if err != nil {
			C.ibv_close_device(ctx)
			return nil, err
		}
		return dev, nil
	}
	hint := "no RDMA device by that name; present: " + strings.Join(names, ", ")
	if len(names) == 0 {
		hint = errNoDevice.Hint
	}
	return nil, &verbs.OpError{Verb: "ibv_open_device", Object: name, Err: syscall.ENODEV, Hint: hint}
}

// device is an ibv_context.
type device struct {
	f      *Fabric
	ctx    *C.struct_ibv_context
	owned  bool
	attr   verbs.DeviceAttr
	quirks Quirks
	closed atomic.Bool
}

func newDevice(f *Fabric, ctx *C.struct_ibv_context, owned bool) (*device, error) {
	name := C.GoString(C.ibv_get_device_name(ctx.device))
	var a C.struct_nr_dev_attr
	if r := C.nr_query_device(ctx, &a); r != 0 {
		return nil, &verbs.OpError{Verb: "ibv_query_device", Object: name, Err: syscall.Errno(r)}
	}
	d := &device{f: f, ctx: ctx, owned: owned}
	d.attr = verbs.DeviceAttr{
		Name: name, Driver: driverOf(name, uint32(a.vendor_id)),
		MaxQPWR: int(a.max_qp_wr), MaxSGE: int(a.max_sge), MaxCQE: int(a.max_cqe), MaxMR: int(a.max_mr),
		MaxMW: int(a.max_mw), MaxQPRdAtom: int(a.max_qp_rd_atom), MaxMRSize: uint64(a.max_mr_size),
	}
	caps := uint64(a.device_cap_flags)
	if caps&C.IBV_DEVICE_MEM_WINDOW_TYPE_2A != 0 {
		d.attr.Caps |= verbs.CapMemWindow2 | verbs.CapMemWindow2A
	}
	if caps&C.IBV_DEVICE_MEM_WINDOW_TYPE_2B != 0 {
		d.attr.Caps |= verbs.CapMemWindow2 | verbs.CapMemWindow2B
	}
	if caps&C.IBV_DEVICE_MEM_MGT_EXTENSIONS != 0 {
		d.attr.Caps |= verbs.CapMemMgtExtensions
	}
	d.quirks = quirksFor(d.attr.Driver)
	d.attr.WindowsUnbounded = !d.quirks.WindowBoundsEnforced
	d.attr.StaleInvalidatePanics = d.quirks.StaleInvalidatePanics
	if owned {
		f.live.devices.Add(1)
	}
	return d, nil
}

// driverOf names the kernel driver behind a device.
func driverOf(name string, vendor uint32) string {
	if vendor == 0xFFFFFF {
		return "rxe" // RXE_VENDOR_ID
	}
	if link, err := os.Readlink(filepath.Join("/sys/class/infiniband", name, "device/driver")); err == nil {
		return filepath.Base(link)
	}
	for _, p := range []string{"rxe", "siw", "mlx5", "mlx4", "irdma", "bnxt_re", "efa", "hfi1", "qedr", "erdma"} {
		if strings.HasPrefix(name, p) {
			return p
		}
	}
	return "unknown"
}

func (d *device) Name() string           { return d.attr.Name }
func (d *device) Attr() verbs.DeviceAttr { return d.attr }
func (d *device) Quirks() Quirks         { return d.quirks }
func (d *device) Close() error {
	if !d.owned || d.closed.Swap(true) {
		return nil
	}
	d.f.live.devices.Add(-1)
	if r := C.ibv_close_device(d.ctx); r != 0 {
		return &verbs.OpError{Verb: "ibv_close_device", Object: d.attr.Name, Err: syscall.Errno(r)}
	}
	return nil
}

func (d *device) AllocPD() (verbs.PD, error) {
	pd, err := C.ibv_alloc_pd(d.ctx)
	if pd == nil {
		return nil, &verbs.OpError{Verb: "ibv_alloc_pd", Object: d.attr.Name, Err: err}
	}
	d.f.live.pds.Add(1)
	return &protDomain{d: d, pd: pd}, nil
}

func (d *device) CreateCQ(depth int) (verbs.CQ, error) {
	ch, err := C.ibv_create_comp_channel(d.ctx)
	if ch == nil {
		return nil, &verbs.OpError{Verb: "ibv_create_comp_channel", Object: d.attr.Name, Err: err}
	}
	cq, err := C.ibv_create_cq(d.ctx, C.int(depth), nil, ch, 0)
	if cq == nil {
		C.ibv_destroy_comp_channel(ch)
		return nil, &verbs.OpError{Verb: "ibv_create_cq", Object: fmt.Sprintf("%s depth %d", d.attr.Name, depth), Err: err}
	}
	pfd, perr := newPollFD(int(ch.fd), d.attr.Name+"-cq")
	if perr != nil {
		C.ibv_destroy_cq(cq)
		C.ibv_destroy_comp_channel(ch)
		return nil, &verbs.OpError{Verb: "completion channel fd", Object: d.attr.Name, Err: perr}
	}
	c := &compQueue{d: d, cq: cq, ch: ch, fd: pfd}
	c.buf = (*C.struct_nr_wc)(C.calloc(C.size_t(cqBatch), C.size_t(unsafe.Sizeof(C.struct_nr_wc{}))))
	d.f.live.cqs.Add(1)
	return c, nil
}

// protDomain is an ibv_pd.
type protDomain struct {
	d      *device
	pd     *C.struct_ibv_pd
	closed atomic.Bool
}

func ibvAccess(a verbs.Access) C.int {
	var f C.int
	if a&verbs.AccessLocalWrite != 0 {
		f |= C.IBV_ACCESS_LOCAL_WRITE
	}
	if a&verbs.AccessRemoteWrite != 0 {
		f |= C.IBV_ACCESS_REMOTE_WRITE
	}
	if a&verbs.AccessRemoteRead != 0 {
		f |= C.IBV_ACCESS_REMOTE_READ
	}
	if a&verbs.AccessRemoteAtomic != 0 {
		f |= C.IBV_ACCESS_REMOTE_ATOMIC
	}
	if a&verbs.AccessMWBind != 0 {
		f |= C.IBV_ACCESS_MW_BIND
	}
	return f
}

// RegMR registers mmap'd memory (see verbs.Map).
func (p *protDomain) RegMR(mem []byte, access verbs.Access) (verbs.MR, error) {
	if len(mem) == 0 {
		return nil, &verbs.OpError{Verb: "ibv_reg_mr", Object: p.d.attr.Name, Err: syscall.EINVAL, Hint: "empty memory"}
	}
	mr, err := C.ibv_reg_mr(p.pd, unsafe.Pointer(&mem[0]), C.size_t(len(mem)), ibvAccess(access))
	if mr == nil {
		return nil, &verbs.OpError{Verb: "ibv_reg_mr", Object: fmt.Sprintf("%s %d bytes", p.d.attr.Name, len(mem)), Err: err}
	}
	p.d.f.live.mrs.Add(1)
	return &memRegion{pd: p, mr: mr, mem: mem, access: access}, nil
}

func (p *protDomain) AllocMW() (verbs.MW, error) {
	mw, err := C.ibv_alloc_mw(p.pd, C.IBV_MW_TYPE_2)
	if mw == nil {
		hint := ""
		if !p.d.attr.Has(verbs.CapMemWindow2) {
			hint = "the device has no type-2 memory windows: use per-I/O registration"
		}
		return nil, &verbs.OpError{Verb: "ibv_alloc_mw", Object: p.d.attr.Name, Err: err, Hint: hint}
	}
	p.d.f.live.mws.Add(1)
	return &memWindow{pd: p, mw: mw}, nil
}

func (p *protDomain) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	p.d.f.live.pds.Add(-1)
	if r := C.ibv_dealloc_pd(p.pd); r != 0 {
		return &verbs.OpError{Verb: "ibv_dealloc_pd", Object: p.d.attr.Name, Err: syscall.Errno(r), Hint: "close every MR, MW and QP of the PD first"}
	}
	return nil
}

// memRegion is an ibv_mr.
type memRegion struct {
	pd     *protDomain
	mr     *C.struct_ibv_mr
	mem    []byte
	access verbs.Access
	closed atomic.Bool
}

func (m *memRegion) Bytes() []byte        { return m.mem }
func (m *memRegion) Addr() uint64         { return uint64(uintptr(m.mr.addr)) }
func (m *memRegion) LKey() uint32         { return uint32(m.mr.lkey) }
func (m *memRegion) RKey() uint32         { return uint32(m.mr.rkey) }
func (m *memRegion) Access() verbs.Access { return m.access }
func (m *memRegion) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	m.pd.d.f.live.mrs.Add(-1)
	if r := C.ibv_dereg_mr(m.mr); r != 0 {
		return &verbs.OpError{Verb: "ibv_dereg_mr", Err: syscall.Errno(r)}
	}
	return nil
}

// ChangeAccess is ibv_rereg_mr(IBV_REREG_MR_CHANGE_ACCESS): the MR keeps
// its memory and PD, with new rights (verbs.AccessChanger).
func (m *memRegion) ChangeAccess(access verbs.Access) error {
	if m.closed.Load() {
		return verbs.ErrClosed
	}
	// It returns 0, or one of the negative IBV_REREG_MR_ERR_* codes with
	// errno set (EOPNOTSUPP from a driver without re-registration).
	r, err := C.ibv_rereg_mr(m.mr, C.IBV_REREG_MR_CHANGE_ACCESS, nil, nil, 0, ibvAccess(access))
	if r != 0 {
		errno, ok := err.(syscall.Errno)
		if !ok || errno == 0 || errno == syscall.ENOSYS {
			errno = syscall.EOPNOTSUPP
		}
		return &verbs.OpError{Verb: "ibv_rereg_mr", Object: m.pd.d.attr.Name, Err: errno, Hint: fmt.Sprintf("changing an MR's access (code %d)", int(r))}
	}
	m.access = access
	return nil
}

// memWindow is a type-2 ibv_mw.
type memWindow struct {
	pd     *protDomain
	mw     *C.struct_ibv_mw
	closed atomic.Bool
}

func (w *memWindow) RKey() uint32 { return uint32(w.mw.rkey) }
func (w *memWindow) Close() error {
	if w.closed.Swap(true) {
		return nil
	}
	w.pd.d.f.live.mws.Add(-1)
	if r := C.ibv_dealloc_mw(w.mw); r != 0 {
		return &verbs.OpError{Verb: "ibv_dealloc_mw", Err: syscall.Errno(r)}
	}
	return nil
}

const cqBatch = 64

// compQueue is an ibv_cq with its own completion channel.
type compQueue struct {
	d       *device
	cq      *C.struct_ibv_cq
	ch      *C.struct_ibv_comp_channel
	fd      *pollFD
	mu      sync.Mutex
	buf     *C.struct_nr_wc // cqBatch entries, C memory
	pending []verbs.Completion
	closed  atomic.Bool
}

func (c *compQueue) convert(w *C.struct_nr_wc) verbs.Completion {
	wc := verbs.Completion{
		ID: uint64(w.wr_id), Status: verbs.Status(w.status), ByteLen: uint32(w.byte_len),
		QPNum: uint32(w.qp_num), VendorErr: uint32(w.vendor_err),
	}
	switch w.opcode {
	case C.IBV_WC_SEND:
		wc.Opcode = verbs.WCSend
	case C.IBV_WC_RDMA_WRITE:
		wc.Opcode = verbs.WCRDMAWrite
	case C.IBV_WC_RDMA_READ:
		wc.Opcode = verbs.WCRDMARead
	case C.IBV_WC_BIND_MW:
		wc.Opcode = verbs.WCBindMW
	case C.IBV_WC_LOCAL_INV:
		wc.Opcode = verbs.WCLocalInv
	case C.IBV_WC_RECV:
		wc.Opcode = verbs.WCRecv
	case C.IBV_WC_RECV_RDMA_WITH_IMM:
		wc.Opcode = verbs.WCRecvRDMAWithImm
	default:
		wc.Opcode = verbs.WCOpcode(w.opcode)
	}
	flags := uint32(w.wc_flags)
	if flags&C.IBV_WC_WITH_IMM != 0 {
		wc.Flags |= verbs.WCWithImm
	}
	// Normalize Send With Invalidate to the flag bit the driver really
	// uses (the quirk table); the layer above still checks the rkey.
	if wc.Status == verbs.StatusSuccess && wc.Opcode == verbs.WCRecv && flags&c.d.quirks.WithInvFlags != 0 {
		wc.Flags |= verbs.WCWithInv
		wc.InvalidatedRKey = uint32(w.ex_data)
	}
	return wc
}

// Poll reaps up to len(wcs) completions in one crossing per batch.
func (c *compQueue) Poll(wcs []verbs.Completion) (int, error) {
	if c.closed.Load() {
		return 0, verbs.ErrClosed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := copy(wcs, c.pending)
	c.pending = c.pending[:copy(c.pending, c.pending[n:])]
	if n == len(wcs) {
		return n, nil
	}
	return c.pollLocked(wcs, n)
}

func (c *compQueue) pollLocked(wcs []verbs.Completion, n int) (int, error) {
	buf := unsafe.Slice(c.buf, cqBatch)
	for n < len(wcs) {
		want := min(len(wcs)-n, cqBatch)
		r := int(C.nr_poll_cq(c.cq, c.buf, C.int(want)))
		if r < 0 {
			return n, &verbs.OpError{Verb: "ibv_poll_cq", Object: c.d.attr.Name, Err: syscall.Errno(-r)}
		}
		for i := 0; i < r; i++ {
			wcs[n+i] = c.convert(&buf[i])
		}
		n += r
		if r < want {
			break
		}
	}
	return n, nil
}

// PollSpin is Poll that busy-polls inside the provider for up to spin
// before returning empty: one cgo crossing however long it spins
// (verbs.SpinPoller).
func (c *compQueue) PollSpin(wcs []verbs.Completion, spin time.Duration) (int, error) {
	if c.closed.Load() {
		return 0, verbs.ErrClosed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) > 0 {
		n := copy(wcs, c.pending)
		c.pending = c.pending[:copy(c.pending, c.pending[n:])]
		return n, nil
	}
	want := min(len(wcs), cqBatch)
	r := int(C.nr_poll_cq_spin(c.cq, c.buf, C.int(want), C.int64_t(spin)))
	if r < 0 {
		return 0, &verbs.OpError{Verb: "ibv_poll_cq", Object: c.d.attr.Name, Err: syscall.Errno(-r)}
	}
	buf := unsafe.Slice(c.buf, cqBatch)
	for i := 0; i < r; i++ {
		wcs[i] = c.convert(&buf[i])
	}
	return r, nil
}

// Wait arms the CQ and sleeps on the completion channel until an event or
// ctx ends. A completion that arrived before arming is found by the poll
// after arming and kept for the next Poll.
func (c *compQueue) Wait(ctx context.Context) error {
	if c.closed.Load() {
		return verbs.ErrClosed
	}
	c.mu.Lock()
	if len(c.pending) > 0 {
		c.mu.Unlock()
		return nil
	}
	if r := C.ibv_req_notify_cq(c.cq, 0); r != 0 {
		c.mu.Unlock()
		return &verbs.OpError{Verb: "ibv_req_notify_cq", Object: c.d.attr.Name, Err: syscall.Errno(r)}
	}
	var tmp [cqBatch]verbs.Completion
	n, err := c.pollLocked(tmp[:], 0)
	c.pending = append(c.pending, tmp[:n]...)
	c.mu.Unlock()
	if err != nil || n > 0 {
		return err
	}
	// The first read usually finds nothing, but it cannot be skipped: the
	// wait (syscall.RawConn.Read) forgets any readiness the netpoller saw
	// before it began, so an event raised between the arming above and
	// the wait would be missed and the wait would sleep forever (tried:
	// the reply loop hung on its first call).
	var werr error
	err = c.fd.wait(ctx, func() bool {
		r := C.nr_get_cq_event(c.ch, c.cq)
		switch r {
		case 0:
			return true
		case C.EAGAIN:
			return false
		}
		werr = &verbs.OpError{Verb: "ibv_get_cq_event", Object: c.d.attr.Name, Err: syscall.Errno(r)}
		return true
	})
	if err == errClosedWait {
		return verbs.ErrClosed
	}
	if err != nil {
		return err
	}
	return werr
}

func (c *compQueue) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.d.f.live.cqs.Add(-1)
	c.fd.close()
	c.mu.Lock()
	defer c.mu.Unlock()
	C.free(unsafe.Pointer(c.buf))
	if r := C.ibv_destroy_cq(c.cq); r != 0 {
		return &verbs.OpError{Verb: "ibv_destroy_cq", Object: c.d.attr.Name, Err: syscall.Errno(r), Hint: "destroy the QPs using the CQ first"}
	}
	if r := C.ibv_destroy_comp_channel(c.ch); r != 0 {
		return &verbs.OpError{Verb: "ibv_destroy_comp_channel", Object: c.d.attr.Name, Err: syscall.Errno(r)}
	}
	return nil
}

// Scratch sizes of one post: the C helpers' limits.
const (
	maxChain = 64
	maxSGEs  = 512
)

// queuePair is an RC ibv_qp created by rdma_create_qp.
type queuePair struct {
	ep     *endpoint
	qp     *C.struct_ibv_qp
	caps   verbs.QPCaps
	sendMu sync.Mutex
	recvMu sync.Mutex
	swr    *C.struct_nr_swr
	rwr    *C.struct_nr_rwr
	ssge   *C.struct_nr_sge
	rsge   *C.struct_nr_sge
	closed atomic.Bool
	// errored is set once the QP is known to be in the error state.
	errored atomic.Bool
}

func (q *queuePair) Num() uint32        { return uint32(q.qp.qp_num) }
func (q *queuePair) Caps() verbs.QPCaps { return q.caps }

func fillSGE(dst *C.struct_nr_sge, g verbs.SGE) {
	dst.addr = C.uint64_t(g.MR.Addr() + g.Offset)
	dst.length = C.uint32_t(g.Length)
	dst.lkey = C.uint32_t(g.MR.LKey())
}

// PostSend posts the chain in one crossing.
func (q *queuePair) PostSend(wrs []verbs.SendWR) (int, error) {
	if q.closed.Load() {
		return 0, verbs.ErrClosed
	}
	if len(wrs) > maxChain {
		return 0, &verbs.OpError{Verb: "ibv_post_send", Err: syscall.E2BIG, Hint: fmt.Sprintf("chain of %d WRs; at most %d per post", len(wrs), maxChain)}
	}
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	ds := unsafe.Slice(q.swr, maxChain)
	ss := unsafe.Slice(q.ssge, maxSGEs)
	nsge := 0
	for i := range wrs {
		w := &wrs[i]
		d := &ds[i]
		*d = C.struct_nr_swr{}
		d.wr_id = C.uint64_t(w.ID)
		d.opcode = C.uint32_t(w.Opcode)
		d.flags = C.uint32_t(w.Flags)
		d.remote_addr = C.uint64_t(w.RemoteAddr)
		d.rkey = C.uint32_t(w.RKey)
		d.inv_rkey = C.uint32_t(w.InvalidateRKey)
		if nsge+len(w.SGL) > maxSGEs {
			return 0, &verbs.OpError{Verb: "ibv_post_send", Err: syscall.E2BIG, Hint: "too many SGEs in one chain"}
		}
		d.sge_first = C.uint32_t(nsge)
		d.num_sge = C.uint32_t(len(w.SGL))
		for _, g := range w.SGL {
			fillSGE(&ss[nsge], g)
			nsge++
		}
		if w.Opcode == verbs.OpBindMW {
			mw, ok := w.MW.(*memWindow)
			mr, ok2 := w.BindMR.(*memRegion)
			if !ok || !ok2 {
				return 0, &verbs.OpError{Verb: "ibv_post_send", Err: syscall.EINVAL, Hint: "BIND_MW needs an ibv window and MR"}
			}
			d.mw = C.uintptr_t(uintptr(unsafe.Pointer(mw.mw)))
			d.bind_mr = C.uintptr_t(uintptr(unsafe.Pointer(mr.mr)))
			d.bind_addr = C.uint64_t(w.BindAddr)
			d.bind_length = C.uint64_t(w.BindLength)
			d.bind_access = C.uint32_t(ibvAccess(w.BindAccess))
			d.bind_rkey = C.uint32_t(w.BindRKey)
		}
	}
	var bad C.int
	r := C.nr_post_send(q.qp, q.swr, C.int(len(wrs)), q.ssge, &bad)
	if r != 0 {
		return int(bad), &verbs.OpError{Verb: "ibv_post_send", Object: fmt.Sprintf("qp %d", q.Num()), Err: syscall.Errno(r)}
	}
	return len(wrs), nil
}

func (q *queuePair) PostRecv(wrs []verbs.RecvWR) (int, error) {
	if q.closed.Load() {
		return 0, verbs.ErrClosed
	}
	if len(wrs) > maxChain {
		return 0, &verbs.OpError{Verb: "ibv_post_recv", Err: syscall.E2BIG, Hint: fmt.Sprintf("at most %d WRs per post", maxChain)}
	}
	q.recvMu.Lock()
	defer q.recvMu.Unlock()
	ds := unsafe.Slice(q.rwr, maxChain)
	ss := unsafe.Slice(q.rsge, maxSGEs)
	nsge := 0
	for i := range wrs {
		if nsge+len(wrs[i].SGL) > maxSGEs {
			return 0, &verbs.OpError{Verb: "ibv_post_recv", Err: syscall.E2BIG, Hint: "too many SGEs in one chain"}
		}
		ds[i].wr_id = C.uint64_t(wrs[i].ID)
		ds[i].sge_first = C.uint32_t(nsge)
		ds[i].num_sge = C.uint32_t(len(wrs[i].SGL))
		for _, g := range wrs[i].SGL {
			fillSGE(&ss[nsge], g)
			nsge++
		}
	}
	var bad C.int
	r := C.nr_post_recv(q.qp, q.rwr, C.int(len(wrs)), q.rsge, &bad)
	if r != 0 {
		return int(bad), &verbs.OpError{Verb: "ibv_post_recv", Object: fmt.Sprintf("qp %d", q.Num()), Err: syscall.Errno(r)}
	}
	if q.errored.Load() && q.ep.dev.quirks.KickRecvFlush {
		// The driver flushes receives only when it enters the error state:
		// enter it again so these flush too (normalized behaviour).
		C.nr_modify_qp_err(q.qp)
	}
	return len(wrs), nil
}

func (q *queuePair) State() (verbs.QPState, error) {
	if q.closed.Load() {
		return 0, verbs.ErrClosed
	}
	var s C.int
	if r := C.nr_query_qp_state(q.qp, &s); r != 0 {
		return 0, &verbs.OpError{Verb: "ibv_query_qp", Err: syscall.Errno(r)}
	}
	return verbs.QPState(s), nil
}

func (q *queuePair) SetError() error {
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	if q.closed.Load() {
		return verbs.ErrClosed
	}
	if r := C.nr_modify_qp_err(q.qp); r != 0 {
		return &verbs.OpError{Verb: "ibv_modify_qp(ERR)", Err: syscall.Errno(r)}
	}
	q.errored.Store(true)
	return nil
}

func (q *queuePair) Close() error {
	if q.closed.Swap(true) {
		return nil
	}
	// Lock order: endpoint, then send, then receive.
	q.ep.mu.Lock()
	defer q.ep.mu.Unlock()
	q.sendMu.Lock()
	q.recvMu.Lock()
	defer q.sendMu.Unlock()
	defer q.recvMu.Unlock()
	q.ep.f.live.qps.Add(-1)
	C.rdma_destroy_qp(q.ep.id)
	q.ep.qp.Store(nil)
	C.free(unsafe.Pointer(q.swr))
	C.free(unsafe.Pointer(q.rwr))
	C.free(unsafe.Pointer(q.ssge))
	C.free(unsafe.Pointer(q.rsge))
	return nil
}

// Quirks are a device's departures from the verbs specification that the
// binding normalizes or the layers above must respect. They live in one
// table, keyed by driver.
type Quirks struct {
	Driver string
	// WithInvFlags are the raw wc_flags bits that mean "received with
	// invalidate" on this driver.
	WithInvFlags uint32
	// WindowBoundsEnforced is false when a window's rkey reaches the whole
	// underlying MR: register each I/O buffer as its own MR.
	WindowBoundsEnforced bool
	// DoubleLocalInvPanics: a LOCAL_INV of an already invalid rkey crashes
	// the kernel driver. Window state must be exact.
	DoubleLocalInvPanics bool
	// StaleInvalidatePanics: a Send With Invalidate from the peer naming
	// the rkey of a window that is already invalid crashes the kernel
	// driver (rxe_invalidate_mw puts the window's MR, which is gone). The
	// peer decides that, so windows are replaced as soon as they are
	// invalid (frwr.Config.RetireWindows).
	StaleInvalidatePanics bool
	// KickRecvFlush: a receive posted to a QP already in the error state
	// never completes (user-space rxe has no receive doorbell; the driver
	// flushes the receive queue only on entering the error state). The
	// binding normalizes it: after posting receives to an errored QP it
	// moves the QP to the error state again, which flushes them.
	KickRecvFlush bool
}

var quirkTable = map[string]Quirks{
	// Soft-RoCE, measured on kernel 6.1 with rdma-core 44 (the test bed's guest):
	// it reports Send With Invalidate with the kernel's IB_WC_WITH_INVALIDATE
	// bit (0x4, libibverbs' IBV_WC_IP_CSUM_OK) instead of IBV_WC_WITH_INV.
	"rxe": {Driver: "rxe", WithInvFlags: C.IBV_WC_WITH_INV | C.IBV_WC_IP_CSUM_OK, WindowBoundsEnforced: false, DoubleLocalInvPanics: true,
		StaleInvalidatePanics: true, KickRecvFlush: true},
}

func quirksFor(driver string) Quirks {
	if q, ok := quirkTable[driver]; ok {
		return q
	}
	return Quirks{Driver: driver, WithInvFlags: C.IBV_WC_WITH_INV, WindowBoundsEnforced: true}
}

// QuirksOf returns the quirks of a device opened through this package.
func QuirksOf(d verbs.Device) (Quirks, bool) {
	if dd, ok := d.(*device); ok {
		return dd.quirks, true
	}
	return Quirks{}, false
}
