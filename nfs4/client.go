package nfs4

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// ClientOptions configures a Client. The zero value is usable: AUTH_SYS
// with the process's ids, up to DefaultSlots slots, 1 MiB READs and WRITEs.
type ClientOptions struct {
	// Cred is the calls' credential (a context's sunrpc.WithCredential
	// overrides it per call, except for the client ID and session
	// operations, which always carry it: the server ties the client ID to
	// it). The zero value means nfs3.ProcessCred(); set AuthNone to send
	// AUTH_NONE instead.
	Cred     sunrpc.OpaqueAuth
	AuthNone bool

	XIDs   *sunrpc.XIDSource
	Retry  sunrpc.RetryPolicy
	Logger *slog.Logger

	// MaxSlots is the session's fore-channel slot count asked of the
	// server (ca_maxrequests), default DefaultSlots. Over a transport that
	// reports a credit limit (xprt's Credits: RPC-over-RDMA's flow control)
	// it is capped by that, so that the session never has more requests
	// outstanding than the transport admits.
	MaxSlots int
	// MaxIO is the largest READ or WRITE payload, which sizes
	// ca_maxrequestsize and ca_maxresponsesize; default 1 MiB.
	MaxIO int
	// Fore overrides the fore-channel attributes sent in CREATE_SESSION
	// when non-nil (tests; RDMAIRD).
	Fore *ChannelAttrs

	// DelayRetry is the first pause before retrying a compound answered
	// with NFS4ERR_DELAY or NFS4ERR_GRACE; it doubles up to MaxDelayRetry.
	// Retries go on until the call's context is done. Defaults 100 ms, 5 s.
	DelayRetry    time.Duration
	MaxDelayRetry time.Duration

	// MinorVersion is the highest NFSv4 minor version to use, 1 or 2
	// (default MaxMinorVersion); a server that answers
	// NFS4ERR_MINOR_VERS_MISMATCH to 2 is spoken to in 1, where the NFSv4.2
	// operations fail with ErrOpIllegal.
	MinorVersion uint32

	// OwnerID replaces the client owner id (client_owner4.co_ownerid),
	// which is otherwise unique per host, process and Client.
	OwnerID string
}

// Defaults of ClientOptions.
const (
	DefaultSlots = 64
	DefaultMaxIO = 1 << 20
)

// creditLimiter is implemented by transports with flow control of their own
// (xprt.Transport: the RPC-over-RDMA credit grant).
type creditLimiter interface{ Credits() int }

// inlineSizer is implemented by RPC-over-RDMA transports (xprt.Transport).
type inlineSizer interface{ InlineSizes() (send, recv int) }

// Client is an NFSv4.1 client on file handles (RFC 8881) with the NFSv4.2
// operations of RFC 7862, over any sunrpc.Transport. NewClient establishes
// a client ID and a session; every compound then starts with SEQUENCE on a
// slot of the session (SlotTable), a goroutine renews the lease with
// SEQUENCE alone when the client is idle, and Close destroys the session
// and the client ID. It is safe for concurrent use.
//
// Locking: mu guards sess, clientID, csSeq, lastRenew and closed;
// sess.mu guards its slot table and waiters. recoverMu serialises session
// recovery. Lock order: recoverMu, then mu, then a session's mu.
type Client struct {
	rpc   *sunrpc.Client
	opts  ClientOptions
	log   *slog.Logger
	owner ClientOwner
	lease time.Duration
	minor atomic.Uint32 // the minor version of every COMPOUND, settled by EXCHANGE_ID

	recoverMu sync.Mutex

	mu        sync.Mutex
	sess      *session
	clientID  uint64
	csSeq     uint32 // the next CREATE_SESSION's csa_sequence
	lastRenew time.Time
	closed    bool

	bg       context.Context // cancelled by Close: the renewer's calls
	bgCancel context.CancelFunc
	renewed  chan struct{} // closed when the renewer has returned

	ctr struct{ recoveries, renewals, delays atomic.Uint64 }
}

// session is one NFSv4.1 session: its id, the fore channel the server
// granted, and the slot table. mu guards table and waiters.
type session struct {
	id   SessionID
	fore ChannelAttrs

	mu      sync.Mutex
	table   *SlotTable
	waiters []chan struct{}
}

