// Package frwr is fast registration by work request, in user space: it
// exposes the chunks of one RPC (RFC 8166 §3.4, §8) to the server and takes
// the exposure back before the RPC completes.
//
// Standard user-space verbs have no REG_MR work request; the equivalent is
// the type-2 memory window. Each I/O buffer of the pool is its own mmap'd
// memory registered once as its own MR (LOCAL_WRITE | MW_BIND, no remote
// access of its own), so a window reaches only its own buffer even on a
// device that does not enforce window bounds inside an MR (rxe). Per chunk
// segment, Register takes a free window and returns a BIND_MW work request
// over exactly [off, off+n) of one buffer with only the access the
// direction needs and a new, unpredictable rkey; the transport chains it
// unsignaled before its SEND in one post. Devices without type-2 windows
// use per-I/O ibv_reg_mr instead (ModeRegister), chosen from the device
// attributes in ModeAuto — as are devices whose windows a hostile peer can
// abuse (verbs.DeviceAttr.WindowsUnbounded: the rkey reaches the whole
// buffer; StaleInvalidatePanics: a second Send With Invalidate of a
// window crashes the kernel; both true of rxe). Forcing ModeWindows on
// such a device is refused with ErrUnsafeWindows unless
// Config.UnsafeWindows is set (for tests against a trusted server).
//
// # The life of a window
//
//	        Register                 MatchRemoteInvalidation
//	Free ──────────────▶ Bound ─────────────────────────────▶ InvalidatedRemotely ─┐
//	 ▲  ◀──────────────   │                                                        │
//	 │      Abort         │ AppendLocalInvalidations                               │
//	 │  (bind not posted) ▼                                                        │
//	 │               LocalInvPosted ───────────────────────────────────────────────┤
//	 │                                                                   Release   │
//	 └─────────────────────────────────────────────────────────────────────────────┘
//
//	Bound or LocalInvPosted ── ConnectionLost ──▶ Dead (destroyed; a new window takes its slot)
//
// Every transition is checked: a call that finds a registration in a state
// that does not allow it returns a *TransitionError (or, for calls without
// an error result, refuses and counts it in Counters.RefusedTransitions);
// it never proceeds. In particular no rkey is ever handed to LOCAL_INV
// twice, nor after the server invalidated it: on rxe that dereferences
// NULL in the kernel (measured on the test bed: kernel 6.1, rdma-core 44).
//
// # The reply handler's order
//
// An RPC completes only after every window it exposed is invalid (remotely
// or locally) and its buffers are synced, so that a late or rogue RDMA
// access with an old rkey fails at the device and never changes returned
// data:
//
//  1. MatchRemoteInvalidation with the receive completion: the server's
//     Send With Invalidate names at most one rkey.
//  2. AppendLocalInvalidations for the rest; the transport posts the chain
//     with the last WR signaled and reaps its completion.
//  3. Release, then Sync for the buffers, and only then complete the RPC.
//
// After an error completion or a lost connection the transport calls
// ConnectionLost (once the QP is in the error state and drained, before
// closing it): windows whose state is unknown are destroyed and replaced,
// never reused (rule 6). The registry finds them itself; registrations of
// RPCs the transport still holds become Dead and are dropped by Release.
//
// In register mode the same calls apply: Register is ibv_reg_mr of the
// segment with its remote access, there is no bind WR and no LOCAL_INV, and
// Release deregisters (ibv_dereg_mr is the invalidation). The transport
// must not offer remote invalidation (RemoteInvalidationOK is false).
// Registrations of small segments may also be made ahead (Config.Ready,
// TakeReady, Refill: ready.go), each over memory of its own and without
// remote access until TakeReady adds it in place (ibv_rereg_mr), so that
// no peer can reach one before a call advertises it.
//
// # Sizing
//
// Register waits while no window is free, holding the windows the same RPC
// already took. Size Config.Windows for the most segments that can be
// exposed at once (the credit limit times the segments one RPC may use),
// or bound the RPCs that register concurrently, so that waiting is always
// for a window another RPC will release. Buffers are handed out whole; a
// buffer put back while one of its registrations is still exposed returns
// to the pool only when that registration is released.
package frwr
