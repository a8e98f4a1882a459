// Package sunrpctest checks a sunrpc.Transport against the contract every
// transport keeps (RunTransportSuite): close, cancel, timeouts, errors,
// concurrency, retries with the same XID, and calls with large bulk items.
// The suite drives the transport against a server that runs its Handler:
// a small program whose calls say how the server should answer them (at
// once, never, or when the test releases them), and whose data items are
// derived from a seed so that every byte of a result can be checked.
//
// The program borrows NFSv3's program and version numbers and the layout
// of its READ result (RFC 1813 §3.3.6): RPC-over-RDMA servers place the
// DDP-eligible items of the NFS binding (RFC 8267 §3) in Write chunks, so
// the suite's READ data travels there as real READ data does. TCPServer
// serves the Handler over TCP with record marking; xprttest.Server serves
// it over RDMA (on the simulated fabric or a real device).
package sunrpctest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sync"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// The program's numbers.
const (
	Prog      = 100003 // NFS's, for RFC 8267 placement of ProcRead's data
	Vers      = 3
	ProcNull  = 0
	ProcEcho  = 1 // args: control, opaque data; results: status, opaque data
	ProcRead  = 6 // args: control, seed, count; results: status, no attributes, count, eof, data (DDP-eligible)
	ProcWrite = 7 // args: control, opaque pad, seed, data (DDP-eligible), tail word; results: status, count, match, crc32, tail word
)

// Action says what the server does with a call.
type Action uint32

const (
	// Answer replies at once.
	Answer Action = iota
	// Drop never replies.
	Drop
	// Hold replies when the test releases the call (Handler.Release,
	// Handler.ReleaseArrival) and never if it does not.
	Hold
)

// Control is the first part of every call's arguments but NULL's: a tag
// the test picks to find the call on the server, and what the server does.
type Control struct {
	Tag    uint32
	Action Action
}

// Pattern returns n bytes derived from seed: every 4-byte word differs
// from the same word of another seed's pattern, so data from the wrong
// call never passes for the right one.
func Pattern(seed uint32, n int) []byte {
	b := make([]byte, n+3)
	x := seed*2654435761 + 1
	for i := 0; i < n; i += 4 {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		binary.BigEndian.PutUint32(b[i:], x^seed^uint32(i))
	}
	return b[:n:n]
}

// Handler serves the program. Its ServeRPC has the shape of
// xprttest.Handler. It is safe for concurrent use.
type Handler struct {
	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every arrival and every served call
	arrivals map[uint32]int
	served   map[uint32]int
	released map[uint32]bool             // every arrival of the tag, now and later
	gates    map[[2]uint32]chan struct{} // (tag, arrival) → closed when released
	closed   bool
	calls    int
}

// NewHandler returns a Handler with no call released.
func NewHandler() *Handler {
	return &Handler{changed: make(chan struct{}), arrivals: map[uint32]int{}, served: map[uint32]int{},
		released: map[uint32]bool{}, gates: map[[2]uint32]chan struct{}{}}
}

func (h *Handler) notifyLocked() {
	close(h.changed)
	h.changed = make(chan struct{})
}

func (h *Handler) gateLocked(tag uint32, n int) chan struct{} {
	k := [2]uint32{tag, uint32(n)}
	g := h.gates[k]
	if g == nil {
		g = make(chan struct{})
		h.gates[k] = g
		if h.released[tag] || h.closed {
			close(g)
		}
	}
	return g
}

// Release releases every held arrival of tag, now and later.
func (h *Handler) Release(tag uint32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released[tag] {
		return
	}
	h.released[tag] = true
	for k, g := range h.gates {
		if k[0] == tag {
			select {
			case <-g:
			default:
				close(g)
			}
		}
	}
}

// ReleaseArrival releases the n-th arrival (from 1) of tag only.
func (h *Handler) ReleaseArrival(tag uint32, n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := h.gateLocked(tag, n)
	select {
	case <-g:
	default:
		close(g)
	}
}

// Close releases every held call, now and later, as dropped: no reply is
// sent for them. Call it before closing the server, whose teardown waits
// for the calls in progress.
func (h *Handler) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	for _, g := range h.gates {
		select {
		case <-g:
		default:
			close(g)
		}
	}
}

func (h *Handler) waitFor(ctx context.Context, what string, cond func() bool) error {
	for {
		h.mu.Lock()
		ok, ch := cond(), h.changed
		h.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("sunrpctest: waiting for %s: %w", what, ctx.Err())
		}
	}
}

// WaitArrival waits until the n-th call with tag has reached the handler.
func (h *Handler) WaitArrival(ctx context.Context, tag uint32, n int) error {
	return h.waitFor(ctx, fmt.Sprintf("arrival %d of tag %d", n, tag), func() bool { return h.arrivals[tag] >= n })
}

