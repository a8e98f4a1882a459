package chunks

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

// knfsd is the test bed's server: 4 KiB inline both ways (RFC 8797 private
// data f6ab0e18 01 00 03 03), with a registration limit of 1 MiB segments.
var knfsd = Limits{InlineSend: 4096, InlineRecv: 4096, MaxSegmentSize: 1 << 20, MaxSegments: 8}

const (
	writeHead = 156 // NFSv3 WRITE call up to the data's length word, AUTH_SYS
	readHead  = 140 // NFSv3 READ call
	readRest  = 128 // READ reply without the data: RPC header, status, attributes, count, eof, length word
	MiB       = 1 << 20
)

// pattern is a byte sequence of prime period 251, so a range read from a
// wrong offset differs from the right one.
var pattern []byte

// fill returns n bytes of pattern starting at seed. Built by copying, not
// byte by byte, to keep the race detector fast.
func fill(n int, seed byte) []byte {
	if n == 0 {
		return nil
	}
	if len(pattern) < n+256 {
		period := make([]byte, 251)
		for i := range period {
			period[i] = byte(i)
		}
		pattern = bytes.Repeat(period, (n+256)/251+1)
	}
	b := make([]byte, n)
	copy(b, pattern[seed:])
	return b
}

func mkReq(head, bulk, tail, replyBulk, maxReply int) *Request {
	return &Request{
		Head: fill(head, 0x10), Bulk: fill(bulk, 0x20), Tail: fill(tail, 0x30),
		ReplyBulk: replyBulk, MaxReply: maxReply,
	}
}

func with(l Limits, f func(*Limits)) Limits { f(&l); return l }

func rg(b Buffer, off, n int) Range { return Range{Buf: b, Off: off, Len: n} }

type planWant struct {
	typ      MessageType
	call     CallMode
	pos      int
	send     []Range
	pullUp   bool
	read     []Range
	reply    ReplyMode
	write    []Range
	replyCh  []Range
	callHdr  int
	replyHdr int
	sendLen  int
}

