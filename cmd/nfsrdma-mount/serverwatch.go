package main

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// serverWatch is the NFS client's transport as the mount's log sees it:
// after "server not responding" it logs "server OK" at the next reply, as
// the kernel's client logs "nfs: server X OK", so that an operator reading
// the log knows the outage ended, and when.
//
// "Not responding" is the RPC client's (sunrpc.Client logs it when a call's
// retransmission timer expires: TCP, and soft RDMA mounts), which this
// transport sees as a call that ended with its deadline; or, where the
// transport retransmits by itself and the call goes on (hard RDMA mounts),
// this transport's own, for a call left unanswered for timeo. Either is
// logged once per outage here, and the first reply after it ends the
// outage: one "server OK".
type serverWatch struct {
	t      sunrpc.Transport
	log    *slog.Logger
	server string
	// announce, when positive, is how long a call goes unanswered before
	// this transport logs "server not responding" itself; 0: the RPC
	// client logs it.
	announce time.Duration
	down     atomic.Bool // a "not responding" was logged, no reply since
}

func (w *serverWatch) RoundTrip(ctx context.Context, req *sunrpc.Request) (*sunrpc.Reply, error) {
	var timer *time.Timer
	if w.announce > 0 {
		timer = time.AfterFunc(w.announce, w.notResponding)
	}
	rep, err := w.t.RoundTrip(ctx, req)
	if timer != nil {
		timer.Stop()
	}
	switch {
	case err == nil:
		if w.down.Load() && w.down.CompareAndSwap(true, false) {
			w.log.Warn("server OK", "server", w.server)
		}
	case w.announce == 0 && errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
		// The call's timer expired: the RPC client logs "server not
		// responding" and retransmits (or, soft, gives up).
		w.down.Store(true)
	}
	return rep, err
}

// notResponding logs a call left unanswered for announce, once an outage.
func (w *serverWatch) notResponding() {
	if w.down.CompareAndSwap(false, true) {
		w.log.Warn("server not responding, still trying", "server", w.server, "timeo", w.announce)
	}
}

func (w *serverWatch) Close() error { return w.t.Close() }
