package nlm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// Request is a lock as fcntl(2) and FUSE give it.
type Request struct {
	Start, End uint64 // inclusive; End ToEOF: to the end of the file
	Exclusive  bool   // a write lock (F_WRLCK), else a read lock (F_RDLCK)
	Pid        uint32 // the process asking (its thread group id), for F_GETLK
	// Flock marks a flock(2) lock: its owner is an open file, not a
	// process, and Owners does not list it.
	Flock bool
}

// Conflict is a lock that stands in the way of a Request (F_GETLK).
type Conflict struct {
	Start, End uint64
	Exclusive  bool
	// Pid is the holder's process when it is a local one (a lock taken
	// through this Locker), else 0: the holder is on another client.
	Pid uint32
}

// LockerConfig tunes a Locker.
type LockerConfig struct {
	// RetryInterval bounds the pause between the LOCKs of a blocked
	// F_SETLKW and between the tries of a call the server answers with
	// NLM4_DENIED_GRACE_PERIOD; 0 means 1 s.
	RetryInterval time.Duration
	// MonitorInterval is how often, while locks are held, the server is
	// checked for a restart (its lockd's connection and port, its statd's
	// NSM state); 0 means 2 s, negative disables the checks.
	MonitorInterval time.Duration
	// LocalStatd is the port mapper address ("host:port") of this host's
	// statd, whose NSM state the locks carry (lockargs.state); "" means
	// 127.0.0.1:111. When it does not answer, the state is 0.
	LocalStatd string
	// RpcbindSocket is the path of this host's rpcbind's local socket,
	// through which the callback of reboot notifications is registered
	// (see notify.go); "" means DefaultRpcbindSocket. When it cannot be
	// reached, the port mapper at LocalStatd is asked.
	RpcbindSocket string
	// NoNotify leaves reboot notifications out: the server is only
	// checked every MonitorInterval.
	NoNotify bool
	// Logger receives the Locker's events; nil discards them.
	Logger *slog.Logger
}

