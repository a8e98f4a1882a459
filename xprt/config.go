package xprt

import (
	"log/slog"
	"net/netip"
	"time"

	"github.com/nfsrdma/nfsrdma/frwr"
	"github.com/nfsrdma/nfsrdma/verbs"
)

// Config configures a Transport. The zero value of each field has the
// documented default.
type Config struct {
	// Fabric is the verbs implementation: verbs/ibv on real devices,
	// verbs/sim in tests. Required.
	Fabric verbs.Fabric
	// Addr is the server's RPC-over-RDMA address (NFS: port 20049).
	Addr netip.AddrPort
	// Inline is the inline size offered in both directions in the RFC 8797
	// private data (default 4096). The connection uses the smaller of ours
	// and the server's; 1024 when the server sends none.
	Inline int
	// Slots is the most calls outstanding at once, the cap on the server's
	// credit grant (default 128).
	Slots int
	// MaxIO is the largest bulk item (READ/WRITE payload) in bytes; it sizes
	// the registered I/O buffers (default 1 MiB).
	MaxIO int
	// MaxSegment is the most bytes one chunk segment (one window) covers;
	// longer chunks are split (default: a whole I/O buffer).
	MaxSegment int
	// IOBuffers is the number of registered I/O buffers (default 32).
	IOBuffers int
	// SendQueue is the send-queue depth in WRs (default 4 per slot). A small
	// queue exercises the congestion gate.
	SendQueue int
	// Registration chooses memory windows or per-I/O registration
	// (default: windows when the device has type-2 windows that are safe
	// against a hostile server; per-I/O registration, each segment its own
	// MR, on a device whose windows reach their whole MR or where a
	// stale Send With Invalidate crashes the kernel, as on rxe). Forcing
	// windows (frwr.ModeWindows) on such a device is refused: Dial fails
	// with frwr.ErrUnsafeWindows, unless UnsafeWindows is set.
	Registration frwr.Mode
	// UnsafeWindows allows Registration frwr.ModeWindows on a device
	// whose windows a hostile server can abuse: on rxe a server can then
	// reach bytes of the I/O buffer outside the segments it was given,
	// and crash the client's kernel with a Send With Invalidate. For tests
	// of the window code against a server you control; never in
	// production. Windows are then allocated per segment and deallocated
	// as soon as they are invalid (frwr.Config.RetireWindows), so none
	// sits unbound under a key a server could guess.
	UnsafeWindows bool
	// RegisterAhead is, with per-I/O registration, how many registrations
	// of each recently used small segment size (up to 64 KiB, per
	// direction) are made ahead, over memory of their own, so that a small
	// READ or WRITE does not wait for ibv_reg_mr: a caller waiting for its
	// reply makes the next one (frwr.Registry.TakeReady, Refill). The
	// deregistration after the reply stays on the call's path (it is the
	// invalidation). They are made without remote access, which is added
	// in place (ibv_rereg_mr) when a call takes one, so that no server can
	// reach one before it is advertised; on a device that cannot do that
	// (rxe on Linux 6.1) none are made and segments are registered at use
	// (Counters.RegisterAheadRefused). Default 8; negative makes none.
	RegisterAhead int
	// Timeout is how long a sent call may wait for its reply before the
	// connection is reset and the call retransmitted on a new one
	// (default 60 s).
	Timeout time.Duration
	// ConnectTimeout bounds one connection attempt (default 10 s).
	ConnectTimeout time.Duration
	// MaxReconnectDelay caps the backoff between reconnect attempts
	// (default 5 s).
	MaxReconnectDelay time.Duration
	// BusyPoll, when positive, makes the goroutine reaping replies (a
	// caller waiting for its reply, or the reply loop) busy-poll the receive
	// CQ for up to this long, while calls await replies, before it arms
	// the CQ and sleeps until the device signals a completion. It trades
	// a CPU for latency: a reply that comes within it skips the
	// completion-event wake-up (and its system calls). Zero (the default)
	// always sleeps, as the kernel's client does. Devices whose CQs cannot
	// spin (verbs.SpinPoller) ignore it. It pays where a core is idle: in
	// the test bed (two emulated CPUs shared with the server) a 3 ms spin
	// caught 96% of replies but did not lower a 4 KiB READ's round trip,
	// since the spinning CPU is one the server needed.
	BusyPoll time.Duration
	// Logger receives the transport's events; nil discards them.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Inline == 0 {
		c.Inline = 4096
	}
	if c.Slots == 0 {
		c.Slots = 128
	}
	if c.RegisterAhead == 0 {
		c.RegisterAhead = 8
	}
	if c.MaxIO == 0 {
		c.MaxIO = 1 << 20
	}
	if c.MaxSegment == 0 || c.MaxSegment > c.MaxIO+4096 {
		c.MaxSegment = c.MaxIO + 4096
	}
	if c.IOBuffers == 0 {
		c.IOBuffers = 32
	}
	if c.SendQueue == 0 {
		c.SendQueue = 4 * c.Slots
	}
	if c.Timeout == 0 {
		c.Timeout = 60 * time.Second
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 10 * time.Second
	}
	if c.MaxReconnectDelay == 0 {
		c.MaxReconnectDelay = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}