func TestBuild(t *testing.T) {
	tests := []struct {
		name string
		req  *Request
		lim  Limits
		want planWant
	}{
		{
			name: "NULL call inline",
			req:  mkReq(40, 0, 0, 0, 24),
			lim:  knfsd,
			want: planWant{typ: RDMAMsg, call: CallInline, send: []Range{rg(BufHead, 0, 40)},
				reply: ReplyInline, callHdr: 28, replyHdr: 28, sendLen: 68},
		},
		{
			name: "small WRITE inline, aligned data, pulled up",
			req:  mkReq(writeHead, 512, 0, 0, 148),
			lim:  knfsd,
			want: planWant{typ: RDMAMsg, call: CallInline,
				send: []Range{rg(BufHead, 0, writeHead), rg(BufBulk, 0, 512)}, pullUp: true,
				reply: ReplyInline, callHdr: 28, replyHdr: 28, sendLen: 28 + writeHead + 512},
		},
		{
			name: "small WRITE inline, pad between data and tail",
			req:  mkReq(writeHead, 513, 8, 0, 148),
			lim:  knfsd,
			want: planWant{typ: RDMAMsg, call: CallInline,
				send:   []Range{rg(BufHead, 0, writeHead), rg(BufBulk, 0, 513), rg(BufPad, 0, 3), rg(BufTail, 0, 8)},
				pullUp: true, reply: ReplyInline, callHdr: 28, replyHdr: 28, sendLen: 28 + writeHead + 516 + 8},
		},
		{
			name: "WRITE that exactly fills the inline send",
			req:  mkReq(writeHead, 4096-28-writeHead, 0, 0, 148),
			lim:  knfsd,
			want: planWant{typ: RDMAMsg, call: CallInline,
				send: []Range{rg(BufHead, 0, writeHead), rg(BufBulk, 0, 4096-28-writeHead)}, pullUp: true,
				reply: ReplyInline, callHdr: 28, replyHdr: 28, sendLen: 4096},
		},
		{
			name: "WRITE one byte past inline goes to a Read chunk",
			req:  mkReq(writeHead, 4096-28-writeHead+1, 0, 0, 148),
			lim:  knfsd,
			want: planWant{typ: RDMAMsg, call: CallReadChunk, pos: writeHead,
				send: []Range{rg(BufHead, 0, writeHead)}, read: []Range{rg(BufBulk, 0, 4096-28-writeHead+1)},
				reply: ReplyInline, callHdr: 52, replyHdr: 28, sendLen: 52 + writeHead},
		},
		{
			name: "WRITE 1 MiB: Read chunk at len(Head)",
			req:  mkReq(writeHead, MiB, 0, 0, 148),
			lim:  knfsd,
			want: planWant{typ: RDMAMsg, call: CallReadChunk, pos: writeHead,
				send: []Range{rg(BufHead, 0, writeHead)}, read: []Range{rg(BufBulk, 0, MiB)},
				reply: ReplyInline, callHdr: 52, replyHdr: 28, sendLen: 52 + writeHead},
		},
		{
			name: "odd-length bulk with tail: chunk without pad, tail pulled up behind head",
			req:  mkReq(writeHead, MiB+1, 8, 0, 148),
			lim:  knfsd,
			want: planWant{typ: RDMAMsg, call: CallReadChunk, pos: writeHead,
				send:   []Range{rg(BufHead, 0, writeHead), rg(BufTail, 0, 8)},
				pullUp: true, read: []Range{rg(BufBulk, 0, MiB), rg(BufBulk, MiB, 1)},
				reply: ReplyInline, callHdr: 76, replyHdr: 28, sendLen: 76 + writeHead + 8},
		},
		{
			name: "WRITE 1 MiB in 64 KiB segments",
			req:  mkReq(writeHead, MiB, 0, 0, 148),
			lim:  with(knfsd, func(l *Limits) { l.MaxSegmentSize, l.MaxSegments = 64<<10, 16 }),
			want: planWant{typ: RDMAMsg, call: CallReadChunk, pos: writeHead,
				send: []Range{rg(BufHead, 0, writeHead)}, read: appendSplit(nil, BufBulk, 0, MiB, 64<<10),
				reply: ReplyInline, callHdr: 16 + 16*24 + 12, replyHdr: 28, sendLen: 16 + 16*24 + 12 + writeHead},
		},
		{
			name: "SYMLINK path in a Read chunk at the RFC 8166 default inline size",
			req:  mkReq(200, 1000, 0, 0, 260),
			lim:  Limits{},
			want: planWant{typ: RDMAMsg, call: CallReadChunk, pos: 200,
				send: []Range{rg(BufHead, 0, 200)}, read: []Range{rg(BufBulk, 0, 1000)},
				reply: ReplyInline, callHdr: 52, replyHdr: 28, sendLen: 252},
		},
		{
			name: "WRITE whose head and tail alone exceed inline: position zero, pad in the chunk",
			req:  mkReq(4100, 4095, 8, 0, 148),
			lim:  knfsd,
			want: planWant{typ: RDMANoMsg, call: CallPositionZero,
				read:  []Range{rg(BufHead, 0, 4100), rg(BufBulk, 0, 4095), rg(BufPad, 0, 1), rg(BufTail, 0, 8)},
				reply: ReplyInline, callHdr: 16 + 4*24 + 12, replyHdr: 28, sendLen: 16 + 4*24 + 12},
		},
		{
			name: "SETATTR with a long head and no bulk: position zero",
			req:  mkReq(5000, 0, 0, 0, 200),
			lim:  knfsd,
			want: planWant{typ: RDMANoMsg, call: CallPositionZero, read: []Range{rg(BufHead, 0, 5000)},
				reply: ReplyInline, callHdr: 52, replyHdr: 28, sendLen: 52},
		},
		{
			name: "READ 1 MiB: Write chunk, call inline",
			req:  mkReq(readHead, 0, 0, MiB, readRest+MiB),
			lim:  knfsd,
			want: planWant{typ: RDMAMsg, call: CallInline, send: []Range{rg(BufHead, 0, readHead)},
				reply: ReplyWriteChunk, write: []Range{rg(BufReplyBulk, 0, MiB)},
				callHdr: 52, replyHdr: 52, sendLen: 52 + readHead},
		},
		{
			name: "READ 2 MiB+1 in 1 MiB segments",
			req:  mkReq(readHead, 0, 0, 2*MiB+1, readRest+2*MiB+4),
			lim:  knfsd,
			want: planWant{typ: RDMAMsg, call: CallInline, send: []Range{rg(BufHead, 0, readHead)},
				reply:   ReplyWriteChunk,
				write:   []Range{rg(BufReplyBulk, 0, MiB), rg(BufReplyBulk, MiB, MiB), rg(BufReplyBulk, 2*MiB, 1)},
				callHdr: 84, replyHdr: 84, sendLen: 84 + readHead},
		},
		{
			name: "READ 1000 bytes inline",
			req:  mkReq(readHead, 0, 0, 1000, readRest+1000),
			lim:  knfsd,
			want: planWant{typ: RDMAMsg, call: CallInline, send: []Range{rg(BufHead, 0, readHead)},
				reply: ReplyInline, callHdr: 28, replyHdr: 28, sendLen: 28 + readHead},
		},
		{
			name: "READ 1000 bytes with DDPThreshold 512: Write chunk",
			req:  mkReq(readHead, 0, 0, 1000, readRest+1000),
			lim:  with(knfsd, func(l *Limits) { l.DDPThreshold = 512 }),
			want: planWant{typ: RDMAMsg, call: CallInline, send: []Range{rg(BufHead, 0, readHead)},
				reply: ReplyWriteChunk, write: []Range{rg(BufReplyBulk, 0, 1000)},
				callHdr: 52, replyHdr: 52, sendLen: 52 + readHead},
		},
		{
			name: "READLINK at 4 KiB inline: inline",
			req:  mkReq(120, 0, 0, 1024, 120+1024),
			lim:  knfsd,
			want: planWant{typ: RDMAMsg, call: CallInline, send: []Range{rg(BufHead, 0, 120)},
				reply: ReplyInline, callHdr: 28, replyHdr: 28, sendLen: 148},
		},
		{
			name: "READLINK at 1 KiB inline: Write chunk",
			req:  mkReq(120, 0, 0, 1024, 120+1024),
			lim:  Limits{InlineSend: 1024, InlineRecv: 1024},
			want: planWant{typ: RDMAMsg, call: CallInline, send: []Range{rg(BufHead, 0, 120)},
				reply: ReplyWriteChunk, write: []Range{rg(BufReplyBulk, 0, 1024)},
				callHdr: 52, replyHdr: 52, sendLen: 172},
		},
		{
			name: "READDIRPLUS 64 KiB: Reply chunk for the whole reply",
			req:  mkReq(160, 0, 0, 0, 64<<10),
			lim:  knfsd,
			want: planWant{typ: RDMAMsg, call: CallInline, send: []Range{rg(BufHead, 0, 160)},
				reply: ReplyInReplyChunk, replyCh: []Range{rg(BufReplyChunk, 0, 64<<10)},
				callHdr: 48, replyHdr: 48, sendLen: 208},
		},
		{
			name: "Reply chunk rounds MaxReply up to the XDR unit",
			req:  mkReq(160, 0, 0, 0, 64<<10-3),
			lim:  knfsd,
			want: planWant{typ: RDMAMsg, call: CallInline, send: []Range{rg(BufHead, 0, 160)},
				reply: ReplyInReplyChunk, replyCh: []Range{rg(BufReplyChunk, 0, 64<<10)},
				callHdr: 48, replyHdr: 48, sendLen: 208},
		},
		{
			name: "READDIRPLUS 64 KiB in 16 KiB segments",
			req:  mkReq(160, 0, 0, 0, 64<<10),
			lim:  with(knfsd, func(l *Limits) { l.MaxSegmentSize = 16 << 10 }),
			want: planWant{typ: RDMAMsg, call: CallInline, send: []Range{rg(BufHead, 0, 160)},
				reply: ReplyInReplyChunk, replyCh: appendSplit(nil, BufReplyChunk, 0, 64<<10, 16<<10),
				callHdr: 96, replyHdr: 96, sendLen: 256},
		},
		{
			name: "READ whose non-bulk part does not fit inline: only a Reply chunk, whole size",
			req:  mkReq(readHead, 0, 0, 8192, readRest+8192),
			lim:  with(knfsd, func(l *Limits) { l.InlineRecv = 160 }),
			want: planWant{typ: RDMAMsg, call: CallInline, send: []Range{rg(BufHead, 0, readHead)},
				reply: ReplyInReplyChunk, replyCh: []Range{rg(BufReplyChunk, 0, readRest+8192)},
				callHdr: 48, replyHdr: 48, sendLen: 48 + readHead},
		},
		{
			name: "WRITE 1 MiB with a large reply: Read chunk and Reply chunk",
			req:  mkReq(writeHead, MiB, 0, 0, 8192),
			lim:  knfsd,
			want: planWant{typ: RDMAMsg, call: CallReadChunk, pos: writeHead,
				send: []Range{rg(BufHead, 0, writeHead)}, read: []Range{rg(BufBulk, 0, MiB)},
				reply: ReplyInReplyChunk, replyCh: []Range{rg(BufReplyChunk, 0, 8192)},
				callHdr: 72, replyHdr: 48, sendLen: 72 + writeHead},
		},
		{
			name: "GatherMin: inline bulk gets its own SGE",
			req:  mkReq(writeHead, 512, 0, 0, 148),
			lim:  with(knfsd, func(l *Limits) { l.GatherMin, l.MaxSendSGEs = 256, 3 }),
			want: planWant{typ: RDMAMsg, call: CallInline,
				send:  []Range{rg(BufHead, 0, writeHead), rg(BufBulk, 0, 512)},
				reply: ReplyInline, callHdr: 28, replyHdr: 28, sendLen: 28 + writeHead + 512},
		},
		{
			name: "GatherMin, but the pad would need a fourth SGE: pulled up",
			req:  mkReq(writeHead, 513, 0, 0, 148),
			lim:  with(knfsd, func(l *Limits) { l.GatherMin, l.MaxSendSGEs = 256, 3 }),
			want: planWant{typ: RDMAMsg, call: CallInline,
				send:   []Range{rg(BufHead, 0, writeHead), rg(BufBulk, 0, 513), rg(BufPad, 0, 3)},
				pullUp: true, reply: ReplyInline, callHdr: 28, replyHdr: 28, sendLen: 28 + writeHead + 516},
		},
		{
			name: "DDPThreshold moves a small WRITE to a Read chunk",
			req:  mkReq(writeHead, 2000, 0, 0, 148),
			lim:  with(knfsd, func(l *Limits) { l.DDPThreshold = 1024 }),
			want: planWant{typ: RDMAMsg, call: CallReadChunk, pos: writeHead,
				send: []Range{rg(BufHead, 0, writeHead)}, read: []Range{rg(BufBulk, 0, 2000)},
				reply: ReplyInline, callHdr: 52, replyHdr: 28, sendLen: 52 + writeHead},
		},
		{
			name: "DDPThreshold, but the Read chunk header does not fit: stays inline",
			req:  mkReq(4056, 8, 0, 0, 148),
			lim:  with(knfsd, func(l *Limits) { l.DDPThreshold = 8 }),
			want: planWant{typ: RDMAMsg, call: CallInline,
				send: []Range{rg(BufHead, 0, 4056), rg(BufBulk, 0, 8)}, pullUp: true,
				reply: ReplyInline, callHdr: 28, replyHdr: 28, sendLen: 4092},
		},
		{
			name: "DDPThreshold, but the rest of the reply does not fit beside a Write list: stays inline",
			req:  mkReq(readHead, 0, 0, 4, 4064),
			lim:  with(knfsd, func(l *Limits) { l.DDPThreshold = 4 }),
			want: planWant{typ: RDMAMsg, call: CallInline, send: []Range{rg(BufHead, 0, readHead)},
				reply: ReplyInline, callHdr: 28, replyHdr: 28, sendLen: 28 + readHead},
		},
	}
	var p Plan // one Plan for all cases: reuse must leave nothing behind
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := p.Build(tt.req, tt.lim); err != nil {
				t.Fatalf("Build: %v", err)
			}
			got := planWant{p.Type, p.Call, p.Position, p.Send, p.PullUp, p.ReadSegments, p.Reply,
				p.WriteSegments, p.ReplySegments, p.CallHeaderLen, p.ReplyHeaderLen, p.SendLen}
			if !planEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
			checkPlan(t, tt.req, tt.lim, &p)
		})
	}
}

