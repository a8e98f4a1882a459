package frwr

import (
	"errors"
	"fmt"

	"github.com/nfsrdma/nfsrdma/verbs"
)

// ErrDetached is returned by Register while the registry has no device
// (between Detach and Attach).
var ErrDetached = errors.New("frwr: registry detached from its device")

// ErrBusy is returned by Detach while registrations are outstanding.
var ErrBusy = errors.New("frwr: registrations outstanding")

// Detach releases everything the registry holds on its device — every
// memory window, then every I/O buffer's MR — and keeps the buffers'
// memory, so that the device can go away (RDMA CM DEVICE_REMOVAL, or the
// route to the server moving to another device) while callers keep the
// buffers they hold. It returns ErrBusy, and releases nothing, while any
// registration is outstanding: the caller tears its connections down and
// lets their calls release first. The PD itself is the caller's to close
// after Detach. Until Attach, Register returns ErrDetached; GetBuffer and
// PutBuffer work as before (the memory stays mapped).
func (r *Registry) Detach() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waitFillsLocked() // a registration under way on the PD ends first
	if r.closed {
		return ErrClosed
	}
	if r.pd == nil {
		return nil
	}
	if n := len(r.active); n > 0 {
		return fmt.Errorf("%w: %d", ErrBusy, n)
	}
	err := errors.Join(r.unstockAllLocked(), r.releaseDeviceLocked())
	r.pd = nil
	r.c.Detaches++
	return err
}

// releaseDeviceLocked closes every window and every I/O buffer's MR,
// keeping the buffers' memory: what Detach releases, and what a failed
// Attach undoes.
func (r *Registry) releaseDeviceLocked() error {
	var errs []error
	for i, w := range r.slots {
		if w == nil {
			continue
		}
		if err := w.mw.Close(); err != nil {
			r.c.WindowCloseErrors++
			errs = append(errs, fmt.Errorf("frwr: closing memory window %d: %w", i, err))
		}
		w.state = StateDead
		r.slots[i] = nil
	}
	r.freeWins = r.freeWins[:0]
	clear(r.byIndex)
	r.deadSlots = len(r.slots)
	for i, b := range r.buffers {
		if b.mr == nil {
			continue
		}
		if err := b.mr.Close(); err != nil {
			errs = append(errs, fmt.Errorf("frwr: deregistering I/O buffer %d: %w", i, err))
		}
		b.mr = nil
	}
	return errors.Join(errs...)
}

// Attach registers the buffers' memory on pd (another device's, after
// Detach) and allocates the windows again. The mode stays the one the
// registry resolved at New: attaching a windows-mode registry to a device
// without type-2 windows fails. On failure the registry stays detached.
func (r *Registry) Attach(pd verbs.PD, attr verbs.DeviceAttr) error {
	if pd == nil {
		return errors.New("frwr: Attach: nil PD")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	if r.pd != nil {
		return errors.New("frwr: Attach: the registry is attached (Detach first)")
	}
	if r.mode == ModeWindows && !attr.Has(verbs.CapMemWindow2) {
		return fmt.Errorf("frwr: Attach: device %s has no type-2 memory windows and the registry is in %v mode", attr.Name, r.mode)
	}
	if err := windowsSafe(attr); r.mode == ModeWindows && err != nil && !r.unsafeWindows {
		return fmt.Errorf("frwr: Attach: %w", err)
	}
	undo := func(err error) error { return errors.Join(err, r.releaseDeviceLocked()) }
	access := r.bufferAccess()
	for i, b := range r.buffers {
		mr, err := pd.RegMR(b.mem, access)
		if err != nil {
			return undo(fmt.Errorf("frwr: registering I/O buffer %d: %w", i, err))
		}
		b.mr = mr
	}
	for i := range r.slots {
		if r.retire {
			break // no window before Register needs it
		}
		mw, err := pd.AllocMW()
		if err != nil {
			return undo(fmt.Errorf("frwr: allocating memory window %d: %w", i, err))
		}
		w := &window{mw: mw, slot: i, state: StateFree}
		r.slots[i] = w
		r.byIndex[mw.RKey()>>8] = w
	}
	r.pd = pd
	r.deadSlots = 0
	for _, w := range r.slots {
		if w == nil {
			r.deadSlots++
			continue
		}
		r.putWindowLocked(w)
	}
	r.c.Attaches++
	return nil
}

// bufferAccess is the access of an I/O buffer's own MR: no remote access
// (windows grant it per segment, and need MW_BIND on the MR and
// LOCAL_WRITE for a REMOTE_WRITE window; in register mode a new MR per
// segment does).
func (r *Registry) bufferAccess() verbs.Access {
	access := verbs.AccessLocalWrite
	if r.mode == ModeWindows {
		access |= verbs.AccessMWBind
	}
	return access
}

// retireWindowLocked deallocates a window that has just become invalid,
// so that no window ever sits Free under an rkey the peer has seen
// (Config.RetireWindows); its slot waits for Register to allocate a new
// one. When a Register waits for a window, the new one is allocated now
// and handed to it, before the old one is destroyed, so the device cannot
// hand the old window's index to it.
func (r *Registry) retireWindowLocked(w *window) {
	var nmw verbs.MW
	var err error
	if r.winWaiters.waitingLocked() {
		nmw, err = r.pd.AllocMW()
	}
	idx := w.mw.RKey() >> 8
	if r.byIndex[idx] == w {
		delete(r.byIndex, idx)
	}
	if cerr := w.mw.Close(); cerr != nil {
		r.c.WindowCloseErrors++
	}
	w.state, w.reg = StateDead, nil
	r.c.WindowsRetired++
	if nmw == nil {
		r.slots[w.slot] = nil
		r.deadSlots++
		if err != nil {
			r.c.WindowAllocFailures++
		}
		return // Register allocates it when it needs it
	}
	nw := &window{mw: nmw, slot: w.slot, state: StateFree}
	r.slots[w.slot] = nw
	r.byIndex[nmw.RKey()>>8] = nw
	r.putWindowLocked(nw)
}
