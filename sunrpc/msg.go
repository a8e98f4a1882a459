package sunrpc

import (
	"errors"
	"fmt"
)

// RPCVersion is the ONC RPC protocol version (RFC 5531 §8).
const RPCVersion = 2

// MsgType is msg_type (RFC 5531 §9).
type MsgType uint32

// Message types.
const (
	MsgCall  MsgType = 0
	MsgReply MsgType = 1
)

// ReplyStat is reply_stat (RFC 5531 §9).
type ReplyStat uint32

// Reply statuses.
const (
	MsgAccepted ReplyStat = 0
	MsgDenied   ReplyStat = 1
)

// AcceptStat is accept_stat (RFC 5531 §9).
type AcceptStat uint32

// Accept statuses.
const (
	Success      AcceptStat = 0 // RPC executed successfully
	ProgUnavail  AcceptStat = 1 // remote hasn't exported the program
	ProgMismatch AcceptStat = 2 // remote can't support the version number
	ProcUnavail  AcceptStat = 3 // program can't support the procedure
	GarbageArgs  AcceptStat = 4 // procedure can't decode the parameters
	SystemErr    AcceptStat = 5 // e.g. memory allocation failure
)

func (s AcceptStat) String() string {
	switch s {
	case Success:
		return "SUCCESS"
	case ProgUnavail:
		return "PROG_UNAVAIL"
	case ProgMismatch:
		return "PROG_MISMATCH"
	case ProcUnavail:
		return "PROC_UNAVAIL"
	case GarbageArgs:
		return "GARBAGE_ARGS"
	case SystemErr:
		return "SYSTEM_ERR"
	}
	return fmt.Sprintf("accept_stat(%d)", uint32(s))
}

// RejectStat is reject_stat (RFC 5531 §9).
type RejectStat uint32

// Reject statuses.
const (
	RPCMismatch RejectStat = 0 // RPC version number != 2
	AuthErr     RejectStat = 1 // remote can't authenticate caller
)

// AuthStat is auth_stat (RFC 5531 §9).
type AuthStat uint32

// Authentication statuses.
const (
	AuthOK             AuthStat = 0
	AuthBadCred        AuthStat = 1
	AuthRejectedCred   AuthStat = 2
	AuthBadVerf        AuthStat = 3
	AuthRejectedVerf   AuthStat = 4
	AuthTooWeak        AuthStat = 5
	AuthInvalidResp    AuthStat = 6
	AuthFailed         AuthStat = 7
	AuthKerbGeneric    AuthStat = 8
	AuthTimeExpire     AuthStat = 9
	AuthTktFile        AuthStat = 10
	AuthDecode         AuthStat = 11
	AuthNetAddr        AuthStat = 12
	RPCSecGSSCredProbl AuthStat = 13
	RPCSecGSSCtxProbl  AuthStat = 14
)

var authStatNames = [...]string{
	"AUTH_OK", "AUTH_BADCRED", "AUTH_REJECTEDCRED", "AUTH_BADVERF", "AUTH_REJECTEDVERF",
	"AUTH_TOOWEAK", "AUTH_INVALIDRESP", "AUTH_FAILED", "AUTH_KERB_GENERIC", "AUTH_TIMEEXPIRE",
	"AUTH_TKT_FILE", "AUTH_DECODE", "AUTH_NET_ADDR", "RPCSEC_GSS_CREDPROBLEM", "RPCSEC_GSS_CTXPROBLEM",
}

func (s AuthStat) String() string {
	if int(s) < len(authStatNames) {
		return authStatNames[s]
	}
	return fmt.Sprintf("auth_stat(%d)", uint32(s))
}

// MaxAuthBody is the largest opaque_auth body (RFC 5531 §8.2).
const MaxAuthBody = 400

// OpaqueAuth is opaque_auth (RFC 5531 §8.2): a credential or verifier.
type OpaqueAuth struct {
	Flavor AuthFlavor
	Body   []byte // at most MaxAuthBody bytes
}

// AuthNone is the AUTH_NONE credential and verifier (RFC 5531 §10.1).
var AuthNone = OpaqueAuth{Flavor: AuthFlavorNone}

// AppendOpaqueAuth appends a. A body longer than MaxAuthBody is the caller's
// error; Client checks it before it encodes.
func AppendOpaqueAuth(b []byte, a OpaqueAuth) []byte {
	b = AppendUint32(b, uint32(a.Flavor))
	return AppendOpaque(b, a.Body)
}

