package sunrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"syscall"
	"time"
)

// MaxReplyHeader bounds the size of an accepted reply's header (RFC 5531 §9:
// xid, msg_type, reply_stat, a verifier of up to MaxAuthBody bytes, accept_stat
// and mismatch_info).
const MaxReplyHeader = 4 + 4 + 4 + (4 + 4 + MaxAuthBody) + 4 + 8

// RetryPolicy is the nfs(5) timeo/retrans/hard/soft behaviour layered over a
// Transport. The zero policy sends each call once and waits until its context is
// done, leaving retransmission to the transport (the TCP transport retransmits
// pending calls after a reconnect).
type RetryPolicy struct {
	// Timeout (timeo) is how long to wait for the first reply before
	// retransmitting with the same XID; each further try waits one Timeout
	// longer (linear backoff), capped at MaxTimeout. Zero disables retransmission.
	Timeout time.Duration
	// Retrans is the number of retransmissions of a soft policy before the call
	// fails with *TimeoutError.
	Retrans int
	// Hard retransmits until the call's context is done instead.
	Hard bool
	// MaxTimeout caps the per-try wait; zero means 600 s as in nfs(5).
	MaxTimeout time.Duration
}

// TimeoutError is a call given up by a soft RetryPolicy (nfs(5) "soft": the
// ETIMEDOUT of a major timeout). errors.Is(err, syscall.ETIMEDOUT) holds.
type TimeoutError struct {
	Prog, Vers, Proc uint32
	Tries            int
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("sunrpc: prog %d vers %d proc %d: no reply after %d tries", e.Prog, e.Vers, e.Proc, e.Tries)
}

// Unwrap returns syscall.ETIMEDOUT.
func (e *TimeoutError) Unwrap() error { return syscall.ETIMEDOUT }

// Timeout reports true, as net.Error does.
func (e *TimeoutError) Timeout() bool { return true }

// ClientConfig configures a Client.
type ClientConfig struct {
	Prog, Vers uint32
	Cred       OpaqueAuth // zero: AUTH_NONE
	Verf       OpaqueAuth // zero: AUTH_NONE
	XIDs       *XIDSource // nil: a new one; share one among Clients of one Transport
	Retry      RetryPolicy
	Logger     *slog.Logger // nil: discard
}

// Client makes calls to one program version over a Transport. It is safe for
// concurrent use.
type Client struct {
	t    Transport
	cfg  ClientConfig
	log  *slog.Logger
	xids *XIDSource
}

// NewClient returns a Client for cfg.Prog/cfg.Vers over t. It does not own t:
// closing t is the caller's job (see Close).
func NewClient(t Transport, cfg ClientConfig) (*Client, error) {
	if len(cfg.Cred.Body) > MaxAuthBody || len(cfg.Verf.Body) > MaxAuthBody {
		return nil, fmt.Errorf("sunrpc: credential or verifier body over %d bytes", MaxAuthBody)
	}
	c := &Client{t: t, cfg: cfg, log: cfg.Logger, xids: cfg.XIDs}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.xids == nil {
		c.xids = NewXIDSource()
	}
	return c, nil
}

// Transport returns the Client's transport.
func (c *Client) Transport() Transport { return c.t }

// Close closes the Client's transport.
func (c *Client) Close() error { return c.t.Close() }

// Args is one call's encoded arguments, split as in Request: Head ends with the
// bulk item's length word, Bulk is its unpadded data, Tail follows it. A call
// without a DDP-eligible argument puts everything in Head.
type Args struct {
	Head, Bulk, Tail []byte
	// ReplyBulk is where a DDP-eligible result should land (Request.ReplyBulk).
	ReplyBulk []byte
	// MaxResults bounds the size of the results (after the reply header),
	// bulk included; Client adds MaxReplyHeader for Request.MaxReply.
	MaxResults int
}

// Result is an accepted, successful reply positioned at the procedure's results.
// Byte slices read from it alias the transport's buffers: copy what must outlive
// Release. The Decoder's Bulk reads the DDP-eligible result.
type Result struct {
	*Decoder
	Header ReplyHeader
	reply  *Reply
}

// Release returns the reply's buffers to the transport; idempotent.
func (r *Result) Release() { r.reply.Release() }

// CallError wraps an error of one call with the call's identity.
type CallError struct {
	Prog, Vers, Proc uint32
	XID              uint32
	Err              error
}