func planEqual(a, b planWant) bool {
	return a.typ == b.typ && a.call == b.call && a.pos == b.pos && a.pullUp == b.pullUp &&
		a.reply == b.reply && a.callHdr == b.callHdr && a.replyHdr == b.replyHdr && a.sendLen == b.sendLen &&
		slices.Equal(a.send, b.send) && slices.Equal(a.read, b.read) &&
		slices.Equal(a.write, b.write) && slices.Equal(a.replyCh, b.replyCh)
}

func TestBuildErrors(t *testing.T) {
	tests := []struct {
		name string
		req  *Request
		lim  Limits
		want error
	}{
		{"empty head", mkReq(0, 0, 0, 0, 24), knfsd, ErrInvalidRequest},
		{"head not XDR aligned", mkReq(42, 0, 0, 0, 24), knfsd, ErrInvalidRequest},
		{"tail not XDR aligned", mkReq(40, 10, 6, 0, 24), knfsd, ErrInvalidRequest},
		{"no MaxReply", mkReq(40, 0, 0, 0, 0), knfsd, ErrInvalidRequest},
		{"negative ReplyBulk", mkReq(40, 0, 0, -1, 24), knfsd, ErrInvalidRequest},
		{"ReplyBulk beyond MaxReply", mkReq(40, 0, 0, 1000, 999), knfsd, ErrInvalidRequest},
		{"negative limit", mkReq(40, 0, 0, 0, 24), with(knfsd, func(l *Limits) { l.MaxSegments = -1 }), ErrInvalidLimits},
		{"inline send below a header", mkReq(40, 0, 0, 0, 24), with(knfsd, func(l *Limits) { l.InlineSend = 24 }), ErrInvalidLimits},
		{
			"Read chunk needs too many segments",
			mkReq(writeHead, 2*MiB, 0, 0, 148), with(knfsd, func(l *Limits) { l.MaxSegments = 1 }), ErrTooManySegments,
		},
		{
			"Write chunk needs too many segments",
			mkReq(readHead, 0, 0, 2*MiB, readRest+2*MiB), with(knfsd, func(l *Limits) { l.MaxSegments = 1 }), ErrTooManySegments,
		},
		{
			"Reply chunk needs too many segments",
			mkReq(160, 0, 0, 0, 64<<10), with(knfsd, func(l *Limits) { l.MaxSegmentSize, l.MaxSegments = 16<<10, 3 }), ErrTooManySegments,
		},
		{
			"position-zero chunk needs too many segments",
			mkReq(5000, 0, 0, 0, 200), with(knfsd, func(l *Limits) { l.MaxSegmentSize, l.MaxSegments = 1024, 4 }), ErrTooManySegments,
		},
		{
			"position-zero header exceeds the inline send",
			mkReq(4000, 0, 0, 0, 200), with(knfsd, func(l *Limits) { l.InlineSend, l.MaxSegmentSize = 100, 1000 }), ErrHeaderTooLarge,
		},
		{
			"Reply chunk header exceeds the inline receive",
			mkReq(160, 0, 0, 0, 64<<10), with(knfsd, func(l *Limits) { l.InlineRecv = 40 }), ErrHeaderTooLarge,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Plan
			if err := p.Build(mkReq(writeHead, MiB, 0, MiB, MiB+readRest), knfsd); err != nil {
				t.Fatal(err)
			}
			err := p.Build(tt.req, tt.lim)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Build = %v, want %v", err, tt.want)
			}
			if len(p.Send)+len(p.ReadSegments)+len(p.WriteSegments)+len(p.ReplySegments) != 0 || p.SendLen != 0 {
				t.Errorf("failed Build left a plan behind: %+v", p)
			}
		})
	}
}