var clientSeq atomic.Uint64

// processNonce distinguishes this process from an earlier one with the same
// pid on the same host.
var processNonce = func() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x", b)
}()

// NewClient establishes a client ID (EXCHANGE_ID), a session
// (CREATE_SESSION, its fore channel sized by opts and the transport) and
// tells the server no state is to be reclaimed (RECLAIM_COMPLETE), then
// starts the lease renewer. It does not take ownership of t except through
// Close.
func NewClient(ctx context.Context, t sunrpc.Transport, opts *ClientOptions) (*Client, error) {
	c := &Client{}
	if opts != nil {
		c.opts = *opts
	}
	c.log = c.opts.Logger
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.opts.DelayRetry <= 0 {
		c.opts.DelayRetry = 100 * time.Millisecond
	}
	if c.opts.MaxDelayRetry <= 0 {
		c.opts.MaxDelayRetry = 5 * time.Second
	}
	if c.opts.MaxSlots <= 0 {
		c.opts.MaxSlots = DefaultSlots
	}
	if c.opts.MaxIO <= 0 {
		c.opts.MaxIO = DefaultMaxIO
	}
	switch c.opts.MinorVersion {
	case 0:
		c.opts.MinorVersion = MaxMinorVersion
	case 1, 2:
	default:
		return nil, fmt.Errorf("nfs4: minor version %d: this client speaks 1 and 2", c.opts.MinorVersion)
	}
	c.minor.Store(c.opts.MinorVersion)
	if c.opts.Cred.Flavor == sunrpc.AuthFlavorNone && len(c.opts.Cred.Body) == 0 && !c.opts.AuthNone {
		cred, err := nfs3.ProcessCred()
		if err != nil {
			return nil, err
		}
		c.opts.Cred = cred
	}
	rc, err := sunrpc.NewClient(t, sunrpc.ClientConfig{
		Prog: Program, Vers: Version, Cred: c.opts.Cred, XIDs: c.opts.XIDs,
		Retry: c.opts.Retry, Logger: c.log,
	})
	if err != nil {
		return nil, err
	}
	c.rpc = rc
	_, _ = rand.Read(c.owner.Verifier[:])
	id := c.opts.OwnerID
	if id == "" {
		host, _ := os.Hostname()
		id = "nfsrdma/" + host + "/" + strconv.Itoa(os.Getpid()) + "/" + processNonce + "/" + strconv.FormatUint(clientSeq.Add(1), 10)
	}
	if len(id) > maxOpaque {
		return nil, fmt.Errorf("nfs4: client owner id of %d bytes (at most %d)", len(id), maxOpaque)
	}
	c.owner.OwnerID = []byte(id)
	if err := c.establish(ctx); err != nil {
		return nil, err
	}
	if err := c.learnLease(ctx); err != nil {
		c.destroy(ctx)
		return nil, err
	}
	c.bg, c.bgCancel = context.WithCancel(context.Background())
	c.renewed = make(chan struct{})
	go c.renewLoop()
	return c, nil
}

// machine returns ctx with the client's own credential, which the client
// ID and session operations must carry (RFC 8881 §2.4.3, §18.35.3: the
// server binds the client ID to the principal that created it).
func (c *Client) machine(ctx context.Context) context.Context {
	return sunrpc.WithCredential(ctx, c.opts.Cred)
}

// callNoSeq sends a compound that does not start with SEQUENCE
// (EXCHANGE_ID, CREATE_SESSION, DESTROY_SESSION, DESTROY_CLIENTID, each
// allowed alone in a compound without SEQUENCE: RFC 8881 §18.35.3,
// §18.36.3, §18.37.3, §18.50.3), retrying DELAY.
func (c *Client) callNoSeq(ctx context.Context, build func(*compound)) error {
	delay := c.opts.DelayRetry
	for {
		cb := newCompound()
		cb.setMinor(c.minor.Load())
		build(cb)
		err := c.roundTrip(c.machine(ctx), cb)
		var oe *OpError
		if errors.As(err, &oe) && oe.Status == ErrDelay {
			if err := c.pause(ctx, &delay); err != nil {
				return err
			}
			continue
		}
		return err
	}
}

