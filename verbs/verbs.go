// Package verbs holds the RDMA verbs nfsrdma's transport needs, as Go types
// and interfaces: devices and their attributes, protection domains,
// completion queues, reliable-connected queue pairs, memory regions over
// mmap'd memory, type-2 memory windows, work requests posted as chains,
// completions, and rdma_cm connection management with private data.
//
// Two implementations exist: verbs/ibv (rdma-core through cgo, the real
// thing) and verbs/sim (an in-process simulated RC fabric for fast rule and
// fault tests). Both follow the verbs specification (IBTA Vol. 1 ch. 10–11)
// as seen through libibverbs; where a device departs from it, verbs/ibv
// normalizes the departure in its quirk table so the layers above see one
// behaviour.
package verbs

import (
	"context"
	"net/netip"
	"time"
)

// Fabric is one verbs implementation: the entry point for devices and for
// rdma_cm connection management.
type Fabric interface {
	// Devices lists the names of the RDMA devices present.
	Devices() ([]string, error)
	// OpenDevice opens a device by name (for example "rxe0").
	OpenDevice(name string) (Device, error)
	// Resolve resolves the address and route to a server (rdma_resolve_addr
	// and rdma_resolve_route) and returns an unconnected endpoint bound to
	// the device that reaches it. Create the QP on the endpoint, then Connect.
	Resolve(ctx context.Context, addr netip.AddrPort) (Endpoint, error)
	// Listen binds a listening rdma_cm id to addr (rdma_bind_addr,
	// rdma_listen). Port 0 picks a free port.
	Listen(addr netip.AddrPort) (Listener, error)
	// Live counts the resources this fabric has created and not yet
	// released; tests use it to prove nothing leaked.
	Live() ResourceCounts
}

// ResourceCounts counts live verbs objects.
type ResourceCounts struct {
	Endpoints, Devices, PDs, CQs, QPs, MRs, MWs int
}

// Zero reports whether no resource is live.
func (c ResourceCounts) Zero() bool { return c == ResourceCounts{} }

// Device is an open RDMA device context.
type Device interface {
	Name() string
	// Attr returns the device attributes (ibv_query_device).
	Attr() DeviceAttr
	// AllocPD allocates a protection domain.
	AllocPD() (PD, error)
	// CreateCQ creates a completion queue of at least depth entries with its
	// own completion channel.
	CreateCQ(depth int) (CQ, error)
	// Close releases the device. For a device obtained from an endpoint it
	// is a no-op: the endpoint owns it.
	Close() error
}

// DeviceCap is a device capability flag.
type DeviceCap uint32

const (
	// CapMemWindow2 means the device supports type-2 memory windows
	// (IBV_DEVICE_MEM_WINDOW_TYPE_2A or _2B).
	CapMemWindow2 DeviceCap = 1 << iota
	// CapMemWindow2A and CapMemWindow2B name which kind of type-2 window.
	CapMemWindow2A
	CapMemWindow2B
	// CapMemMgtExtensions means the device supports memory-management
	// extensions (local invalidate, send with invalidate).
	CapMemMgtExtensions
)

// DeviceAttr is what ibv_query_device reports that the transport uses.
type DeviceAttr struct {
	Name        string
	Driver      string // kernel driver / provider, e.g. "rxe", "mlx5"
	MaxQPWR     int
	MaxSGE      int
	MaxCQE      int
	MaxMR       int
	MaxMW       int
	MaxQPRdAtom int
	MaxMRSize   uint64
	Caps        DeviceCap

	// Departures from the verbs specification that the layers above must
	// respect (the binding's quirk table sets them).

	// WindowsUnbounded: a memory window's rkey reaches the whole MR it is
	// bound on, not only the window's range (rxe on Linux 6.1). A window
	// cannot confine the peer to a segment on such a device.
	WindowsUnbounded bool
	// StaleInvalidatePanics: a Send With Invalidate naming the rkey of a
	// window that is already invalid crashes the driver (rxe on Linux
	// 6.1): no window may sit invalid under an rkey the peer has seen.
	StaleInvalidatePanics bool
}

// Has reports whether the device has every capability in c.
func (a DeviceAttr) Has(c DeviceCap) bool { return a.Caps&c == c }

// Access is a set of memory access rights (ibv_access_flags).
type Access uint32

const (
	AccessLocalWrite Access = 1 << iota
	AccessRemoteWrite
	AccessRemoteRead
	AccessRemoteAtomic
	AccessMWBind
)