// Locker keeps the locks the processes of this host hold on the server
// through one mount: it takes them with NLM, remembers them so that it can
// reclaim them when the server restarts, and gives them back when their
// owner closes the file.
//
// An owner is a number the caller picks (FUSE's lock owner: a process's
// file table for POSIX locks, an open file for flock); each gets its own
// svid on the server.
type Locker struct {
	c   *Client
	cfg LockerConfig
	log *slog.Logger

	mu       sync.Mutex
	files    map[string]*fileLocks
	owners   map[uint64]*owner
	svids    map[int32]*owner
	state    int32
	stateOK  bool
	grace    bool // a call met NLM4_DENIED_GRACE_PERIOD: reclaim
	reclaims int  // reclaim rounds done
	lost     int  // locks lost (not reclaimed)
	onLost   func(fh []byte, owner uint64)

	srvState   int32
	srvStateOK bool
	seenEpoch  uint64

	// Reboot notifications (notify.go): notify is notifyNone, On or Off;
	// nsm, the callback while monitoring (the monitor's own); notified
	// carries the server's new NSM state from the callback; monKick wakes
	// the monitor to start or stop monitoring.
	notify   atomic.Int32
	nsm      *notifier
	notified chan int32
	monKick  chan struct{}

	kick   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type owner struct {
	id    uint64
	svid  int32
	oh    []byte
	pid   uint32
	flock bool
	cred  *sunrpc.OpaqueAuth // the credential of its last LOCK, for reclaims and CANCELs
	files int                // fileLocks that list it
	op    sync.Mutex         // one call of the owner at a time, so the record follows the server's order
}

// segment is a range an owner holds.
type segment struct {
	start, end uint64
	excl       bool
}

type fileLocks struct {
	fh   []byte
	held map[uint64][]segment // by owner; an entry (even empty) once the owner asked for a lock
}

// NewLocker returns a Locker over c; Close it to give every lock back.
func NewLocker(c *Client, cfg LockerConfig) *Locker {
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = time.Second
	}
	if cfg.MonitorInterval == 0 {
		cfg.MonitorInterval = 2 * time.Second
	}
	if cfg.LocalStatd == "" {
		cfg.LocalStatd = "127.0.0.1:111"
	}
	if cfg.RpcbindSocket == "" {
		cfg.RpcbindSocket = DefaultRpcbindSocket
	}
	l := &Locker{c: c, cfg: cfg, log: cfg.Logger,
		files: map[string]*fileLocks{}, owners: map[uint64]*owner{}, svids: map[int32]*owner{},
		kick: make(chan struct{}, 1), notified: make(chan int32, 1), monKick: make(chan struct{}, 1)}
	if cfg.NoNotify {
		l.notify.Store(notifyOff)
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	if cfg.MonitorInterval > 0 {
		l.wg.Add(1)
		go l.monitor()
	}
	return l
}

// Client returns the NLM client.
func (l *Locker) Client() *Client { return l.c }

// ownerLocked returns (making it) the owner id's record; l.mu held.
func (l *Locker) ownerLocked(id uint64, pid uint32, flock bool) *owner {
	o := l.owners[id]
	if o == nil {
		o = &owner{id: id}
		// svids live in the server's table of this host (caller name and
		// address), which the kernel's own NLM client shares and numbers
		// from 1, and so may another Locker: a random one above 2^30.
		for {
			o.svid = int32(1<<30 | rand.Uint32()&(1<<30-1))
			if l.svids[o.svid] == nil {
				break
			}
		}
		o.oh = []byte(strconv.FormatInt(int64(o.svid), 10) + "@" + l.c.CallerName())
		l.owners[id] = o
		l.svids[o.svid] = o
	}
	if pid != 0 {
		o.pid = pid
	}
	if flock {
		o.flock = true
	}
	return o
}

// fileLocked returns (making it) fh's record; l.mu held.
func (l *Locker) fileLocked(fh []byte) *fileLocks {
	f := l.files[string(fh)]
	if f == nil {
		f = &fileLocks{fh: slices.Clone(fh), held: map[uint64][]segment{}}
		l.files[string(fh)] = f
	}
	return f
}

// touch records that o asked for a lock on fh and returns o's record.
func (l *Locker) touch(ctx context.Context, fh []byte, id uint64, pid uint32, flock bool) *owner {
	l.mu.Lock()
	defer l.mu.Unlock()
	o := l.ownerLocked(id, pid, flock)
	if cred, ok := sunrpc.CredentialFrom(ctx); ok {
		o.cred = &cred
	}
	f := l.fileLocked(fh)
	if _, ok := f.held[id]; !ok {
		f.held[id] = nil
		o.files++
	}
	return o
}

// forget drops o's record on fh (and o's, fh's when they hold nothing more).
func (l *Locker) forgetLocked(f *fileLocks, id uint64) {
	if _, ok := f.held[id]; !ok {
		return
	}
	delete(f.held, id)
	if len(f.held) == 0 {
		delete(l.files, string(f.fh))
	}
	if o := l.owners[id]; o != nil {
		o.files--
		if o.files <= 0 {
			delete(l.owners, id)
			delete(l.svids, o.svid)
		}
	}
}

// record applies a granted lock (or an unlock, excl ignored) to o's
// segments on fh.
func (l *Locker) record(fh []byte, id uint64, start, end uint64, excl, unlock bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.files[string(fh)]
	if f == nil {
		return
	}
	segs, ok := f.held[id]
	if !ok {
		return
	}
	f.held[id] = applySegment(segs, start, end, excl, unlock)
}

// applySegment returns segs with [start, end] set to one lock of the given
// type (or unlocked), as POSIX locks of one owner split and replace.
func applySegment(segs []segment, start, end uint64, excl, unlock bool) []segment {
	var out []segment
	for _, s := range segs {
		if s.end < start || s.start > end {
			out = append(out, s)
			continue
		}
		if s.start < start {
			out = append(out, segment{s.start, start - 1, s.excl})
		}
		if s.end > end {
			out = append(out, segment{end + 1, s.end, s.excl})
		}
	}
	if !unlock {
		out = append(out, segment{start, end, excl})
	}
	slices.SortFunc(out, func(a, b segment) int {
		switch {
		case a.start < b.start:
			return -1
		case a.start > b.start:
			return 1
		}
		return 0
	})
	return out
}

func (l *Locker) lock(o *owner, fh []byte, start, end uint64) Lock {
	return Lock{CallerName: l.c.CallerName(), FH: fh, OH: o.oh, Svid: o.svid, Start: start, End: end}
}

// nsmState returns this host's NSM state, asked once of the local statd.
func (l *Locker) nsmState(ctx context.Context) int32 {
	l.mu.Lock()
	if l.stateOK {
		defer l.mu.Unlock()
		return l.state
	}
	l.mu.Unlock()
	var st int32
	local, err := NewClient(Config{Server: "127.0.0.1", Portmapper: l.cfg.LocalStatd, CallerName: l.c.CallerName(),
		TCP: l.c.cfg.TCP, Logger: l.log})
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err = local.ServerState(cctx)
		cancel()
		local.Close()
	}
	if err != nil {
		l.log.Debug("this host's NSM state unknown (no local statd): 0", "err", err)
		st = 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.state, l.stateOK = st, true
	return st
}

// ownerCtx returns the Locker's context with the credential of o's last
// LOCK: the server checks the caller's access to the file.
func (l *Locker) ownerCtx(o *owner) context.Context {
	l.mu.Lock()
	cred := o.cred
	l.mu.Unlock()
	if cred == nil {
		return l.ctx
	}
	return sunrpc.WithCredential(l.ctx, *cred)
}

// sawGrace notes that the server is in its grace period: the monitor
// reclaims the held locks.
func (l *Locker) sawGrace() {
	l.mu.Lock()
	l.grace = true
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Test returns the lock that conflicts with r for owner id on fh (F_GETLK),
// or nil.
func (l *Locker) Test(ctx context.Context, fh []byte, id uint64, r Request) (*Conflict, error) {
	l.mu.Lock()
	o := l.ownerLocked(id, r.Pid, r.Flock)
	l.mu.Unlock()
	a := TestArgs{Exclusive: r.Exclusive, Lock: l.lock(o, fh, r.Start, r.End)}
	for {
		res, err := l.c.Test(ctx, &a)
		if err != nil {
			return nil, err
		}
		switch res.Stat {
		case Granted:
			return nil, nil
		case Denied:
			h := res.Holder
			c := &Conflict{Start: h.Start, End: h.End, Exclusive: h.Exclusive}
			l.mu.Lock()
			if ho := l.svids[h.Svid]; ho != nil {
				c.Pid = ho.pid
			}
			l.mu.Unlock()
			return c, nil
		case DeniedGracePeriod:
			l.sawGrace()
			if err := pause(ctx, l.cfg.RetryInterval); err != nil {
				return nil, err
			}
		default:
			return nil, res.Stat
		}
	}
}

// Lock takes r for owner id on fh. Without wait, a conflicting lock is
// ErrDenied (Stat Denied: EAGAIN). With wait (F_SETLKW) it asks again until
// the lock is granted or ctx ends; then a CANCEL withdraws the request
// and ctx's error is returned. A server in its grace period is asked again
// until the grace ends, as the Linux client does.
func (l *Locker) Lock(ctx context.Context, fh []byte, id uint64, r Request, wait bool) error {
	o := l.touch(ctx, fh, id, r.Pid, r.Flock)
	st := l.nsmState(ctx)
	a := LockArgs{Block: wait, Exclusive: r.Exclusive, Lock: l.lock(o, fh, r.Start, r.End), State: st}
	retry := min(100*time.Millisecond, l.cfg.RetryInterval)
	for {
		o.op.Lock()
		res, err := l.c.Lock(ctx, &a)
		if err == nil && res.Stat == Granted {
			l.record(fh, id, r.Start, r.End, r.Exclusive, false)
			if l.notify.Load() == notifyNone {
				l.kickNotify() // the first lock: statd is to monitor the server
			}
		}
		o.op.Unlock()
		if err != nil {
			if wait && ctx.Err() != nil {
				l.cancelBlocked(o, &a)
			}
			return err
		}
		switch res.Stat {
		case Granted:
			return nil
		case Blocked, Denied:
			if !wait {
				return Denied
			}
		case DeniedGracePeriod:
			l.sawGrace()
		default:
			return res.Stat
		}
		if err := pause(ctx, retry); err != nil {
			if wait {
				l.cancelBlocked(o, &a)
			}
			return err
		}
		retry = min(2*retry, l.cfg.RetryInterval)
	}
}

// cancelBlocked withdraws a blocked LOCK whose caller gave up.
func (l *Locker) cancelBlocked(o *owner, a *LockArgs) {
	ctx, cancel := context.WithTimeout(l.ownerCtx(o), 5*time.Second)
	defer cancel()
	res, err := l.c.Cancel(ctx, &CancelArgs{Block: true, Exclusive: a.Exclusive, Lock: a.Lock})
	if err != nil {
		l.log.Warn("CANCEL of a blocked lock failed", "svid", a.Lock.Svid, "err", err)
		return
	}
	l.log.Debug("blocked lock cancelled", "svid", a.Lock.Svid, "stat", res.Stat)
}

// heldOwner returns owner id if it has asked for locks on fh, else nil.
func (l *Locker) heldOwner(fh []byte, id uint64) *owner {
	l.mu.Lock()
	defer l.mu.Unlock()
	if f := l.files[string(fh)]; f != nil {
		if _, ok := f.held[id]; ok {
			return l.owners[id]
		}
	}
	return nil
}

// Unlock releases [start, end] of owner id's locks on fh (F_UNLCK).
func (l *Locker) Unlock(ctx context.Context, fh []byte, id uint64, start, end uint64) error {
	o := l.heldOwner(fh, id)
	if o == nil {
		return nil // nothing asked for here: nothing to give back
	}
	return l.unlock(ctx, o, fh, start, end)
}

func (l *Locker) unlock(ctx context.Context, o *owner, fh []byte, start, end uint64) error {
	a := UnlockArgs{Lock: l.lock(o, fh, start, end)}
	for {
		o.op.Lock()
		res, err := l.c.Unlock(ctx, &a)
		if err == nil && res.Stat == Granted {
			l.record(fh, o.id, start, end, false, true)
		}
		o.op.Unlock()
		if err != nil {
			return err
		}
		switch res.Stat {
		case Granted:
			return nil
		case DeniedGracePeriod:
			l.sawGrace()
			if err := pause(ctx, l.cfg.RetryInterval); err != nil {
				return err
			}
		default:
			return res.Stat
		}
	}
}

// Owners returns the owners of POSIX locks that asked for locks on fh
// whose process is pid (FUSE's flush names the closing process, not the
// lock owner).
func (l *Locker) Owners(fh []byte, pid uint32) []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.files[string(fh)]
	if f == nil {
		return nil
	}
	var ids []uint64
	for id := range f.held {
		if o := l.owners[id]; o != nil && o.pid == pid && !o.flock {
			ids = append(ids, id)
		}
	}
	return ids
}

// AskedBy returns the owners that asked for locks on fh (and have not
// been released by ReleaseOwner since).
func (l *Locker) AskedBy(fh []byte) []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.files[string(fh)]
	if f == nil {
		return nil
	}
	ids := make([]uint64, 0, len(f.held))
	for id := range f.held {
		ids = append(ids, id)
	}
	return ids
}