// roundTrip sends cb and decodes its results.
func (c *Client) roundTrip(ctx context.Context, cb *compound) error {
	r, err := c.rpc.Call(ctx, procCompound, cb.args())
	if err != nil {
		return err
	}
	err = decodeCompound(r.Decoder, cb.ops, cb.results)
	r.Release()
	var oe *OpError
	if err != nil && !errors.As(err, &oe) {
		return &ReplyError{Ops: cb.ops, Err: err}
	}
	return err
}

// pause waits *delay (doubling it up to MaxDelayRetry) or until ctx is done.
func (c *Client) pause(ctx context.Context, delay *time.Duration) error {
	c.ctr.delays.Add(1)
	t := time.NewTimer(*delay)
	defer t.Stop()
	*delay = min(2**delay, c.opts.MaxDelayRetry)
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// establish creates the client ID and the first session.
func (c *Client) establish(ctx context.Context) error {
	if err := c.exchangeID(ctx); err != nil {
		return err
	}
	if err := c.createSession(ctx); err != nil {
		return err
	}
	return c.call(ctx, func(cb *compound) { cb.reclaimComplete() })
}

// exchangeID obtains the client ID (RFC 8881 §18.35), settling the minor
// version: the highest allowed that the server accepts (RFC 8881 §16.2.3:
// a server refuses a minor version it lacks with MINOR_VERS_MISMATCH
// before any operation).
func (c *Client) exchangeID(ctx context.Context) error {
	var r ExchangeIDResult
	var err error
	for {
		err = c.callNoSeq(ctx, func(cb *compound) { cb.exchangeID(&c.owner, 0, &r) })
		var oe *OpError
		if m := c.minor.Load(); m > 1 && errors.As(err, &oe) && oe.Status == ErrMinorVersMismatch {
			c.minor.Store(m - 1)
			continue
		}
		break
	}
	if err != nil {
		return fmt.Errorf("nfs4: EXCHANGE_ID: %w", err)
	}
	c.mu.Lock()
	c.clientID, c.csSeq = r.ClientID, r.SequenceID
	c.mu.Unlock()
	c.log.Debug("client ID", "clientid", fmt.Sprintf("%#x", r.ClientID), "server", r.ImplName, "flags", fmt.Sprintf("%#x", r.Flags))
	return nil
}

// foreChannel returns the fore-channel attributes asked for: requests and
// responses large enough for a MaxIO READ or WRITE and its compound; cached
// responses (non-idempotent operations' replies, never data) of the
// transport's inline receive size over RDMA, 4 KiB otherwise; slots up to
// MaxSlots and the transport's credit limit.
func (c *Client) foreChannel() ChannelAttrs {
	if c.opts.Fore != nil {
		return *c.opts.Fore
	}
	const overhead = 4096 // the compound around the payload: SEQUENCE, PUTFH, GETATTR, the RPC header
	slots := c.opts.MaxSlots
	cached := uint32(4096)
	t := c.rpc.Transport()
	if cl, ok := t.(creditLimiter); ok {
		if n := cl.Credits(); n > 0 {
			slots = min(slots, n)
		}
	}
	if is, ok := t.(inlineSizer); ok {
		if _, recv := is.InlineSizes(); recv > 0 {
			cached = uint32(recv)
		}
	}
	return ChannelAttrs{
		MaxRequestSize:        uint32(c.opts.MaxIO + overhead),
		MaxResponseSize:       uint32(c.opts.MaxIO + overhead),
		MaxResponseSizeCached: cached,
		MaxOperations:         maxOperations,
		MaxRequests:           uint32(slots),
	}
}

// maxOperations is the ca_maxoperations asked for: knfsd's limit
// (NFSD_MAX_OPS_PER_COMPOUND) in Linux 6.1; longer paths are looked up in
// several compounds.
const maxOperations = 50

// backChannel is the back channel asked for, which this client never binds
// (csa_flags has no CONN_BACK_CHAN); servers still check the values.
var backChannel = ChannelAttrs{MaxRequestSize: 4096, MaxResponseSize: 4096, MaxOperations: 2, MaxRequests: 1}

// createSession creates a session for the client ID (RFC 8881 §18.36) and
// makes it current.
func (c *Client) createSession(ctx context.Context) error {
	c.mu.Lock()
	id, seq := c.clientID, c.csSeq
	c.mu.Unlock()
	fore := c.foreChannel()
	back := backChannel
	var r CreateSessionResult
	err := c.callNoSeq(ctx, func(cb *compound) { cb.createSession(id, seq, &fore, &back, &r) })
	if err != nil {
		return fmt.Errorf("nfs4: CREATE_SESSION: %w", err)
	}
	if r.Fore.MaxRequests < 1 {
		return fmt.Errorf("nfs4: CREATE_SESSION granted %d slots", r.Fore.MaxRequests)
	}
	n := int(min(r.Fore.MaxRequests, fore.MaxRequests, 1<<16))
	s := &session{id: r.SessionID, fore: r.Fore, table: NewSlotTable(n)}
	c.mu.Lock()
	if c.closed {
		// Close ran while this session was being made (recovery): it must
		// not outlive the client.
		c.mu.Unlock()
		_ = c.callNoSeq(ctx, func(cb *compound) { cb.destroySession(s.id) })
		return ErrClientClosed
	}
	c.sess = s
	c.csSeq = seq + 1
	c.lastRenew = time.Now()
	c.mu.Unlock()
	c.log.Debug("session", "slots", n, "maxreq", r.Fore.MaxRequestSize, "maxresp", r.Fore.MaxResponseSize, "cached", r.Fore.MaxResponseSizeCached)
	return nil
}

// learnLease reads the server's lease_time (RFC 8881 §5.8.1.11).
func (c *Client) learnLease(ctx context.Context) error {
	var a Attr
	err := c.call(ctx, func(cb *compound) {
		cb.putRootFH()
		cb.getAttr(NewBitmap(AttrLeaseTime), &a)
	})
	if err != nil {
		return fmt.Errorf("nfs4: lease_time: %w", err)
	}
	if !a.Has(AttrLeaseTime) || a.LeaseTime == 0 {
		return errors.New("nfs4: the server did not return its lease_time")
	}
	c.lease = time.Duration(a.LeaseTime) * time.Second
	return nil
}

// MinorVersion returns the NFSv4 minor version in use (1 or 2).
func (c *Client) MinorVersion() uint32 { return c.minor.Load() }

// Lease returns the server's lease time.
func (c *Client) Lease() time.Duration { return c.lease }

// Session returns the current session's id and the fore channel the server
// granted; zero values after Close.
func (c *Client) Session() (SessionID, ChannelAttrs) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess == nil {
		return SessionID{}, ChannelAttrs{}
	}
	return c.sess.id, c.sess.fore
}