// DecodeOpaqueAuth reads an opaque_auth. Body aliases the message.
func DecodeOpaqueAuth(d *Decoder) OpaqueAuth {
	var a OpaqueAuth
	a.Flavor = AuthFlavor(d.Uint32())
	a.Body = d.Opaque(MaxAuthBody)
	return a
}

// CallHeader is the call half of rpc_msg up to the procedure's arguments
// (RFC 5531 §9: xid, CALL, call_body).
type CallHeader struct {
	XID  uint32
	Prog uint32
	Vers uint32
	Proc uint32
	Cred OpaqueAuth
	Verf OpaqueAuth
}

// AppendCall appends the call header h; the procedure's arguments follow it.
func AppendCall(b []byte, h *CallHeader) []byte {
	b = AppendUint32(b, h.XID)
	b = AppendUint32(b, uint32(MsgCall))
	b = AppendUint32(b, RPCVersion)
	b = AppendUint32(b, h.Prog)
	b = AppendUint32(b, h.Vers)
	b = AppendUint32(b, h.Proc)
	b = AppendOpaqueAuth(b, h.Cred)
	return AppendOpaqueAuth(b, h.Verf)
}

// ErrNotCall reports a message that is not an RPC version 2 call.
var ErrNotCall = errors.New("sunrpc: not an RPC version 2 call message")

// DecodeCall reads a call header, leaving d at the procedure's arguments. Servers
// (and tests standing in for them) use it.
func DecodeCall(d *Decoder) (CallHeader, error) {
	var h CallHeader
	h.XID = d.Uint32()
	mt := MsgType(d.Uint32())
	vers := d.Uint32()
	h.Prog = d.Uint32()
	h.Vers = d.Uint32()
	h.Proc = d.Uint32()
	h.Cred = DecodeOpaqueAuth(d)
	h.Verf = DecodeOpaqueAuth(d)
	if d.Err() != nil {
		return CallHeader{}, d.Err()
	}
	if mt != MsgCall || vers != RPCVersion {
		return CallHeader{}, ErrNotCall
	}
	return h, nil
}

// ReplyHeader is the reply half of rpc_msg up to the procedure's results
// (RFC 5531 §9: xid, REPLY, reply_body). Which fields are meaningful depends on
// Stat, and then on Accept or Reject:
//
//	MSG_ACCEPTED: Verf, Accept; Low/High when Accept is PROG_MISMATCH
//	MSG_DENIED:   Reject; Low/High when RPC_MISMATCH, Auth when AUTH_ERROR
type ReplyHeader struct {
	XID    uint32
	Stat   ReplyStat
	Verf   OpaqueAuth
	Accept AcceptStat
	Reject RejectStat
	Auth   AuthStat
	Low    uint32
	High   uint32
}

// AppendReply appends the reply header h; for SUCCESS the procedure's results
// follow it.
func AppendReply(b []byte, h *ReplyHeader) []byte {
	b = AppendUint32(b, h.XID)
	b = AppendUint32(b, uint32(MsgReply))
	b = AppendUint32(b, uint32(h.Stat))
	switch h.Stat {
	case MsgAccepted:
		b = AppendOpaqueAuth(b, h.Verf)
		b = AppendUint32(b, uint32(h.Accept))
		if h.Accept == ProgMismatch {
			b = AppendUint32(b, h.Low)
			b = AppendUint32(b, h.High)
		}
	case MsgDenied:
		b = AppendUint32(b, uint32(h.Reject))
		switch h.Reject {
		case RPCMismatch:
			b = AppendUint32(b, h.Low)
			b = AppendUint32(b, h.High)
		case AuthErr:
			b = AppendUint32(b, uint32(h.Auth))
		}
	}
	return b
}

// HeaderError reports a reply header that is not a well-formed RPC reply
// (wrong message type, unknown reply, reject or accept status).
type HeaderError struct{ Reason string }

func (e *HeaderError) Error() string { return "sunrpc: malformed reply: " + e.Reason }