// Asked reports whether any owner asked for a lock on fh.
func (l *Locker) Asked(fh []byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.files[string(fh)] != nil
}

// ReleaseOwner gives back every lock of owner id on fh (a close): the
// whole file is unlocked, so that a lock granted after its caller gave up
// goes too.
func (l *Locker) ReleaseOwner(ctx context.Context, fh []byte, id uint64) error {
	o := l.heldOwner(fh, id)
	if o == nil {
		return nil
	}
	err := l.unlock(ctx, o, fh, 0, ToEOF)
	l.mu.Lock()
	if f := l.files[string(fh)]; f != nil {
		l.forgetLocked(f, id)
	}
	none := len(l.files) == 0
	l.mu.Unlock()
	if none && l.notify.Load() == notifyOn {
		l.kickNotify() // the last lock went: statd may stop monitoring
	}
	return err
}

// ReleaseFile gives back every lock on fh (its last close).
func (l *Locker) ReleaseFile(ctx context.Context, fh []byte) error {
	l.mu.Lock()
	var ids []uint64
	if f := l.files[string(fh)]; f != nil {
		for id := range f.held {
			ids = append(ids, id)
		}
	}
	l.mu.Unlock()
	var errs []error
	for _, id := range ids {
		errs = append(errs, l.ReleaseOwner(ctx, fh, id))
	}
	return errors.Join(errs...)
}