// PD is a protection domain.
type PD interface {
	// RegMR registers memory. mem must come from a Mapping (mmap'd memory,
	// never the Go heap): the device may access it at any time until the
	// MR is closed.
	RegMR(mem []byte, access Access) (MR, error)
	// AllocMW allocates a type-2 memory window.
	AllocMW() (MW, error)
	Close() error
}

// MR is a registered memory region.
type MR interface {
	// Bytes is the registered memory.
	Bytes() []byte
	// Addr is the address of Bytes()[0] in the device's address space: the
	// base for remote addresses advertised in windows bound on this MR.
	Addr() uint64
	LKey() uint32
	// RKey is the MR's own remote key (0 when it grants no remote access).
	RKey() uint32
	Access() Access
	Close() error
}

// AccessChanger is an MR whose access can be changed in place
// (ibv_rereg_mr with IBV_REREG_MR_CHANGE_ACCESS): the same memory stays
// registered and only its rights change. After a successful
// ChangeAccess, RKey (and LKey) may differ: read them again. A device
// that cannot do it returns an error wrapping syscall.EOPNOTSUPP, and the
// MR is unchanged.
type AccessChanger interface {
	MR
	ChangeAccess(access Access) error
}

// MW is a type-2 memory window.
type MW interface {
	// RKey is the window's current rkey: the one given in the last posted
	// bind (the key a peer must use), or its initial key before any bind.
	RKey() uint32
	// Close deallocates the window. Close windows before their QP.
	Close() error
}

// NextRKey returns rkey with its low 8-bit key replaced by key. A bind must
// change the key byte; callers pass an unpredictable byte different from
// the current one.
func NextRKey(rkey uint32, key uint8) uint32 { return rkey&^0xff | uint32(key) }

// CQ is a completion queue with its own completion channel.
type CQ interface {
	// Poll fills wcs with up to len(wcs) completions and returns how many
	// (ibv_poll_cq; one crossing per batch). It never blocks.
	Poll(wcs []Completion) (int, error)
	// Wait arms the CQ for the next completion (ibv_req_notify_cq) and
	// blocks until a completion event arrives or ctx is done. Callers poll
	// after Wait returns, and poll once more after arming (Wait does that
	// race check itself: it returns at once if the CQ is not empty).
	// Waiting uses no CPU.
	Wait(ctx context.Context) error
	Close() error
}

// SpinPoller is implemented by CQs that can busy-poll inside the provider
// for up to spin before returning empty, in one call: latency-sensitive
// loops that spin pay one crossing per completion, not per attempt.
type SpinPoller interface {
	PollSpin(wcs []Completion, spin time.Duration) (int, error)
}

// QPType is the queue pair transport type. Only RC is used.
type QPType int

const QPTypeRC QPType = 0

// QPConfig configures a queue pair.
type QPConfig struct {
	SendCQ, RecvCQ CQ
	MaxSendWR      int
	MaxRecvWR      int
	MaxSendSGE     int
	MaxRecvSGE     int
	MaxInlineData  int
	// SignalAll requests a completion for every send WR regardless of its
	// Signaled flag (sq_sig_all). The transport leaves it false.
	SignalAll bool
}

// QPCaps are the capacities a created QP really has (they may exceed the
// request).
type QPCaps struct {
	MaxSendWR, MaxRecvWR, MaxSendSGE, MaxRecvSGE, MaxInlineData int
}

// QPState is a queue pair state.
type QPState int

const (
	QPReset QPState = iota
	QPInit
	QPRTR
	QPRTS
	QPSQD
	QPSQE
	QPError
)

func (s QPState) String() string {
	switch s {
	case QPReset:
		return "RESET"
	case QPInit:
		return "INIT"
	case QPRTR:
		return "RTR"
	case QPRTS:
		return "RTS"
	case QPSQD:
		return "SQD"
	case QPSQE:
		return "SQE"
	case QPError:
		return "ERR"
	}
	return "QPState(?)"
}

// QP is a reliable-connected queue pair.
type QP interface {
	Num() uint32
	Caps() QPCaps
	// PostSend posts a chain of send work requests in order, in one
	// crossing. On error, bad is the index of the first WR not posted
	// (WRs before it were posted).
	PostSend(wrs []SendWR) (bad int, err error)
	// PostRecv posts a chain of receive work requests.
	PostRecv(wrs []RecvWR) (bad int, err error)
	State() (QPState, error)
	// SetError moves the QP to the error state: outstanding and later WRs
	// complete with StatusWRFlushErr, in order.
	SetError() error
	Close() error
}

// SGE is one scatter/gather element: Length bytes at Offset in MR.
type SGE struct {
	MR     MR
	Offset uint64
	Length uint32
}

// Opcode is a send work request opcode (ibv_wr_opcode).
type Opcode int

