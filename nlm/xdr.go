package nlm

import (
	"fmt"
	"math"
	"syscall"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// NLM version 4 (the X/Open NLM protocol as RFC 1813 Appendix II extends it
// to 64-bit offsets and NFSv3 file handles).
const (
	Program = 100021
	Version = 4

	ProcNull    = 0
	ProcTest    = 1
	ProcLock    = 2
	ProcCancel  = 3
	ProcUnlock  = 4
	ProcGranted = 5
	ProcFreeAll = 23
)

// Limits of NLM's variable-length items: netobj (cookie, fh, oh) and
// caller_name.
const (
	MaxNetObj    = 1024
	MaxStrLen    = 1024 // LM_MAXSTRLEN
	maxHolderLen = 4 + 4 + 4 + MaxNetObj + 8 + 8
)

// Stat is nlm4_stats.
type Stat uint32

// The nlm4_stats values.
const (
	Granted           Stat = 0
	Denied            Stat = 1
	DeniedNoLocks     Stat = 2
	Blocked           Stat = 3
	DeniedGracePeriod Stat = 4
	Deadlock          Stat = 5
	ReadOnlyFS        Stat = 6
	StaleFH           Stat = 7
	FileTooBig        Stat = 8
	Failed            Stat = 9
)

var statNames = [...]string{"NLM4_GRANTED", "NLM4_DENIED", "NLM4_DENIED_NOLOCKS", "NLM4_BLOCKED",
	"NLM4_DENIED_GRACE_PERIOD", "NLM4_DEADLCK", "NLM4_ROFS", "NLM4_STALE_FH", "NLM4_FBIG", "NLM4_FAILED"}

func (s Stat) String() string {
	if int(s) < len(statNames) {
		return statNames[s]
	}
	return fmt.Sprintf("nlm4_stats(%d)", uint32(s))
}

// Error makes a refusal an error.
func (s Stat) Error() string { return "nlm: " + s.String() }

// Errno maps a status to the errno the Linux client gives for it.
func (s Stat) Errno() syscall.Errno {
	switch s {
	case Granted:
		return 0
	case Denied, Blocked:
		return syscall.EAGAIN
	case DeniedNoLocks, Failed:
		return syscall.ENOLCK
	case DeniedGracePeriod:
		return syscall.EAGAIN
	case Deadlock:
		return syscall.EDEADLK
	case ReadOnlyFS:
		return syscall.EROFS
	case StaleFH:
		return syscall.ESTALE
	case FileTooBig:
		return syscall.EOVERFLOW
	}
	return syscall.ENOLCK
}

// Is lets errors.Is(err, syscall.EAGAIN) and the like hold for a refusal.
func (s Stat) Is(target error) bool {
	e, ok := target.(syscall.Errno)
	return ok && e == s.Errno()
}

// ToEOF is the End of a lock that reaches the end of the file, however long
// it grows (FUSE's OFFSET_MAX); NLM says it with l_len 0.
const ToEOF = math.MaxInt64

// Lock is nlm4_lock with the range as FUSE and fcntl(2) give it: Start to End
// inclusive, End ToEOF for "to the end of the file".
type Lock struct {
	CallerName string
	FH         []byte
	OH         []byte // the owner handle
	Svid       int32  // the owner's id on the client (a process id, for Linux)
	Start, End uint64
}

// wireRange returns l_offset and l_len.
func wireRange(start, end uint64) (off, length uint64) {
	if end >= ToEOF || end < start {
		return start, 0
	}
	return start, end - start + 1
}

// rangeFromWire returns Start and End of l_offset, l_len.
func rangeFromWire(off, length uint64) (start, end uint64) {
	if length == 0 || off+length-1 < off || off+length-1 >= ToEOF {
		return off, ToEOF
	}
	return off, off + length - 1
}

// AppendLock appends l as nlm4_lock.
func AppendLock(b []byte, l *Lock) []byte {
	b = sunrpc.AppendString(b, l.CallerName)
	b = sunrpc.AppendOpaque(b, l.FH)
	b = sunrpc.AppendOpaque(b, l.OH)
	b = sunrpc.AppendInt32(b, l.Svid)
	off, n := wireRange(l.Start, l.End)
	b = sunrpc.AppendUint64(b, off)
	return sunrpc.AppendUint64(b, n)
}

// DecodeLock reads an nlm4_lock.
func DecodeLock(d *sunrpc.Decoder) Lock {
	var l Lock
	l.CallerName = d.String(MaxStrLen)
	l.FH = d.Opaque(MaxNetObj)
	l.OH = d.Opaque(MaxNetObj)
	l.Svid = d.Int32()
	l.Start, l.End = rangeFromWire(d.Uint64(), d.Uint64())
	return l
}

// LockArgs is nlm4_lockargs.
type LockArgs struct {
	Cookie    []byte
	Block     bool
	Exclusive bool
	Lock      Lock
	Reclaim   bool
	State     int32 // the client's NSM state
}

// AppendLockArgs appends a.
func AppendLockArgs(b []byte, a *LockArgs) []byte {
	b = sunrpc.AppendOpaque(b, a.Cookie)
	b = sunrpc.AppendBool(b, a.Block)
	b = sunrpc.AppendBool(b, a.Exclusive)
	b = AppendLock(b, &a.Lock)
	b = sunrpc.AppendBool(b, a.Reclaim)
	return sunrpc.AppendInt32(b, a.State)
}

// DecodeLockArgs reads nlm4_lockargs.
func DecodeLockArgs(d *sunrpc.Decoder) LockArgs {
	var a LockArgs
	a.Cookie = d.Opaque(MaxNetObj)
	a.Block = d.Bool()
	a.Exclusive = d.Bool()
	a.Lock = DecodeLock(d)
	a.Reclaim = d.Bool()
	a.State = d.Int32()
	return a
}

// CancelArgs is nlm4_cancargs.
type CancelArgs struct {
	Cookie    []byte
	Block     bool
	Exclusive bool
	Lock      Lock
}

// AppendCancelArgs appends a.
func AppendCancelArgs(b []byte, a *CancelArgs) []byte {
	b = sunrpc.AppendOpaque(b, a.Cookie)
	b = sunrpc.AppendBool(b, a.Block)
	b = sunrpc.AppendBool(b, a.Exclusive)
	return AppendLock(b, &a.Lock)
}

// DecodeCancelArgs reads nlm4_cancargs.
func DecodeCancelArgs(d *sunrpc.Decoder) CancelArgs {
	var a CancelArgs
	a.Cookie = d.Opaque(MaxNetObj)
	a.Block = d.Bool()
	a.Exclusive = d.Bool()
	a.Lock = DecodeLock(d)
	return a
}

// TestArgs is nlm4_testargs.
type TestArgs struct {
	Cookie    []byte
	Exclusive bool
	Lock      Lock
}

// AppendTestArgs appends a.
func AppendTestArgs(b []byte, a *TestArgs) []byte {
	b = sunrpc.AppendOpaque(b, a.Cookie)
	b = sunrpc.AppendBool(b, a.Exclusive)
	return AppendLock(b, &a.Lock)
}

// DecodeTestArgs reads nlm4_testargs.
func DecodeTestArgs(d *sunrpc.Decoder) TestArgs {
	var a TestArgs
	a.Cookie = d.Opaque(MaxNetObj)
	a.Exclusive = d.Bool()
	a.Lock = DecodeLock(d)
	return a
}

// UnlockArgs is nlm4_unlockargs.
type UnlockArgs struct {
	Cookie []byte
	Lock   Lock
}

// AppendUnlockArgs appends a.
func AppendUnlockArgs(b []byte, a *UnlockArgs) []byte {
	b = sunrpc.AppendOpaque(b, a.Cookie)
	return AppendLock(b, &a.Lock)
}

// DecodeUnlockArgs reads nlm4_unlockargs.
func DecodeUnlockArgs(d *sunrpc.Decoder) UnlockArgs {
	var a UnlockArgs
	a.Cookie = d.Opaque(MaxNetObj)
	a.Lock = DecodeLock(d)
	return a
}

// Holder is nlm4_holder: the lock that conflicts with a TEST.
type Holder struct {
	Exclusive  bool
	Svid       int32
	OH         []byte
	Start, End uint64
}

// Res is nlm4_res, the result of LOCK, CANCEL and UNLOCK.
type Res struct {
	Cookie []byte
	Stat   Stat
}

// AppendRes appends r.
func AppendRes(b []byte, r *Res) []byte {
	b = sunrpc.AppendOpaque(b, r.Cookie)
	return sunrpc.AppendUint32(b, uint32(r.Stat))
}

// DecodeRes reads nlm4_res.
func DecodeRes(d *sunrpc.Decoder) Res {
	return Res{Cookie: d.Opaque(MaxNetObj), Stat: Stat(d.Uint32())}
}

// TestRes is nlm4_testres; Holder is set when Stat is Denied.
type TestRes struct {
	Cookie []byte
	Stat   Stat
	Holder *Holder
}

// AppendTestRes appends r.
func AppendTestRes(b []byte, r *TestRes) []byte {
	b = sunrpc.AppendOpaque(b, r.Cookie)
	b = sunrpc.AppendUint32(b, uint32(r.Stat))
	if r.Stat == Denied {
		h := r.Holder
		if h == nil {
			h = &Holder{}
		}
		b = sunrpc.AppendBool(b, h.Exclusive)
		b = sunrpc.AppendInt32(b, h.Svid)
		b = sunrpc.AppendOpaque(b, h.OH)
		off, n := wireRange(h.Start, h.End)
		b = sunrpc.AppendUint64(b, off)
		b = sunrpc.AppendUint64(b, n)
	}
	return b
}

// DecodeTestRes reads nlm4_testres.
func DecodeTestRes(d *sunrpc.Decoder) TestRes {
	var r TestRes
	r.Cookie = d.Opaque(MaxNetObj)
	r.Stat = Stat(d.Uint32())
	if r.Stat == Denied {
		h := &Holder{}
		h.Exclusive = d.Bool()
		h.Svid = d.Int32()
		h.OH = d.Opaque(MaxNetObj)
		h.Start, h.End = rangeFromWire(d.Uint64(), d.Uint64())
		r.Holder = h
	}
	return r
}

// NSM (the status monitor, rpc.statd), version 1.
const (
	NSMProgram = 100024
	NSMVersion = 1

	NSMProcNull   = 0
	NSMProcStat   = 1
	NSMProcMon    = 2
	NSMProcUnmon  = 3
	NSMProcNotify = 6

	MaxNSMName = 1024 // SM_MAXSTRLEN
)

// NSM results (res).
const (
	NSMSuccess = 0
	NSMFailure = 1
)