// Held returns the ranges owner id holds on fh, for tests and reports.
func (l *Locker) Held(fh []byte, id uint64) []Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.files[string(fh)]
	if f == nil {
		return nil
	}
	var rs []Request
	for _, s := range f.held[id] {
		rs = append(rs, Request{Start: s.start, End: s.end, Exclusive: s.excl})
	}
	return rs
}

// OnLost sets the function called, from the Locker's monitor, with the
// file handle and owner of each lock that could not be reclaimed after a
// server restart (refused: another client took it; or the grace period
// missed). The lock is no longer in the Locker's record when it is called.
func (l *Locker) OnLost(fn func(fh []byte, owner uint64)) {
	l.mu.Lock()
	l.onLost = fn
	l.mu.Unlock()
}

// Lost returns the number of locks lost across server restarts.
func (l *Locker) Lost() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// Reclaims returns the number of reclaim rounds done (server restarts
// handled).
func (l *Locker) Reclaims() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reclaims
}

// Close gives back every lock held (within ctx) and stops the Locker. It
// does not close the Client.
func (l *Locker) Close(ctx context.Context) error {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	var fhs [][]byte
	for _, f := range l.files {
		fhs = append(fhs, f.fh)
	}
	l.mu.Unlock()
	var errs []error
	for _, fh := range fhs {
		if err := l.ReleaseFile(ctx, fh); err != nil {
			errs = append(errs, fmt.Errorf("nlm: unlocking at close: %w", err))
		}
	}
	return errors.Join(errs...)
}

