package chunks

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// checkPlan checks every invariant of a built plan, restating the rules
// independently of Build: the Send fits, the header size is what the wire
// format says, segments respect the limits, the chosen way is the first that
// fits, and a responder following RFC 8166 rebuilds exactly the call
// message.
func checkPlan(t *testing.T, req *Request, lim Limits, p *Plan) {
	t.Helper()
	l, err := lim.normalized()
	if err != nil {
		t.Fatal(err)
	}
	head, bulk, tail := len(req.Head), len(req.Bulk), len(req.Tail)
	pad := (4 - bulk%4) % 4
	msg := slices.Concat(req.Head, req.Bulk, make([]byte, pad), req.Tail)

	// Header: 4 fixed words; per Read segment 6 words; the Write list's one
	// chunk 2 words + 4 per segment; the Reply chunk 2 words + 4 per
	// segment, or 1 word when absent; a terminator word per list.
	words := 4 + 6*len(p.ReadSegments) + 1 + 1
	if len(p.WriteSegments) > 0 {
		words += 2 + 4*len(p.WriteSegments)
	}
	if len(p.ReplySegments) > 0 {
		words += 2 + 4*len(p.ReplySegments)
	} else {
		words++
	}
	if p.CallHeaderLen != 4*words {
		t.Errorf("CallHeaderLen %d, want %d", p.CallHeaderLen, 4*words)
	}
	sendLen := p.CallHeaderLen
	for _, r := range p.Send {
		sendLen += r.Len
	}
	if p.SendLen != sendLen || p.SendLen > l.InlineSend {
		t.Errorf("SendLen %d (ranges say %d), inline send %d", p.SendLen, sendLen, l.InlineSend)
	}
	for _, segs := range [][]Range{p.ReadSegments, p.WriteSegments, p.ReplySegments} {
		if len(segs) > l.MaxSegments {
			t.Errorf("%d segments, limit %d", len(segs), l.MaxSegments)
		}
		for _, s := range segs {
			if s.Len <= 0 || s.Len > l.MaxSegmentSize {
				t.Errorf("segment %+v, max %d", s, l.MaxSegmentSize)
			}
		}
	}

	// The responder's view of the call (RFC 8166 §3.4–3.5).
	var got []byte
	inline := p.AppendSend(nil, req)
	var chunk []byte
	for _, s := range p.ReadSegments {
		chunk = req.AppendRange(chunk, s)
	}
	switch p.Call {
	case CallInline:
		if p.Type != RDMAMsg || len(p.ReadSegments) != 0 {
			t.Errorf("inline call: type %v, %d read segments", p.Type, len(p.ReadSegments))
		}
		got = inline
	case CallReadChunk:
		if p.Type != RDMAMsg || p.Position != head || p.Position%4 != 0 {
			t.Errorf("read chunk: type %v, position %d, head %d", p.Type, p.Position, head)
		}
		// No pad in the chunk (RFC 8166 XDR roundup; what knfsd expects):
		// the responder inserts the roundup and the inline part continues
		// XDR-aligned.
		if len(chunk) != bulk {
			t.Errorf("Read chunk carries %d bytes for a %d-byte item", len(chunk), bulk)
		}
		got = slices.Concat(inline[:p.Position], chunk, make([]byte, (4-len(chunk)%4)%4), inline[p.Position:])
	case CallPositionZero:
		if p.Type != RDMANoMsg || p.Position != 0 || len(p.Send) != 0 {
			t.Errorf("position zero: type %v, position %d, %d send ranges", p.Type, p.Position, len(p.Send))
		}
		got = chunk
	default:
		t.Fatalf("call mode %v", p.Call)
	}
	if !bytes.Equal(got, msg) {
		t.Errorf("responder rebuilds %d bytes that differ from the %d-byte call", len(got), len(msg))
	}

	// The first way that fits is taken.
	replyLists := p.CallHeaderLen - 4*(4+6*len(p.ReadSegments)+1)
	fitsInline := 4*(4+1)+replyLists+len(msg) <= l.InlineSend
	forced := l.DDPThreshold > 0 && bulk > 0 && bulk >= l.DDPThreshold
	if p.Call != CallInline && fitsInline && !forced {
		t.Errorf("%v although the call fits inline", p.Call)
	}
	if p.Call == CallPositionZero && bulk > 0 {
		n := segmentCount(bulk, l.MaxSegmentSize)
		if n <= l.MaxSegments && 4*(4+6*n+1)+replyLists+head+tail <= l.InlineSend {
			t.Errorf("position zero although a Read chunk fits")
		}
	}

	// The reply.
	maxReply := (req.MaxReply + 3) &^ 3
	if len(p.WriteSegments) > 0 && len(p.ReplySegments) > 0 {
		t.Errorf("both a Write chunk and a Reply chunk")
	}
	if p.ReplyHeaderLen != p.CallHeaderLen-4*6*len(p.ReadSegments) {
		t.Errorf("ReplyHeaderLen %d, call header %d", p.ReplyHeaderLen, p.CallHeaderLen)
	}
	switch p.Reply {
	case ReplyInline:
		if len(p.WriteSegments)+len(p.ReplySegments) != 0 || 28+maxReply > l.InlineRecv {
			t.Errorf("inline reply of up to %d bytes, inline receive %d", maxReply, l.InlineRecv)
		}
	case ReplyWriteChunk:
		if n := coverage(t, p.WriteSegments, BufReplyBulk); n != req.ReplyBulk {
			t.Errorf("Write chunk covers %d bytes, ReplyBulk %d", n, req.ReplyBulk)
		}
		if p.ReplyHeaderLen+maxReply-(req.ReplyBulk+3)&^3 > l.InlineRecv {
			t.Errorf("the rest of the reply does not fit inline")
		}
	case ReplyInReplyChunk:
		if n := coverage(t, p.ReplySegments, BufReplyChunk); n != maxReply {
			t.Errorf("Reply chunk covers %d bytes, MaxReply %d", n, req.MaxReply)
		}
		if 28+maxReply <= l.InlineRecv {
			t.Errorf("Reply chunk although the reply fits inline")
		}
	}
}

