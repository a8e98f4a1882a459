package nfs4

import (
	"fmt"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// ClientOwner is client_owner4 (RFC 8881 §2.4, §18.35): the verifier
// changes with every incarnation of the client, the owner id is stable.
type ClientOwner struct {
	Verifier Verifier
	OwnerID  []byte // at most 1024 bytes
}

// ExchangeIDResult is EXCHANGE_ID4resok (RFC 8881 §18.35.2) with SP4_NONE.
type ExchangeIDResult struct {
	ClientID    uint64
	SequenceID  uint32
	Flags       uint32
	ServerMinor uint64 // server_owner4.so_minor_id
	ServerMajor []byte // server_owner4.so_major_id
	ServerScope []byte
	ImplDomain  string // the server's nfs_impl_id4, when sent
	ImplName    string
}

// EXCHANGE_ID flags (RFC 8881 §18.35.1).
const (
	ExchgIDFlagUseNonPNFS = 0x00010000
	ExchgIDFlagConfirmedR = 0x80000000
)

const maxOpaque = 1024 // NFS4_OPAQUE_LIMIT

// exchangeID adds EXCHANGE_ID (RFC 8881 §18.35) with SP4_NONE state
// protection and this client's implementation id.
func (c *compound) exchangeID(owner *ClientOwner, flags uint32, r *ExchangeIDResult) {
	b := append([]byte(nil), owner.Verifier[:]...)
	b = sunrpc.AppendOpaque(b, owner.OwnerID)
	b = sunrpc.AppendUint32(b, flags)
	b = sunrpc.AppendUint32(b, 0) // SP4_NONE
	b = sunrpc.AppendUint32(b, 1) // eia_client_impl_id<1>
	b = sunrpc.AppendString(b, "nfsrdma.github.io")
	b = sunrpc.AppendString(b, "nfsrdma nfs4 (Go)")
	b = appendTime(b, Time{})
	c.add(OpExchangeID, b, 8+4+4+4+8+4+2*maxOpaque+4+4+2*maxOpaque+12, okOnly(func(d *sunrpc.Decoder) {
		decodeExchangeID(d, r)
	}))
}

func decodeExchangeID(d *sunrpc.Decoder, r *ExchangeIDResult) {
	r.ClientID = d.Uint64()
	r.SequenceID = d.Uint32()
	r.Flags = d.Uint32()
	switch how := d.Uint32(); how {
	case 0: // SP4_NONE
	case 1: // SP4_MACH_CRED: state_protect_ops4, two bitmaps
		decodeBitmap(d)
		decodeBitmap(d)
	default:
		d.Fail(fmt.Errorf("state_protect_how4 %d: this client asked for SP4_NONE", how))
		return
	}
	r.ServerMinor = d.Uint64()
	r.ServerMajor = append([]byte(nil), d.Opaque(maxOpaque)...)
	r.ServerScope = append([]byte(nil), d.Opaque(maxOpaque)...)
	if d.ArrayLen(1, 4+4+12) == 1 {
		r.ImplDomain = d.String(maxOpaque)
		r.ImplName = d.String(maxOpaque)
		decodeTime(d)
	}
}

// ChannelAttrs is channel_attrs4 (RFC 8881 §18.36.1).
type ChannelAttrs struct {
	HeaderPadSize         uint32
	MaxRequestSize        uint32
	MaxResponseSize       uint32
	MaxResponseSizeCached uint32
	MaxOperations         uint32
	MaxRequests           uint32
	RDMAIRD               []uint32 // ca_rdma_ird<1>: empty, or the inbound RDMA Read depth
}

func appendChannelAttrs(b []byte, a *ChannelAttrs) []byte {
	for _, v := range []uint32{a.HeaderPadSize, a.MaxRequestSize, a.MaxResponseSize, a.MaxResponseSizeCached, a.MaxOperations, a.MaxRequests} {
		b = sunrpc.AppendUint32(b, v)
	}
	b = sunrpc.AppendUint32(b, uint32(len(a.RDMAIRD)))
	for _, v := range a.RDMAIRD {
		b = sunrpc.AppendUint32(b, v)
	}
	return b
}

func decodeChannelAttrs(d *sunrpc.Decoder) ChannelAttrs {
	var a ChannelAttrs
	a.HeaderPadSize = d.Uint32()
	a.MaxRequestSize = d.Uint32()
	a.MaxResponseSize = d.Uint32()
	a.MaxResponseSizeCached = d.Uint32()
	a.MaxOperations = d.Uint32()
	a.MaxRequests = d.Uint32()
	if d.ArrayLen(1, 4) == 1 {
		a.RDMAIRD = []uint32{d.Uint32()}
	}
	return a
}

// CreateSessionResult is CREATE_SESSION4resok (RFC 8881 §18.36.2).
type CreateSessionResult struct {
	SessionID  SessionID
	SequenceID uint32
	Flags      uint32
	Fore, Back ChannelAttrs
}

// callbackProgram is csa_cb_program: this client binds no back channel, so
// the server never calls it; the value is the Linux client's.
const callbackProgram = 0x40000000

// createSession adds CREATE_SESSION (RFC 8881 §18.36) without a back
// channel (csa_flags 0) and AUTH_NONE callback security.
func (c *compound) createSession(clientID uint64, seq uint32, fore, back *ChannelAttrs, r *CreateSessionResult) {
	b := sunrpc.AppendUint64(nil, clientID)
	b = sunrpc.AppendUint32(b, seq)
	b = sunrpc.AppendUint32(b, 0) // csa_flags: no persistence, no back channel, no RDMA mode
	b = appendChannelAttrs(b, fore)
	b = appendChannelAttrs(b, back)
	b = sunrpc.AppendUint32(b, callbackProgram)
	b = sunrpc.AppendUint32(b, 1) // csa_sec_parms<>: one
	b = sunrpc.AppendUint32(b, uint32(sunrpc.AuthFlavorNone))
	c.add(OpCreateSession, b, 16+4+4+2*(7*4+4), okOnly(func(d *sunrpc.Decoder) {
		copy(r.SessionID[:], d.FixedOpaque(16))
		r.SequenceID = d.Uint32()
		r.Flags = d.Uint32()
		r.Fore = decodeChannelAttrs(d)
		r.Back = decodeChannelAttrs(d)
	}))
}

// SequenceArgs is SEQUENCE4args (RFC 8881 §18.46.1).
type SequenceArgs struct {
	SessionID   SessionID
	SequenceID  uint32
	SlotID      uint32
	HighestSlot uint32
	CacheThis   bool
}

// SequenceResult is SEQUENCE4resok (RFC 8881 §18.46.2).
type SequenceResult struct {
	SessionID         SessionID
	SequenceID        uint32
	SlotID            uint32
	HighestSlot       uint32
	TargetHighestSlot uint32
	StatusFlags       uint32
}

// SEQUENCE status flags (RFC 8881 §18.46.3).
const (
	SeqStatusCBPathDown              = 0x1
	SeqStatusExpiredAllStateRevoked  = 0x10
	SeqStatusExpiredSomeStateRevoked = 0x20
	SeqStatusAdminStateRevoked       = 0x40
	SeqStatusRecallableStateRevoked  = 0x80
	SeqStatusLeaseMoved              = 0x100
	SeqStatusRestartReclaimNeeded    = 0x200
	SeqStatusCBPathDownSession       = 0x400
	SeqStatusBackchannelFault        = 0x800
	seqStatusStateLost               = SeqStatusExpiredAllStateRevoked | SeqStatusExpiredSomeStateRevoked | SeqStatusAdminStateRevoked | SeqStatusRecallableStateRevoked
)

// sequence adds SEQUENCE (RFC 8881 §18.46).
func (c *compound) sequence(a *SequenceArgs, r *SequenceResult) {
	b := append([]byte(nil), a.SessionID[:]...)
	b = sunrpc.AppendUint32(b, a.SequenceID)
	b = sunrpc.AppendUint32(b, a.SlotID)
	b = sunrpc.AppendUint32(b, a.HighestSlot)
	b = sunrpc.AppendBool(b, a.CacheThis)
	c.add(OpSequence, b, 16+5*4, okOnly(func(d *sunrpc.Decoder) {
		copy(r.SessionID[:], d.FixedOpaque(16))
		r.SequenceID = d.Uint32()
		r.SlotID = d.Uint32()
		r.HighestSlot = d.Uint32()
		r.TargetHighestSlot = d.Uint32()
		r.StatusFlags = d.Uint32()
	}))
}

// reclaimComplete adds RECLAIM_COMPLETE (RFC 8881 §18.51) for all file
// systems.
func (c *compound) reclaimComplete() {
	c.add(OpReclaimComplete, sunrpc.AppendBool(nil, false), 0, nil)
}

// destroySession adds DESTROY_SESSION (RFC 8881 §18.37).
func (c *compound) destroySession(id SessionID) {
	c.add(OpDestroySession, append([]byte(nil), id[:]...), 0, nil)
}

// destroyClientID adds DESTROY_CLIENTID (RFC 8881 §18.50).
func (c *compound) destroyClientID(id uint64) {
	c.add(OpDestroyClientID, sunrpc.AppendUint64(nil, id), 0, nil)
}