// holding reports whether any lock is held.
func (l *Locker) holding() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.files {
		for _, segs := range f.held {
			if len(segs) > 0 {
				return true
			}
		}
	}
	return false
}

// monitor watches the server while locks are held: a lost connection to
// its lockd (or lockd on a new port), a new NSM state of its statd or a
// grace period met by a call mean it may have restarted and forgotten
// them; every held lock is then reclaimed.
func (l *Locker) monitor() {
	defer l.wg.Done()
	defer func() {
		if l.nsm != nil {
			l.stopNotify(l.nsm, true)
			l.nsm = nil
			l.notify.Store(notifyNone)
		}
	}()
	t := time.NewTicker(l.cfg.MonitorInterval)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		case <-l.kick:
		case <-l.monKick:
			l.manageNotify()
			continue
		case st := <-l.notified:
			if !l.holding() {
				continue
			}
			// The server's statd announced its reboot: reclaim now,
			// the server known to have restarted.
			l.log.Info("the server rebooted (SM_NOTIFY through this host's statd): reclaiming locks", "state", st)
			l.srvState, l.srvStateOK = st, true
			l.reclaim(true)
			continue
		}
		l.manageNotify()
		if !l.holding() {
			l.mu.Lock()
			l.grace = false
			l.mu.Unlock()
			l.seenEpoch = l.c.Epoch()
			continue
		}
		why, restarted := l.check()
		if why == "" {
			continue
		}
		l.log.Info("server may have restarted: reclaiming locks", "why", why)
		l.reclaim(restarted)
	}
}

// check returns why the locks must be reclaimed, or "", and whether the
// server is known to have restarted (its NSM state moved on).
func (l *Locker) check() (why string, restarted bool) {
	ctx, cancel := context.WithTimeout(l.ctx, l.cfg.MonitorInterval)
	defer cancel()
	if err := l.c.nlm.ping(ctx); err != nil {
		why = "lockd does not answer: " + err.Error()
	}
	if st, err := l.c.ServerStateOnce(ctx); err == nil {
		if l.srvStateOK && st != l.srvState {
			why = fmt.Sprintf("the server's NSM state went from %d to %d", l.srvState, st)
			restarted = true
		}
		l.srvState, l.srvStateOK = st, true
	}
	if e := l.c.Epoch(); e != l.seenEpoch {
		if why == "" {
			why = "the connection to lockd was lost"
		}
		l.seenEpoch = e
	}
	l.mu.Lock()
	if l.grace {
		l.grace = false
		if why == "" {
			why = "the server is in its grace period"
		}
	}
	l.mu.Unlock()
	return why, restarted
}