// ClientID returns the current client ID.
func (c *Client) ClientID() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clientID
}

// ErrClientClosed is returned by calls on a closed Client.
var ErrClientClosed = errors.New("nfs4: client closed")

// acquire holds a slot of the current session, waiting while all are held.
func (c *Client) acquire(ctx context.Context) (*session, Slot, error) {
	c.mu.Lock()
	s, closed := c.sess, c.closed
	c.mu.Unlock()
	if closed || s == nil {
		return nil, Slot{}, ErrClientClosed
	}
	for {
		s.mu.Lock()
		if sl, ok := s.table.Acquire(); ok {
			s.mu.Unlock()
			return s, sl, nil
		}
		w := make(chan struct{})
		s.waiters = append(s.waiters, w)
		s.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			s.mu.Lock()
			for i, x := range s.waiters {
				if x == w {
					s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
					break
				}
			}
			s.mu.Unlock()
			select {
			case <-w: // woken meanwhile: pass the wake-up on
				s.wakeOne()
			default:
			}
			return nil, Slot{}, ctx.Err()
		}
	}
}

// release frees sl with outcome o and wakes a waiter.
func (s *session) release(sl Slot, o Outcome) {
	s.mu.Lock()
	s.table.Release(sl, o)
	s.mu.Unlock()
	s.wakeOne()
}