// coverage checks that segs cover buf contiguously from offset 0 and
// returns how many bytes.
func coverage(t *testing.T, segs []Range, buf Buffer) int {
	t.Helper()
	off := 0
	for _, s := range segs {
		if s.Buf != buf || s.Off != off {
			t.Errorf("segment %+v, want %v at %d", s, buf, off)
		}
		off += s.Len
	}
	return off
}

func randLimits(r *rand.Rand) Limits {
	l := Limits{InlineSend: 28 + r.IntN(8192), InlineRecv: 28 + r.IntN(8192)}
	if r.IntN(4) == 0 {
		l.InlineSend, l.InlineRecv = 0, 0
	}
	switch r.IntN(3) {
	case 0:
		l.MaxSegmentSize = 1 + r.IntN(8192)
		if r.IntN(8) != 0 {
			l.MaxSegmentSize += 512 // mostly realistic sizes; tiny ones now and then
		}
	case 1:
		l.MaxSegmentSize = 1 << 20
	}
	if r.IntN(2) == 0 {
		l.MaxSegments = 1 + r.IntN(32)
	}
	if r.IntN(4) == 0 {
		l.DDPThreshold = r.IntN(4096)
	}
	if r.IntN(4) == 0 {
		l.GatherMin, l.MaxSendSGEs = r.IntN(2048), r.IntN(6)
	}
	return l
}

func randRequest(r *rand.Rand) *Request {
	head := 4 * (1 + r.IntN(2500))
	bulk := 0
	switch r.IntN(4) {
	case 1, 2:
		bulk = r.IntN(9000)
	case 3:
		bulk = r.IntN(300000)
	}
	tail := 4 * r.IntN(50)
	replyBulk := 0
	switch r.IntN(4) {
	case 1:
		replyBulk = r.IntN(9000)
	case 2:
		replyBulk = r.IntN(300000)
	}
	return mkReq(head, bulk, tail, replyBulk, replyBulk+24+r.IntN(10000))
}

// TestPlanProperties: for random sizes and limits the plan never exceeds the
// inline send size and the responder rebuilds the exact call; and the
// reply, however the server chooses to return it, reaches the RPC layer
// byte for byte.
func TestPlanProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(8166, 8267))
	cases := 3000
	if raceEnabled || testing.Short() {
		cases = 500
	}
	var p Plan
	built := 0
	for i := range cases {
		req, lim := randRequest(r), randLimits(r)
		if err := p.Build(req, lim); err != nil {
			if !errors.Is(err, ErrTooManySegments) && !errors.Is(err, ErrHeaderTooLarge) {
				t.Fatalf("case %d: Build(%d/%d/%d, %+v): %v", i, len(req.Head), len(req.Bulk), len(req.Tail), lim, err)
			}
			continue
		}
		built++
		checkPlan(t, req, lim, &p)
		checkReplyRoundTrip(t, r, req, &p)
		if t.Failed() {
			t.Fatalf("case %d: request %d/%d/%d reply %d/%d, limits %+v, plan %+v", i,
				len(req.Head), len(req.Bulk), len(req.Tail), req.ReplyBulk, req.MaxReply, lim, p)
		}
	}
	if built < cases/2 {
		t.Errorf("only %d of %d random cases planned", built, cases)
	}
}