// WaitServed waits until the handler has returned for n calls with tag
// (answered or dropped).
func (h *Handler) WaitServed(ctx context.Context, tag uint32, n int) error {
	return h.waitFor(ctx, fmt.Sprintf("%d served calls of tag %d", n, tag), func() bool { return h.served[tag] >= n })
}

// WaitCalls waits until n calls (of any procedure) have reached the
// handler.
func (h *Handler) WaitCalls(ctx context.Context, n int) error {
	return h.waitFor(ctx, fmt.Sprintf("%d calls", n), func() bool { return h.calls >= n })
}

// Arrivals returns how many calls with tag reached the handler.
func (h *Handler) Arrivals(tag uint32) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.arrivals[tag]
}

// Calls returns how many calls reached the handler.
func (h *Handler) Calls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls
}

// ServeRPC answers one call message with its reply message, or nil for no
// reply.
func (h *Handler) ServeRPC(call []byte) []byte {
	d := sunrpc.NewDecoder(call)
	ch, err := sunrpc.DecodeCall(d)
	if err != nil {
		return nil
	}
	h.mu.Lock()
	h.calls++
	h.notifyLocked()
	h.mu.Unlock()
	rh := &sunrpc.ReplyHeader{XID: ch.XID, Stat: sunrpc.MsgAccepted, Verf: sunrpc.AuthNone, Accept: sunrpc.Success}
	if ch.Prog != Prog || ch.Vers != Vers {
		rh.Accept = sunrpc.ProgUnavail
		return sunrpc.AppendReply(nil, rh)
	}
	if ch.Proc == ProcNull {
		return sunrpc.AppendReply(nil, rh)
	}
	ctl := Control{Tag: d.Uint32(), Action: Action(d.Uint32())}
	if d.Err() != nil {
		rh.Accept = sunrpc.GarbageArgs
		return sunrpc.AppendReply(nil, rh)
	}
	h.mu.Lock()
	h.arrivals[ctl.Tag]++
	n := h.arrivals[ctl.Tag]
	gate := h.gateLocked(ctl.Tag, n)
	h.notifyLocked()
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.served[ctl.Tag]++
		h.notifyLocked()
		h.mu.Unlock()
	}()
	switch ctl.Action {
	case Drop:
		return nil
	case Hold:
		<-gate
		h.mu.Lock()
		closed := h.closed
		h.mu.Unlock()
		if closed {
			return nil
		}
	}
	res := sunrpc.AppendReply(nil, rh)
	switch ch.Proc {
	case ProcEcho:
		data := d.Opaque(-1)
		if d.Err() != nil {
			return garbage(rh)
		}
		res = sunrpc.AppendUint32(res, 0)
		return sunrpc.AppendOpaque(res, data)
	case ProcRead:
		seed, count := d.Uint32(), d.Uint32()
		if d.Err() != nil || count > 64<<20 {
			return garbage(rh)
		}
		res = sunrpc.AppendUint32(res, 0)     // status
		res = sunrpc.AppendBool(res, false)   // no attributes
		res = sunrpc.AppendUint32(res, count) // count
		res = sunrpc.AppendBool(res, true)    // eof
		return sunrpc.AppendOpaque(res, Pattern(seed, int(count)))
	case ProcWrite:
		d.Opaque(-1) // pad
		seed := d.Uint32()
		data := d.Opaque(-1)
		tail := d.Uint32()
		if d.Err() != nil {
			return garbage(rh)
		}
		res = sunrpc.AppendUint32(res, 0)
		res = sunrpc.AppendUint32(res, uint32(len(data)))
		res = sunrpc.AppendBool(res, bytes.Equal(data, Pattern(seed, len(data))))
		res = sunrpc.AppendUint32(res, crc32.ChecksumIEEE(data))
		return sunrpc.AppendUint32(res, tail)
	}
	rh.Accept = sunrpc.ProcUnavail
	return sunrpc.AppendReply(nil, rh)
}

func garbage(rh *sunrpc.ReplyHeader) []byte {
	rh.Accept = sunrpc.GarbageArgs
	return sunrpc.AppendReply(nil, rh)
}

// callHead is the RPC call header of one of the program's procedures.
func callHead(xid, proc uint32) []byte {
	return sunrpc.AppendCall(nil, &sunrpc.CallHeader{XID: xid, Prog: Prog, Vers: Vers, Proc: proc, Cred: sunrpc.AuthNone, Verf: sunrpc.AuthNone})
}

func appendControl(b []byte, c Control) []byte {
	return sunrpc.AppendUint32(sunrpc.AppendUint32(b, c.Tag), uint32(c.Action))
}

// NullRequest is a NULL call.
func NullRequest(xid uint32) *sunrpc.Request {
	return &sunrpc.Request{XID: xid, Head: callHead(xid, ProcNull), MaxReply: sunrpc.MaxReplyHeader}
}