const (
	OpSend Opcode = iota
	OpSendWithInv
	OpRDMAWrite
	OpRDMARead
	OpBindMW
	OpLocalInv
)

func (o Opcode) String() string {
	switch o {
	case OpSend:
		return "SEND"
	case OpSendWithInv:
		return "SEND_WITH_INV"
	case OpRDMAWrite:
		return "RDMA_WRITE"
	case OpRDMARead:
		return "RDMA_READ"
	case OpBindMW:
		return "BIND_MW"
	case OpLocalInv:
		return "LOCAL_INV"
	}
	return "Opcode(?)"
}

// SendFlags are send work request flags (ibv_send_flags).
type SendFlags uint32

const (
	SendSignaled SendFlags = 1 << iota
	SendFence
	SendSolicited
	SendInline
)

// SendWR is one send-queue work request.
type SendWR struct {
	ID     uint64
	Opcode Opcode
	Flags  SendFlags
	SGL    []SGE

	// RDMA READ / WRITE: the remote buffer.
	RemoteAddr uint64
	RKey       uint32

	// SEND_WITH_INV and LOCAL_INV: the rkey to invalidate.
	InvalidateRKey uint32

	// BIND_MW: bind window MW to [BindAddr, BindAddr+BindLength) of BindMR
	// (BindAddr is in the MR's address space, see MR.Addr) with BindAccess,
	// giving it the new rkey BindRKey (see NextRKey). After a successful
	// post, MW.RKey returns BindRKey.
	MW         MW
	BindMR     MR
	BindAddr   uint64
	BindLength uint64
	BindAccess Access
	BindRKey   uint32
}

// RecvWR is one receive work request.
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// Status is a work completion status (ibv_wc_status).
type Status int

const (
	StatusSuccess Status = iota
	StatusLocLenErr
	StatusLocQPOpErr
	StatusLocEECOpErr
	StatusLocProtErr
	StatusWRFlushErr
	StatusMWBindErr
	StatusBadRespErr
	StatusLocAccessErr
	StatusRemInvReqErr
	StatusRemAccessErr
	StatusRemOpErr
	StatusRetryExcErr
	StatusRNRRetryExcErr
	StatusLocRDDViolErr
	StatusRemInvRDReqErr
	StatusRemAbortErr
	StatusInvEECNErr
	StatusInvEECStateErr
	StatusFatalErr
	StatusRespTimeoutErr
	StatusGeneralErr
)

var statusNames = [...]string{
	"SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR", "LOC_PROT_ERR",
	"WR_FLUSH_ERR", "MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR", "REM_INV_REQ_ERR",
	"REM_ACCESS_ERR", "REM_OP_ERR", "RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR",
	"REM_INV_RD_REQ_ERR", "REM_ABORT_ERR", "INV_EECN_ERR", "INV_EEC_STATE_ERR", "FATAL_ERR",
	"RESP_TIMEOUT_ERR", "GENERAL_ERR",
}

func (s Status) String() string {
	if s >= 0 && int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "Status(?)"
}

// WCOpcode is a work completion opcode (ibv_wc_opcode).
type WCOpcode int

const (
	WCSend WCOpcode = iota
	WCRDMAWrite
	WCRDMARead
	WCCompSwap
	WCFetchAdd
	WCBindMW
	WCLocalInv
	WCRecv WCOpcode = 128 + iota - 7
	WCRecvRDMAWithImm
)

func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCBindMW:
		return "BIND_MW"
	case WCLocalInv:
		return "LOCAL_INV"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return "WCOpcode(?)"
}

// WCFlags are work completion flags, normalized: WCWithInv is set when the
// received message invalidated InvalidatedRKey, whatever bit the device
// really uses for it.
type WCFlags uint32

const (
	WCWithImm WCFlags = 1 << iota
	WCWithInv
)

// Completion is one work completion (ibv_wc). Opcode is valid only when
// Status is StatusSuccess.
type Completion struct {
	ID              uint64
	Status          Status
	Opcode          WCOpcode
	ByteLen         uint32
	Flags           WCFlags
	InvalidatedRKey uint32
	QPNum           uint32
	VendorErr       uint32
}

// ConnParam are the rdma_cm connection parameters (rdma_conn_param).
type ConnParam struct {
	PrivateData        []byte
	ResponderResources int // RDMA READs the peer may have outstanding at us; >0 for the server to RDMA-READ
	InitiatorDepth     int // RDMA READs we may have outstanding at the peer
	RetryCount         int
	RNRRetryCount      int
}

// CMEventType is an rdma_cm event type that reaches users after connect.
type CMEventType int