// checkReplyRoundTrip plays a server answering p with a random reply in
// every way the plan allows and checks what Rebuild hands the RPC layer.
func checkReplyRoundTrip(t *testing.T, r *rand.Rand, req *Request, p *Plan) {
	t.Helper()
	maxReply := (req.MaxReply + 3) &^ 3
	// A reply: prefix (ending in the bulk's length word), bulk data, pad,
	// suffix; all within MaxReply.
	d := 0
	if req.ReplyBulk > 0 {
		d = r.IntN(req.ReplyBulk + 1)
	}
	room := maxReply - (d+3)&^3
	pre := 4 * (1 + r.IntN(room/4))
	suf := 4 * r.IntN((room-pre)/4+1)
	prefix, data, suffix := fill(pre, 0x40), fill(d, 0x50), fill(suf, 0x60)
	whole := slices.Concat(prefix, data, make([]byte, (4-d%4)%4), suffix)

	var in Received
	var replyBulk, replyChunk []byte
	switch {
	case p.Reply == ReplyWriteChunk && r.IntN(4) != 0:
		// Server uses the Write chunk: data into the segments in order,
		// lengths reported, data and pad left out of the inline part.
		replyBulk = make([]byte, req.ReplyBulk)
		lens := make([]uint32, len(p.WriteSegments))
		left := data
		for i, s := range p.WriteSegments {
			n := copy(replyBulk[s.Off:s.Off+s.Len], left)
			lens[i], left = uint32(n), left[n:]
		}
		in = Received{Type: RDMAMsg, Inline: slices.Concat(prefix, suffix), WriteList: [][]uint32{lens}}
	case p.Reply == ReplyInReplyChunk && r.IntN(4) != 0:
		replyChunk = make([]byte, maxReply)
		lens := make([]uint32, len(p.ReplySegments))
		left := whole
		for i, s := range p.ReplySegments {
			n := copy(replyChunk[s.Off:s.Off+s.Len], left)
			lens[i], left = uint32(n), left[n:]
		}
		in = Received{Type: RDMANoMsg, ReplyChunk: lens}
	default:
		// Inline, whatever was offered; an offered Write chunk comes back
		// with zero lengths.
		in = Received{Type: RDMAMsg, Inline: whole}
		if len(p.WriteSegments) > 0 {
			in.WriteList = [][]uint32{make([]uint32, len(p.WriteSegments))}
		}
	}
	rep, err := p.Rebuild(in, replyBulk, replyChunk)
	if err != nil {
		t.Errorf("Rebuild: %v", err)
		return
	}
	got := rep.Message
	if rep.Bulk != nil {
		// The RPC layer reads the data from its own buffer after the length
		// word; the inline part continues after the data's roundup.
		got = slices.Concat(rep.Message[:pre], rep.Bulk, make([]byte, (4-len(rep.Bulk)%4)%4), rep.Message[pre:])
	}
	if !bytes.Equal(got, whole) {
		t.Errorf("RPC layer sees %d bytes that differ from the %d-byte reply (%+v)", len(got), len(whole), rep)
	}
}

// FuzzBuild: Build never panics, and whatever it plans holds every
// invariant.
func FuzzBuild(f *testing.F) {
	f.Add(uint16(39), uint32(MiB), uint16(2), uint32(0), uint32(148), uint16(4096), uint16(4096), uint32(MiB), uint8(8), uint16(0))
	f.Add(uint16(1025), uint32(4095), uint16(2), uint32(0), uint32(148), uint16(4096), uint16(4096), uint32(0), uint8(0), uint16(0))
	f.Add(uint16(35), uint32(0), uint16(0), uint32(MiB), uint32(MiB+128), uint16(1024), uint16(1024), uint32(4096), uint8(0), uint16(512))
	f.Add(uint16(40), uint32(0), uint16(0), uint32(0), uint32(65536), uint16(0), uint16(0), uint32(16384), uint8(4), uint16(0))
	f.Fuzz(func(t *testing.T, headWords uint16, bulk uint32, tailWords uint16, replyBulk, extra uint32,
		send, recv uint16, maxSeg uint32, maxSegs uint8, ddp uint16) {
		bulk %= 4 * MiB
		replyBulk %= 4 * MiB
		extra %= 4 * MiB
		if maxSeg != 0 && maxSeg < 64 {
			maxSeg = 64 // keeps segment lists short enough to check quickly
		}
		req := mkReq(4*(1+int(headWords)%4000), int(bulk), 4*(int(tailWords)%256), int(replyBulk), int(replyBulk)+1+int(extra))
		lim := Limits{InlineSend: int(send), InlineRecv: int(recv), MaxSegmentSize: int(maxSeg),
			MaxSegments: int(maxSegs), DDPThreshold: int(ddp)}
		var p Plan
		if err := p.Build(req, lim); err != nil {
			if !errors.Is(err, ErrTooManySegments) && !errors.Is(err, ErrHeaderTooLarge) && !errors.Is(err, ErrInvalidLimits) {
				t.Fatalf("Build: %v", err)
			}
			return
		}
		checkPlan(t, req, lim, &p)
	})
}