// EchoRequest is an ECHO of data, sent inline in Head (a long call when it
// does not fit the transport's inline size) and answered inline (a long
// reply likewise).
func EchoRequest(xid uint32, c Control, data []byte) *sunrpc.Request {
	b := appendControl(callHead(xid, ProcEcho), c)
	b = sunrpc.AppendOpaque(b, data)
	return &sunrpc.Request{XID: xid, Head: b, MaxReply: sunrpc.MaxReplyHeader + 8 + sunrpc.RoundUp(len(data))}
}

// ReadRequest is a READ of count bytes of Pattern(seed) into replyBulk
// (len(replyBulk) >= count; nil sends the data inline).
func ReadRequest(xid uint32, c Control, seed uint32, count int, replyBulk []byte) *sunrpc.Request {
	b := appendControl(callHead(xid, ProcRead), c)
	b = sunrpc.AppendUint32(sunrpc.AppendUint32(b, seed), uint32(count))
	return &sunrpc.Request{XID: xid, Head: b, ReplyBulk: replyBulk, MaxReply: sunrpc.MaxReplyHeader + 20 + sunrpc.RoundUp(max(count, len(replyBulk)))}
}

// WriteRequest is a WRITE of data (the DDP-eligible item, in Bulk) with
// padLen bytes of opaque padding in Head before it (a large Head makes a
// long call) and a tail word after it.
func WriteRequest(xid uint32, c Control, padLen int, seed uint32, data []byte, tail uint32) *sunrpc.Request {
	b := appendControl(callHead(xid, ProcWrite), c)
	b = sunrpc.AppendOpaque(b, make([]byte, padLen))
	b = sunrpc.AppendUint32(b, seed)
	b = sunrpc.AppendUint32(b, uint32(len(data)))
	return &sunrpc.Request{XID: xid, Head: b, Bulk: data, Tail: sunrpc.AppendUint32(nil, tail), MaxReply: sunrpc.MaxReplyHeader + 20}
}

// results decodes an accepted, successful reply to xid and its status word.
func results(rep *sunrpc.Reply, xid uint32) (*sunrpc.Decoder, error) {
	if rep == nil {
		return nil, errors.New("nil reply")
	}
	d := sunrpc.NewBulkDecoder(rep.Inline, rep.Bulk)
	rh, err := sunrpc.DecodeReply(d)
	if err != nil {
		return nil, err
	}
	if rh.XID != xid {
		return nil, fmt.Errorf("reply carries xid %#x, want %#x", rh.XID, xid)
	}
	if err := rh.Err(); err != nil {
		return nil, err
	}
	if st := d.Uint32(); st != 0 || d.Err() != nil {
		return nil, fmt.Errorf("status %d (%v)", st, d.Err())
	}
	return d, nil
}

// CheckNull checks the reply to a NULL call.
func CheckNull(rep *sunrpc.Reply, xid uint32) error {
	if rep == nil {
		return errors.New("nil reply")
	}
	d := sunrpc.NewBulkDecoder(rep.Inline, rep.Bulk)
	rh, err := sunrpc.DecodeReply(d)
	if err == nil && rh.XID != xid {
		err = fmt.Errorf("reply carries xid %#x, want %#x", rh.XID, xid)
	}
	if err == nil {
		err = rh.Err()
	}
	return err
}

// CheckEcho checks the reply to an ECHO of data.
func CheckEcho(rep *sunrpc.Reply, xid uint32, data []byte) error {
	d, err := results(rep, xid)
	if err != nil {
		return err
	}
	got := d.Opaque(-1)
	if d.Err() != nil {
		return d.Err()
	}
	if !bytes.Equal(got, data) {
		return fmt.Errorf("echo of %d bytes came back as %d different bytes (first difference at %d)", len(data), len(got), firstDiff(got, data))
	}
	return nil
}

// CheckRead checks the reply to a READ of count bytes of Pattern(seed).
func CheckRead(rep *sunrpc.Reply, xid, seed uint32, count int) error {
	d, err := results(rep, xid)
	if err != nil {
		return err
	}
	d.Bool()
	n := d.Uint32()
	d.Bool()
	data := d.Bulk(-1)
	if d.Err() != nil {
		return d.Err()
	}
	want := Pattern(seed, count)
	if int(n) != count || !bytes.Equal(data, want) {
		return fmt.Errorf("READ of %d bytes of seed %d returned count %d and %d bytes that differ from byte %d", count, seed, n, len(data), firstDiff(data, want))
	}
	return nil
}

// CheckWrite checks the reply to a WRITE of Pattern(seed) data.
func CheckWrite(rep *sunrpc.Reply, xid uint32, n int, tail uint32) error {
	d, err := results(rep, xid)
	if err != nil {
		return err
	}
	count, match := d.Uint32(), d.Bool()
	d.Uint32()
	gotTail := d.Uint32()
	if d.Err() != nil {
		return d.Err()
	}
	if int(count) != n || !match || gotTail != tail {
		return fmt.Errorf("WRITE of %d bytes: server saw %d bytes, pattern match %v, tail %#x (want %#x)", n, count, match, gotTail, tail)
	}
	return nil
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