func TestAppendSend(t *testing.T) {
	req := mkReq(writeHead, 513, 8, 0, 148)
	var p Plan
	if err := p.Build(req, knfsd); err != nil {
		t.Fatal(err)
	}
	got := p.AppendSend(nil, req)
	want := slices.Concat(req.Head, req.Bulk, []byte{0, 0, 0}, req.Tail)
	if !slices.Equal(got, want) {
		t.Errorf("AppendSend = %x\nwant %x", got, want)
	}
}

// TestBuildAllocs: a Plan kept per slot plans every call without allocating.
func TestBuildAllocs(t *testing.T) {
	reqs := []*Request{
		mkReq(writeHead, MiB+3, 8, 0, 148),           // Read chunk
		mkReq(readHead, 0, 0, 2*MiB, readRest+2*MiB), // Write chunk
		mkReq(5000, 4095, 8, 0, 64<<10),              // position zero and Reply chunk
		mkReq(40, 0, 0, 0, 24),                       // inline
	}
	lim := with(knfsd, func(l *Limits) { l.MaxSegmentSize = 256 << 10; l.MaxSegments = 16 })
	var p Plan
	buf := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(100, func() {
		for _, r := range reqs {
			if err := p.Build(r, lim); err != nil {
				t.Fatal(err)
			}
			buf = p.AppendSend(buf[:0], r)
		}
	})
	if allocs != 0 {
		t.Errorf("Build allocates %v times per round", allocs)
	}
}