const (
	CMDisconnected CMEventType = iota
	CMDeviceRemoval
	CMTimewaitExit
	CMConnectError
	CMUnreachable
	CMRejected
	CMAddrChange
)

func (t CMEventType) String() string {
	switch t {
	case CMDisconnected:
		return "DISCONNECTED"
	case CMDeviceRemoval:
		return "DEVICE_REMOVAL"
	case CMTimewaitExit:
		return "TIMEWAIT_EXIT"
	case CMConnectError:
		return "CONNECT_ERROR"
	case CMUnreachable:
		return "UNREACHABLE"
	case CMRejected:
		return "REJECTED"
	case CMAddrChange:
		return "ADDR_CHANGE"
	}
	return "CMEventType(?)"
}

// CMEvent is a connection-management event after ESTABLISHED.
type CMEvent struct {
	Type CMEventType
	At   time.Time
}

// Endpoint is one rdma_cm id: a connection in the making or made.
type Endpoint interface {
	// Device is the device the endpoint's route goes through. The endpoint
	// owns it.
	Device() Device
	// CreateQP creates the endpoint's RC queue pair (rdma_create_qp) in pd.
	CreateQP(pd PD, cfg QPConfig) (QP, error)
	// Connect connects an endpoint from Fabric.Resolve and returns the
	// peer's private data from the ESTABLISHED event.
	Connect(ctx context.Context, p ConnParam) (peerPrivateData []byte, err error)
	// PrivateData is the private data the peer sent with its connection
	// request (for an endpoint from Listener.Accept).
	PrivateData() []byte
	// Accept accepts an endpoint from Listener.Accept and waits for
	// ESTABLISHED.
	Accept(ctx context.Context, p ConnParam) error
	// Reject rejects a connection request with private data.
	Reject(privateData []byte) error
	// Events delivers events after ESTABLISHED (a DISCONNECTED from the
	// peer, device removal). It is closed when the endpoint is closed.
	Events() <-chan CMEvent
	// Disconnect sends a disconnect (rdma_disconnect); the QP moves to the
	// error state.
	Disconnect() error
	// LocalAddr and RemoteAddr are the endpoint's addresses.
	LocalAddr() netip.AddrPort
	RemoteAddr() netip.AddrPort
	// Close destroys the endpoint; close its QP first.
	Close() error
}

// Listener is a listening rdma_cm id.
type Listener interface {
	// Accept waits for a connection request and returns its endpoint,
	// unaccepted: create the QP, then call Endpoint.Accept or Reject.
	Accept(ctx context.Context) (Endpoint, error)
	Addr() netip.AddrPort
	Close() error
}

// AsyncEventType is an asynchronous device event (ibv_get_async_event's
// enum ibv_event_type, the ones a consumer acts on).
type AsyncEventType int

const (
	AsyncDeviceFatal    AsyncEventType = iota + 1 // IBV_EVENT_DEVICE_FATAL: the device is unusable
	AsyncPortError                                // IBV_EVENT_PORT_ERR: a port went down
	AsyncPortActive                               // IBV_EVENT_PORT_ACTIVE: a port came up
	AsyncQPFatal                                  // IBV_EVENT_QP_FATAL: a QP hit an error outside any WR
	AsyncQPRequestError                           // IBV_EVENT_QP_REQ_ERR: a request the QP got was invalid
	AsyncQPAccessError                            // IBV_EVENT_QP_ACCESS_ERR: a remote access violation
	AsyncCQError                                  // IBV_EVENT_CQ_ERR: a CQ overran
	AsyncOther                                    // anything else (logged, not acted on)
)

func (t AsyncEventType) String() string {
	switch t {
	case AsyncDeviceFatal:
		return "DEVICE_FATAL"
	case AsyncPortError:
		return "PORT_ERR"
	case AsyncPortActive:
		return "PORT_ACTIVE"
	case AsyncQPFatal:
		return "QP_FATAL"
	case AsyncQPRequestError:
		return "QP_REQ_ERR"
	case AsyncQPAccessError:
		return "QP_ACCESS_ERR"
	case AsyncCQError:
		return "CQ_ERR"
	}
	return "async event"
}

// AsyncEvent is one asynchronous device event.
type AsyncEvent struct {
	Type  AsyncEventType
	Port  int    // the port of a port event
	QPNum uint32 // the QP of a QP event
}

// AsyncEventSource is a Device that reports asynchronous events.
// AsyncEvents subscribes: every event of the device reaches every
// subscriber until its stop is called (events is then closed). A
// subscriber that does not keep up loses events beyond a small buffer.
type AsyncEventSource interface {
	AsyncEvents() (events <-chan AsyncEvent, stop func())
}
