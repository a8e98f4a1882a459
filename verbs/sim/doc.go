// Package sim is an in-process simulated reliable-connected RDMA fabric
// implementing the verbs interfaces, for fast deterministic rule and fault
// tests of the layers above. It follows the verbs specification (IBTA Vol. 1
// ch. 10–11) as seen through libibverbs wherever an RPC-over-RDMA transport
// depends on it, and it is stricter than real devices where that catches
// transport bugs.
//
// # Execution
//
// Posted work runs asynchronously, as on hardware: PostSend only queues;
// an engine goroutine (started on demand, gone when the fabric is idle)
// executes WRs in posting order across the whole fabric and generates their
// completions after PostSend has returned. With the Manual option nothing
// runs until the test calls Fabric.Step, Fabric.RunUntilIdle or
// Fabric.Advance, and time is virtual: the test chooses every interleaving.
// Each WR executes atomically: its effect at the responder (a delivered
// message, written or read memory, an invalidation) and its completion
// happen in one engine step.
//
// # Queue accounting
//
// A send WR occupies a send-queue slot from PostSend until the completion
// that retires it is polled from the CQ (as on mlx5). A signaled completion
// retires its WR and every earlier unsignaled WR of the same send queue;
// an unsignaled WR that succeeded keeps its slot until such a later
// completion is polled. A receive WR occupies its receive-queue slot until
// its completion is polled. Posting beyond the queue's depth fails with
// ENOMEM and returns the index of the first WR not posted. A CQ holds
// exactly the depth it was created with; one completion more overflows it:
// the CQ fails every later Poll and Wait with EOVERFLOW and every QP using
// it moves to the error state.
//
// # Completions and errors
//
// Successful unsignaled WRs produce no completion; every error produces
// one. Any error completion moves its QP to the error state; a QP in the
// error state completes every outstanding and later WR, send and receive,
// with WR_FLUSH_ERR, in posting order, signaled or not. A remote access
// error (unknown or stale rkey, out of bounds, missing access, window bound
// to another QP) fails the requester's WR with REM_ACCESS_ERR, leaves the
// target memory unchanged and moves both QPs to error. A SEND that finds
// no posted receive fails with RNR_RETRY_EXC_ERR and moves both QPs to
// error, unless the peer connected with RNRRetryCount 7 (retry forever):
// then the SEND and everything behind it waits until a receive is posted.
// As in the IB CM, a QP's RNR retry count is the one its peer put in its
// ConnParam. A QP may issue RDMA READs only if its peer offered
// ResponderResources > 0 (otherwise REM_INV_REQ_ERR).
//
// # Memory windows
//
// Type-2B windows: BIND_MW must name the window's current rkey (MW.RKey
// before the post), change the key byte and keep the index, bind a window
// that is not valid, stay within the MR, and the MR needs AccessMWBind (and
// AccessLocalWrite for a REMOTE_WRITE window); otherwise MW_BIND_ERR. A
// window is tied to the QP it was bound on, and its bounds are enforced
// (the spec; the rxe driver does not). LOCAL_INV and SEND_WITH_INV of an
// rkey that is not a currently valid window are error completions and are
// counted in Anomalies.DoubleInvalidations: on rxe they panic the kernel,
// so tests assert the count stays zero.
//
// # Faults
//
// Fault injection is on *QP (obtain it by type assertion from verbs.QP, or
// Fabric.QP by number): holding or delaying the send queue or its
// completions, failing the n-th WR, corrupting the next message, breaking
// the connection, and rogue accesses with arbitrary rkeys. Fabric.Anomalies
// counts what real hardware would punish later (double invalidations, QPs
// destroyed with windows bound, CQ overflows, send buffers changed before
// their completion was polled).
package sim