func (s *session) wakeOne() {
	s.mu.Lock()
	if len(s.waiters) > 0 {
		close(s.waiters[0])
		s.waiters = s.waiters[1:]
	}
	s.mu.Unlock()
}

// isRejected reports an RPC error that proves the server did not execute
// the call (it never reached NFS: RPC-level rejection).
func isRejected(err error) bool {
	var ae *sunrpc.AcceptError
	var au *sunrpc.AuthError
	var rm *sunrpc.RPCMismatchError
	return errors.As(err, &ae) || errors.As(err, &au) || errors.As(err, &rm)
}

// call sends SEQUENCE followed by the operations build adds, on a slot of
// the current session, and retries as the session protocol asks:
// SEQ_MISORDERED after an unknown outcome on the slot (SlotTable.Misordered),
// DELAY and GRACE after a pause, BADSESSION and DEADSESSION after a new
// session (and STALE_CLIENTID after a new client ID). build runs once per
// attempt and must reset what its decoders fill.
//
// A transport that loses its connection retransmits the same request (same
// XID, same slot and sequence id) on the next one, so the server's reply
// cache answers a request it already executed (RFC 8881 §2.10.6.2).
func (c *Client) call(ctx context.Context, build func(*compound)) error {
	delay := c.opts.DelayRetry
	for {
		s, sl, err := c.acquire(ctx)
		if err != nil {
			return err
		}
		err = c.sendOnSlot(ctx, s, sl, build)
		var oe *OpError
		if !errors.As(err, &oe) {
			return err
		}
		switch {
		case oe.Index <= 0 && (oe.Status == ErrBadSession || oe.Status == ErrDeadSession):
			if rerr := c.recover(ctx, s, oe.Status); rerr != nil {
				return errors.Join(err, rerr)
			}
		case oe.Status == ErrDelay || oe.Status == ErrGrace:
			c.log.DebugContext(ctx, "server asks to retry later", "op", oe.Op, "status", oe.Status.Name(), "delay", delay)
			if perr := c.pause(ctx, &delay); perr != nil {
				return perr
			}
		default:
			return err
		}
	}
}

// sendOnSlot sends one compound on slot sl of s and releases the slot with
// the outcome.
func (c *Client) sendOnSlot(ctx context.Context, s *session, sl Slot, build func(*compound)) error {
	if err := ctx.Err(); err != nil {
		s.release(sl, NotSent)
		return err
	}
	for {
		s.mu.Lock()
		highest := s.table.HighestHeld()
		s.mu.Unlock()
		cb := newCompound()
		cb.setMinor(c.minor.Load())
		var sr SequenceResult
		cb.sequence(&SequenceArgs{SessionID: s.id, SequenceID: sl.Seq, SlotID: sl.ID, HighestSlot: highest}, &sr)
		build(cb)
		err := c.roundTrip(ctx, cb)
		var oe *OpError
		switch {
		case err == nil || errors.As(err, &oe) && oe.Index > 0:
			s.mu.Lock()
			s.table.SetServerLimits(sr.HighestSlot, sr.TargetHighestSlot)
			s.mu.Unlock()
			s.release(sl, Replied)
			c.renewedAt(sr.StatusFlags)
			return err
		case oe != nil && oe.Status == ErrSeqMisordered:
			s.mu.Lock()
			again := s.table.Misordered(&sl)
			s.mu.Unlock()
			if again {
				c.log.DebugContext(ctx, "slot stepped back after an unknown outcome", "slot", sl.ID, "seq", sl.Seq)
				continue
			}
			s.release(sl, NotSent)
			return err
		case oe != nil, isRejected(err):
			s.release(sl, NotSent)
			return err
		default:
			// No reply, or one that could not be decoded: the server may
			// or may not have executed the request.
			s.release(sl, Unknown)
			return err
		}
	}
}