func (e *CallError) Error() string {
	return fmt.Sprintf("sunrpc: prog %d vers %d proc %d xid %#08x: %v", e.Prog, e.Vers, e.Proc, e.XID, e.Err)
}

func (e *CallError) Unwrap() error { return e.Err }

// Call sends procedure proc with args and waits for the reply. On success the
// Result is positioned at the results and must be released. Errors: a rejected
// call (*RPCMismatchError, *AuthError), an accept status other than SUCCESS
// (*AcceptError), a malformed reply (*HeaderError, ErrTruncated...), a soft
// timeout (*TimeoutError), the context's error or the transport's, each wrapped
// in a *CallError.
func (c *Client) Call(ctx context.Context, proc uint32, args *Args) (*Result, error) {
	xid := c.xids.Next()
	h := CallHeader{XID: xid, Prog: c.cfg.Prog, Vers: c.cfg.Vers, Proc: proc, Cred: c.cfg.Cred, Verf: c.cfg.Verf}
	if cred, ok := CredentialFrom(ctx); ok && len(cred.Body) <= MaxAuthBody {
		h.Cred = cred
	}
	// The request and its head in one allocation when the head is small
	// (the usual call: a credential and a file handle or two).
	ra := new(requestAlloc)
	head := ra.head[:0]
	if n := 40 + len(h.Cred.Body) + len(h.Verf.Body) + len(args.Head); n > len(ra.head) {
		head = make([]byte, 0, n)
	}
	head = AppendCall(head, &h)
	head = append(head, args.Head...)
	req := &ra.req
	*req = Request{
		XID:       xid,
		Head:      head,
		Bulk:      args.Bulk,
		Tail:      args.Tail,
		ReplyBulk: args.ReplyBulk,
		MaxReply:  MaxReplyHeader + args.MaxResults,
	}
	fail := func(err error) error {
		return &CallError{Prog: h.Prog, Vers: h.Vers, Proc: proc, XID: xid, Err: err}
	}
	rep, err := c.roundTrip(ctx, proc, req)
	if err != nil {
		return nil, fail(err)
	}
	res := new(resultAlloc)
	res.dec = *NewBulkDecoder(rep.Inline, rep.Bulk)
	d := &res.dec
	rh, err := DecodeReply(d)
	if err == nil && rh.XID != xid {
		err = &HeaderError{Reason: fmt.Sprintf("reply xid %#08x for call %#08x", rh.XID, xid)}
	}
	if err == nil {
		err = rh.Err()
	}
	if err != nil {
		rep.Release()
		return nil, fail(err)
	}
	res.Result = Result{Decoder: d, Header: rh, reply: rep}
	return &res.Result, nil
}

// requestAlloc is a call's Request with room for its head: Call makes
// both in one allocation.
type requestAlloc struct {
	req  Request
	head [256]byte
}

// resultAlloc is a Result with its Decoder: Call makes both in one
// allocation.
type resultAlloc struct {
	Result
	dec Decoder
}

// roundTrip applies the retry policy: retransmit with the same XID after
// Timeout, Timeout*2, ... so that the server's duplicate request cache can
// recognise the retransmission.
func (c *Client) roundTrip(ctx context.Context, proc uint32, req *Request) (*Reply, error) {
	p := c.cfg.Retry
	if p.Timeout <= 0 {
		return c.t.RoundTrip(ctx, req)
	}
	maxTimeo := p.MaxTimeout
	if maxTimeo <= 0 {
		maxTimeo = 600 * time.Second
	}
	for try := 0; ; try++ {
		timeo := min(p.Timeout*time.Duration(try+1), maxTimeo)
		tctx, cancel := context.WithTimeout(ctx, timeo)
		rep, err := c.t.RoundTrip(tctx, req)
		timedOut := tctx.Err() != nil
		cancel()
		if err == nil {
			return rep, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !timedOut || !errors.Is(err, context.DeadlineExceeded) {
			return nil, err
		}
		if !p.Hard && try >= p.Retrans {
			return nil, &TimeoutError{Prog: c.cfg.Prog, Vers: c.cfg.Vers, Proc: proc, Tries: try + 1}
		}
		c.log.WarnContext(ctx, "server not responding, retransmitting",
			"prog", c.cfg.Prog, "xid", req.XID, "try", try+2, "timeo", timeo)
	}
}