// DecodeReply reads a reply header, leaving d at the procedure's results when the
// call was accepted. It returns an error only for a malformed header; a
// well-formed rejection is reported by ReplyHeader.Err.
func DecodeReply(d *Decoder) (ReplyHeader, error) {
	var h ReplyHeader
	h.XID = d.Uint32()
	mt := MsgType(d.Uint32())
	h.Stat = ReplyStat(d.Uint32())
	if d.Err() == nil && mt != MsgReply {
		d.Fail(&HeaderError{Reason: fmt.Sprintf("message type %d", uint32(mt))})
	}
	if d.Err() != nil {
		return ReplyHeader{}, d.Err()
	}
	switch h.Stat {
	case MsgAccepted:
		h.Verf = DecodeOpaqueAuth(d)
		h.Accept = AcceptStat(d.Uint32())
		switch h.Accept {
		case Success, ProgUnavail, ProcUnavail, GarbageArgs, SystemErr:
		case ProgMismatch:
			// The versions supported, when the reply has them: the
			// Linux client does not read them, and some servers
			// (go-nfs, for a program it does not serve) send none.
			if d.Len() >= 8 {
				h.Low = d.Uint32()
				h.High = d.Uint32()
			}
		default:
			d.Fail(&HeaderError{Reason: "accept status " + h.Accept.String()})
		}
	case MsgDenied:
		h.Reject = RejectStat(d.Uint32())
		switch h.Reject {
		case RPCMismatch:
			h.Low = d.Uint32()
			h.High = d.Uint32()
		case AuthErr:
			h.Auth = AuthStat(d.Uint32())
		default:
			d.Fail(&HeaderError{Reason: fmt.Sprintf("reject status %d", uint32(h.Reject))})
		}
	default:
		d.Fail(&HeaderError{Reason: fmt.Sprintf("reply status %d", uint32(h.Stat))})
	}
	if d.Err() != nil {
		return ReplyHeader{}, d.Err()
	}
	return h, nil
}

// Err returns nil for an accepted, successful reply and otherwise the typed error
// for the rejection or the accept status: *RPCMismatchError, *AuthError or
// *AcceptError.
func (h *ReplyHeader) Err() error {
	switch h.Stat {
	case MsgAccepted:
		if h.Accept == Success {
			return nil
		}
		e := &AcceptError{Stat: h.Accept}
		if h.Accept == ProgMismatch {
			e.Low, e.High = h.Low, h.High
		}
		return e
	case MsgDenied:
		if h.Reject == RPCMismatch {
			return &RPCMismatchError{Low: h.Low, High: h.High}
		}
		return &AuthError{Stat: h.Auth}
	}
	return &HeaderError{Reason: fmt.Sprintf("reply status %d", uint32(h.Stat))}
}

// RPCMismatchError is a call rejected with RPC_MISMATCH (RFC 5531 §9): the
// server supports RPC versions Low through High only.
type RPCMismatchError struct{ Low, High uint32 }

func (e *RPCMismatchError) Error() string {
	return fmt.Sprintf("sunrpc: RPC version mismatch (server supports %d..%d)", e.Low, e.High)
}

// AuthError is a call rejected with AUTH_ERROR (RFC 5531 §9).
type AuthError struct{ Stat AuthStat }

func (e *AuthError) Error() string { return "sunrpc: authentication error: " + e.Stat.String() }

// AcceptError is an accepted call whose accept_stat is not SUCCESS (RFC 5531 §9).
// For PROG_MISMATCH, Low and High are the versions the server supports.
// errors.Is matches on Stat: errors.Is(err, ErrProcUnavail).
type AcceptError struct {
	Stat      AcceptStat
	Low, High uint32
}

func (e *AcceptError) Error() string {
	if e.Stat == ProgMismatch {
		return fmt.Sprintf("sunrpc: PROG_MISMATCH (server supports versions %d..%d)", e.Low, e.High)
	}
	return "sunrpc: " + e.Stat.String()
}

// Is reports whether target is an *AcceptError with the same Stat.
func (e *AcceptError) Is(target error) bool {
	t, ok := target.(*AcceptError)
	return ok && t.Stat == e.Stat
}

// Sentinels for errors.Is against an *AcceptError.
var (
	ErrProgUnavail  error = &AcceptError{Stat: ProgUnavail}
	ErrProgMismatch error = &AcceptError{Stat: ProgMismatch}
	ErrProcUnavail  error = &AcceptError{Stat: ProcUnavail}
	ErrGarbageArgs  error = &AcceptError{Stat: GarbageArgs}
	ErrSystemErr    error = &AcceptError{Stat: SystemErr}
)