// renewedAt records a SEQUENCE the server processed: the lease is renewed
// (RFC 8881 §8.3), and status flags that say state was lost are logged.
func (c *Client) renewedAt(flags uint32) {
	c.mu.Lock()
	c.lastRenew = time.Now()
	c.mu.Unlock()
	if flags&(seqStatusStateLost|SeqStatusRestartReclaimNeeded) != 0 {
		c.log.Warn("server reports lost state", "sr_status_flags", fmt.Sprintf("%#x", flags))
	}
}

// recover replaces session old after BADSESSION or DEADSESSION (RFC 8881
// §2.10.13): a new session for the client ID, or, if the server no longer
// knows the client ID (STALE_CLIENTID, e.g. after a restart), a new client
// ID and session. State (opens, locks) held under a lost client ID is gone:
// its stateids fail afterwards and the files must be opened again.
func (c *Client) recover(ctx context.Context, old *session, why Status) error {
	c.recoverMu.Lock()
	defer c.recoverMu.Unlock()
	c.mu.Lock()
	cur, closed := c.sess, c.closed
	c.mu.Unlock()
	if closed {
		return ErrClientClosed
	}
	if cur != old {
		return nil // replaced meanwhile
	}
	c.ctr.recoveries.Add(1)
	c.log.Warn("session lost, creating a new one", "status", why.Name())
	err := c.createSession(ctx)
	var oe *OpError
	if errors.As(err, &oe) && (oe.Status == ErrStaleClientID || oe.Status == ErrExpired) {
		c.log.Warn("client ID lost, establishing a new one: open and lock state is gone", "status", oe.Status.Name())
		return c.establish(ctx)
	}
	return err
}

// renewLoop renews the lease with a SEQUENCE-only compound whenever the
// client has been idle for half the lease (RFC 8881 §8.3: any SEQUENCE
// renews it), until Close.
func (c *Client) renewLoop() {
	defer close(c.renewed)
	half := c.lease / 2
	t := time.NewTimer(half)
	defer t.Stop()
	for {
		select {
		case <-c.bg.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		idle := time.Since(c.lastRenew)
		c.mu.Unlock()
		if idle >= half {
			ctx, cancel := context.WithTimeout(c.bg, half)
			err := c.call(c.machine(ctx), func(*compound) {})
			cancel()
			if err != nil && c.bg.Err() == nil {
				c.log.Warn("lease renewal failed", "err", err)
			} else {
				c.ctr.renewals.Add(1)
			}
			idle = 0
		}
		t.Reset(max(half-idle, time.Second))
	}
}

// Renewals returns how many SEQUENCE-only lease renewals the client sent.
func (c *Client) Renewals() uint64 { return c.ctr.renewals.Load() }

// Recoveries returns how many times a lost session was replaced.
func (c *Client) Recoveries() uint64 { return c.ctr.recoveries.Load() }

// Close stops the lease renewer, destroys the session and the client ID
// (DESTROY_SESSION, DESTROY_CLIENTID; RFC 8881 §18.37, §18.50) and closes
// the transport. A server that does not answer is waited for at most one
// lease time: its state for the client expires then anyway. DESTROY_CLIENTID
// fails with NFS4ERR_CLIENTID_BUSY when files are still open; that error is
// returned after everything is released. Close is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.bgCancel()
	<-c.renewed
	ctx, cancel := context.WithTimeout(context.Background(), max(c.lease, time.Second))
	defer cancel()
	err := c.destroy(ctx)
	return errors.Join(err, c.rpc.Close())
}

// destroy sends DESTROY_SESSION and DESTROY_CLIENTID.
func (c *Client) destroy(ctx context.Context) error {
	c.mu.Lock()
	s, id := c.sess, c.clientID
	c.sess = nil
	c.mu.Unlock()
	var err error
	if s != nil {
		if e := c.callNoSeq(ctx, func(cb *compound) { cb.destroySession(s.id) }); e != nil {
			err = fmt.Errorf("nfs4: DESTROY_SESSION: %w", e)
		}
	}
	if e := c.callNoSeq(ctx, func(cb *compound) { cb.destroyClientID(id) }); e != nil {
		err = errors.Join(err, fmt.Errorf("nfs4: DESTROY_CLIENTID: %w", e))
	}
	return err
}

func randRead(b []byte) (int, error) { return rand.Read(b) }