// reclaim asks for every held lock again with reclaim set. A server that
// is not in its grace period refuses a reclaim: when it is known to have
// restarted (restarted) its grace is over and the lock is lost; otherwise
// (it may not have restarted) the lock is asked for as a new one, which
// the server grants when this owner still holds it (or nobody took it).
//
// A lock that is not held again (refused, or the grace missed) is lost:
// it is dropped from the record, logged, and reported to the OnLost
// function, as the Linux client does with nfs.recover_lost_locks=false
// (I/O through the file that held it then fails with EIO).
func (l *Locker) reclaim(restarted bool) {
	type item struct {
		fh  []byte
		o   *owner
		seg segment
	}
	var items []item
	l.mu.Lock()
	for _, f := range l.files {
		for id, segs := range f.held {
			o := l.owners[id]
			for _, s := range segs {
				items = append(items, item{f.fh, o, s})
			}
		}
	}
	l.mu.Unlock()
	// The server's NSM state now: a restart seen here (a lost connection
	// may be noticed before the state can be read) counts, and the next
	// check compares with it, so that locks held again are not taken
	// for lost by a later round.
	sctx, cancel := context.WithTimeout(l.ctx, max(l.cfg.MonitorInterval, time.Second))
	if st, err := l.c.ServerStateOnce(sctx); err == nil {
		if l.srvStateOK && st != l.srvState {
			restarted = true
		}
		l.srvState, l.srvStateOK = st, true
	}
	cancel()
	st := l.nsmState(l.ctx)
	lost := 0
	for _, it := range items {
		a := LockArgs{Exclusive: it.seg.excl, Lock: l.lock(it.o, it.fh, it.seg.start, it.seg.end), Reclaim: true, State: st}
		it.o.op.Lock()
		ok, err := l.reclaimOne(l.ownerCtx(it.o), &a, restarted)
		if err == nil && !ok {
			l.record(it.fh, it.o.id, it.seg.start, it.seg.end, false, true)
			lost++
		}
		it.o.op.Unlock()
		if err == nil && !ok {
			l.log.Error("lock lost across a server restart: I/O through the file that held it fails with EIO until it is closed",
				"svid", it.o.svid, "start", it.seg.start, "end", it.seg.end)
			l.mu.Lock()
			l.lost++
			fn := l.onLost
			l.mu.Unlock()
			if fn != nil {
				fn(it.fh, it.o.id)
			}
		}
		if err != nil {
			l.log.Warn("reclaiming a lock failed", "svid", it.o.svid, "err", err)
			if l.ctx.Err() != nil {
				return
			}
		}
	}
	l.mu.Lock()
	l.reclaims++
	l.mu.Unlock()
	l.seenEpoch = l.c.Epoch()
	l.log.Info("locks reclaimed", "locks", len(items)-lost, "lost", lost)
}

// reclaimOne reclaims one lock: true when it is held again. A reclaim
// refused for the grace period (the server is out of it) is lost when the
// server is known to have restarted, else asked for as a new lock.
func (l *Locker) reclaimOne(ctx context.Context, a *LockArgs, restarted bool) (bool, error) {
	for try := 0; ; try++ {
		res, err := l.c.Lock(ctx, a)
		if err != nil {
			return false, err
		}
		switch res.Stat {
		case Granted:
			return true, nil
		case Denied, Blocked:
			return false, nil
		case DeniedGracePeriod:
			if a.Reclaim && restarted {
				return false, nil // the grace period was missed
			}
			// A reclaim outside a grace period, or a new lock inside
			// one: switch, and pause after each pair.
			a.Reclaim = !a.Reclaim
			if try%2 == 1 {
				if err := pause(ctx, l.cfg.RetryInterval); err != nil {
					return false, err
				}
			}
		default:
			return false, res.Stat
		}
	}
}
