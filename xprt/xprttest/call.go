package xprttest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nfsrdma/nfsrdma/rpcrdma"
	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/verbs"
)

// maxCallLen bounds an assembled call (Read chunks included): a Read list
// naming more is answered with ERR_CHUNK.
const maxCallLen = 16 << 20

// errChunk is a call whose chunks the server cannot use (ERR_CHUNK).
var errChunk = errors.New("xprttest: unusable chunk lists")

// serveCall serves one received message: decode, pull the Read chunks,
// call the handler, push the reply.
func (c *conn) serveCall(msg []byte, ci CallInfo) {
	st := &c.s.st
	if len(msg) < rpcrdma.FixedHeaderLen {
		// knfsd drops what it cannot even name (out_short).
		st.malformed.Add(1)
		st.dropped.Add(1)
		c.log.Warn("message shorter than a transport header", "len", len(msg))
		return
	}
	ci.XID = binary.BigEndian.Uint32(msg[0:4])
	vers := binary.BigEndian.Uint32(msg[4:8])
	var hdr rpcrdma.Header
	hn, err := hdr.Decode(msg)
	var upe *rpcrdma.UnsupportedProcError
	if (err == nil && hdr.Proc == rpcrdma.ProcError) || (errors.As(err, &upe) && upe.Proc == rpcrdma.ProcDone) {
		// knfsd drops RDMA_DONE and RDMA_ERROR from a requester.
		st.malformed.Add(1)
		st.dropped.Add(1)
		c.log.Warn("dropping a call", "xid", ci.XID, "proc", hdr.Proc)
		return
	}
	if err != nil {
		st.malformed.Add(1)
		code := rpcrdma.ErrCodeChunk
		var ve *rpcrdma.VersionError
		if errors.As(err, &ve) {
			code = rpcrdma.ErrCodeVers
		}
		c.log.Warn("malformed transport header", "xid", ci.XID, "err", err, "reply", code)
		c.sendError(ci.XID, vers, code)
		return
	}
	if obs := c.s.cfg.Observe; obs != nil {
		obs(ci, &hdr)
	}
	call, err := c.assemble(msg[hn:], &hdr)
	if err != nil {
		if errors.Is(err, errChunk) {
			st.malformed.Add(1)
			c.log.Warn("unusable chunks", "xid", ci.XID, "err", err)
			c.sendError(ci.XID, vers, rpcrdma.ErrCodeChunk)
		} else {
			c.fail(err)
		}
		return
	}
	if ch, err := sunrpc.DecodeCall(sunrpc.NewDecoder(call)); err == nil {
		ci.Prog, ci.Vers, ci.Proc = ch.Prog, ch.Vers, ch.Proc
	}

	m := c.s.misbehavior()
	if !m.applies(ci) {
		m = Misbehavior{}
	}
	if m.ReplyVersion != 0 {
		vers = m.ReplyVersion
	}
	switch {
	case m.Error != 0:
		c.sendError(ci.XID, vers, m.Error)
		return
	case m.Disconnect:
		c.fail(fmt.Errorf("xprttest: disconnecting on call %d (misbehaviour)", ci.Seq))
		return
	}

	rep := c.s.cfg.Handler.ServeRPC(call)
	if rep == nil || m.Drop {
		st.dropped.Add(1)
		return
	}
	if m.Delay > 0 {
		t := time.NewTimer(m.Delay)
		select {
		case <-t.C:
		case <-c.done:
			t.Stop()
			return
		}
	}
	c.reply(&hdr, ci, vers, rep, &m)
}

// assemble returns the RPC call message: the inline part (RDMA_MSG) or the
// position-zero Read chunk (RDMA_NOMSG), with every other Read chunk pulled
// and spliced in at its position (RFC 8166 §3.4.5, §3.5.2–3.5.3).
// Positions are offsets in the whole message; the inline part resumes
// after each chunk's data and its implicit XDR pad. Everything is checked
// before anything is pulled.
func (c *conn) assemble(inline []byte, hdr *rpcrdma.Header) ([]byte, error) {
	chunks, err := hdr.ReadChunks(nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errChunk, err)
	}
	var total uint64
	for _, ch := range chunks {
		total += ch.TotalLength()
	}
	if total > maxCallLen {
		return nil, fmt.Errorf("%w: Read chunks of %d bytes", errChunk, total)
	}
	baseLen, rest := len(inline), chunks
	switch hdr.Proc {
	case rpcrdma.ProcMsg:
		for _, ch := range chunks {
			if ch.Position == 0 {
				return nil, fmt.Errorf("%w: RDMA_MSG with a position-zero Read chunk", errChunk)
			}
		}
	case rpcrdma.ProcNoMsg:
		if len(chunks) == 0 || chunks[0].Position != 0 {
			return nil, fmt.Errorf("%w: RDMA_NOMSG without a position-zero Read chunk first", errChunk)
		}
		baseLen, rest = int(chunks[0].TotalLength()), chunks[1:]
	default:
		return nil, fmt.Errorf("%w: %v call", errChunk, hdr.Proc)
	}
	outLen, used := 0, 0
	for _, ch := range rest {
		p := int(ch.Position)
		gap := p - outLen
		if p%4 != 0 || gap < 0 || gap > baseLen-used {
			return nil, fmt.Errorf("%w: Read chunk at position %d does not fit the message", errChunk, p)
		}
		used += gap
		n := int(ch.TotalLength())
		outLen = p + n + sunrpc.Pad(n)
	}
	if baseLen == 0 {
		return nil, fmt.Errorf("%w: empty call", errChunk)
	}

	data, err := c.pull(hdr.Reads, int(total))
	if err != nil {
		return nil, err
	}
	// data holds the chunks' bytes back to back, in Read list order.
	chunkData := make([][]byte, len(chunks))
	for i, ch := range chunks {
		n := int(ch.TotalLength())
		chunkData[i], data = data[:n], data[n:]
	}
	base := inline
	if hdr.Proc == rpcrdma.ProcNoMsg {
		base, chunkData = chunkData[0], chunkData[1:]
	}
	out := make([]byte, 0, outLen+baseLen-used)
	used = 0
	for i, ch := range rest {
		gap := int(ch.Position) - len(out)
		out = append(out, base[used:used+gap]...)
		used += gap
		out = append(out, chunkData[i]...)
		out = append(out, sunrpc.PadBytes(len(chunkData[i]))...)
	}
	return append(out, base[used:]...), nil
}

// pull reads every Read list segment with RDMA READ into one buffer, in
// list order, and returns a copy of the bytes.
func (c *conn) pull(segs []rpcrdma.ReadSegment, total int) ([]byte, error) {
	if total == 0 {
		return nil, nil
	}
	buf, err := newScratch(c.pd, total)
	if err != nil {
		return nil, err
	}
	defer buf.close()
	wrs := make([]verbs.SendWR, 0, len(segs))
	off := 0
	for _, s := range segs {
		if s.Length == 0 {
			continue
		}
		wrs = append(wrs, verbs.SendWR{Opcode: verbs.OpRDMARead, SGL: []verbs.SGE{buf.sge(off, int(s.Length))},
			RemoteAddr: s.Offset, RKey: s.Handle})
		off += int(s.Length)
	}
	if err := c.postAndWait(wrs); err != nil {
		return nil, fmt.Errorf("xprttest: pulling Read chunks: %w", err)
	}
	c.s.st.readBytes.Add(uint64(total))
	return append([]byte(nil), buf.bytes[:total]...), nil
}

// sendError answers a call with RDMA_ERROR (RFC 8166 §4.5) in a plain SEND,
// as knfsd does: the call's xid and rdma_vers word echoed, the grant, and
// ERR_VERS with low = high = 1 or ERR_CHUNK.
func (c *conn) sendError(xid, vers uint32, code rpcrdma.ErrorCode) {
	h := rpcrdma.Header{XID: xid, Credits: c.s.cfg.Credits, Proc: rpcrdma.ProcError, ErrCode: code,
		VersLow: rpcrdma.Version, VersHigh: rpcrdma.Version}
	b, err := h.Append(nil)
	if err != nil {
		c.fail(err)
		return
	}
	binary.BigEndian.PutUint32(b[4:8], vers)
	buf, err := newScratch(c.pd, len(b))
	if err != nil {
		c.fail(err)
		return
	}
	defer buf.close()
	copy(buf.bytes, b)
	c.s.st.rdmaErrors.Add(1)
	c.answered()
	if err := c.postAndWait([]verbs.SendWR{{Opcode: verbs.OpSend, SGL: []verbs.SGE{buf.sge(0, len(b))}}}); err != nil {
		c.fail(err)
	}
}

// answered returns the call's credit: called just before the reply's Send
// is posted, so the client cannot send the next call before it counts.
func (c *conn) answered() {
	c.replied.Store(true)
	c.outstanding.Add(-1)
}

// distinctRKeys returns the distinct handles of the call's chunks.
func distinctRKeys(h *rpcrdma.Header) []uint32 {
	var keys []uint32
	add := func(k uint32) {
		for _, have := range keys {
			if have == k {
				return
			}
		}
		keys = append(keys, k)
	}
	for _, r := range h.Reads {
		add(r.Handle)
	}
	for _, w := range h.Writes {
		for _, s := range w {
			add(s.Handle)
		}
	}
	for _, s := range h.Reply {
		add(s.Handle)
	}
	return keys
}

// layout places byte slices one after another in one registered buffer.
type layout struct {
	parts [][]byte
	offs  []int
	n     int
}

func (l *layout) add(b []byte) int {
	off := l.n
	l.parts = append(l.parts, b)
	l.offs = append(l.offs, off)
	l.n += len(b)
	return off
}

func (l *layout) fill(s *scratch) {
	for i, b := range l.parts {
		copy(s.bytes[l.offs[i]:], b)
	}
}

// writeSegments appends the RDMA WRITEs that place data (at off in the
// layout) into the segments of a chunk, in order, never beyond a segment,
// and returns the bytes written per segment. It reports false if the chunk
// is too small.
func writeSegments(wrs []verbs.SendWR, segs []rpcrdma.Segment, data []byte, off int) ([]verbs.SendWR, []uint32, bool) {
	lens := make([]uint32, len(segs))
	done := 0
	for i, s := range segs {
		k := min(len(data)-done, int(s.Length))
		if k <= 0 {
			continue
		}
		wrs = append(wrs, verbs.SendWR{Opcode: verbs.OpRDMAWrite, SGL: []verbs.SGE{{Offset: uint64(off + done), Length: uint32(k)}},
			RemoteAddr: s.Offset, RKey: s.Handle})
		lens[i] = uint32(k)
		done += k
	}
	return wrs, lens, done == len(data)
}

// reply sends the reply rep to the call hdr: DDP of an NFSv3 READ or
// READLINK result into the Write chunk, inline or in the Reply chunk, then
// the Send, with the misbehaviour m applied.
func (c *conn) reply(call *rpcrdma.Header, ci CallInfo, vers uint32, rep []byte, m *Misbehavior) {
	st := &c.s.st
	h := rpcrdma.Header{XID: call.XID, Credits: c.s.cfg.Credits, Proc: rpcrdma.ProcMsg}
	var (
		lay        layout
		wrs        []verbs.SendWR
		payloadLen int
		replyLen   int
	)
	whole := rep
	alwaysReplyChunk := c.s.cfg.ReplyChunk == ReplyChunkAlways && call.HasReply

	// The Write list echoed: every chunk and segment, lengths set to what
	// was written (RFC 8166 §3.4.6, §4.3.2).
	h.Writes = make([]rpcrdma.WriteChunk, len(call.Writes))
	for i, w := range call.Writes {
		h.Writes[i] = append(rpcrdma.WriteChunk(nil), w...)
		for j := range h.Writes[i] {
			h.Writes[i][j].Length = 0
		}
	}
	if len(call.Writes) > 0 && !alwaysReplyChunk && ci.Prog == nfsProgram && ci.Vers == 3 {
		if off, n, ok := ddpResult(rep, ci.Proc); ok && n > 0 {
			payload := rep[off : off+n]
			var lens []uint32
			var fits bool
			pOff := lay.add(payload)
			wrs, lens, fits = writeSegments(wrs, call.Writes[0], payload, pOff)
			if !fits {
				st.malformed.Add(1)
				c.log.Warn("DDP result larger than the Write chunk", "xid", call.XID, "len", n,
					"chunk", call.Writes[0].TotalLength())
				c.sendError(call.XID, vers, rpcrdma.ErrCodeChunk)
				return
			}
			for j, k := range lens {
				h.Writes[0][j].Length = k
			}
			payloadLen = n
			// The inline reply keeps the length word, loses data and pad.
			end := min(off+n+sunrpc.Pad(n), len(rep))
			rep = append(append([]byte(nil), rep[:off]...), rep[end:]...)
		}
	}
	if m.OverstateWrite > 0 && len(h.Writes) > 0 && len(h.Writes[0]) > 0 {
		h.Writes[0][0].Length = call.Writes[0][0].Length + m.OverstateWrite
	}
	if call.HasReply {
		h.HasReply = true
		h.Reply = append(rpcrdma.WriteChunk(nil), call.Reply...)
		for j := range h.Reply {
			h.Reply[j].Length = 0
		}
	}

	// Inline, or the whole (remaining) reply in the Reply chunk.
	var inline []byte
	switch {
	case alwaysReplyChunk || (call.HasReply && h.Len()+len(rep) > c.sendMax):
		if alwaysReplyChunk {
			rep = whole
		}
		rOff := lay.add(rep)
		var lens []uint32
		var fits bool
		wrs, lens, fits = writeSegments(wrs, call.Reply, rep, rOff)
		if !fits {
			// knfsd fails the send with E2BIG and drops the connection.
			c.fail(fmt.Errorf("xprttest: reply of %d bytes exceeds the Reply chunk of %d (xid %#08x)",
				len(rep), call.Reply.TotalLength(), call.XID))
			return
		}
		for j, k := range lens {
			h.Reply[j].Length = k
		}
		h.Proc = rpcrdma.ProcNoMsg
		replyLen = len(rep)
	case h.Len()+len(rep) > c.sendMax:
		st.malformed.Add(1)
		c.log.Warn("reply does not fit inline and no Reply chunk was offered", "xid", call.XID, "len", len(rep))
		c.sendError(call.XID, vers, rpcrdma.ErrCodeChunk)
		return
	default:
		inline = rep
	}

	hb, err := h.Append(nil)
	if err != nil {
		c.fail(err)
		return
	}
	binary.BigEndian.PutUint32(hb[4:8], vers)
	if len(hb) > c.sendMax {
		c.fail(fmt.Errorf("xprttest: reply header of %d bytes exceeds the inline size %d", len(hb), c.sendMax))
		return
	}
	msg := append(hb, inline...)
	if m.TruncateHeader > 0 {
		msg = msg[:min(m.TruncateHeader, len(hb))]
	}
	sendOff := lay.add(msg)
	var bogusOff int
	if m.UnknownXID || m.DuplicateInvalidate {
		bogus := append([]byte(nil), msg...)
		if len(bogus) >= 4 {
			flipXID(bogus[0:4])
		}
		if len(bogus) >= len(hb)+4 {
			flipXID(bogus[len(hb) : len(hb)+4])
		}
		bogusOff = lay.add(bogus)
	}
	if len(wrs)+2 > sendQueueDepth {
		c.fail(fmt.Errorf("xprttest: reply needs %d WRs", len(wrs)+2))
		return
	}

	buf, err := newScratch(c.pd, lay.n)
	if err != nil {
		c.fail(err)
		return
	}
	defer buf.close()
	lay.fill(buf)
	for i := range wrs {
		wrs[i].SGL[0].MR = buf.mr
	}
	// RDMA WRITEs first, then the Send, on one QP: RC ordering lands the
	// data before the reply (RFC 8166 §3.4.6).
	keys := distinctRKeys(call)
	if m.UnknownXID {
		bogus := verbs.SendWR{Opcode: verbs.OpSend, SGL: []verbs.SGE{buf.sge(bogusOff, len(msg))}}
		if m.InvalidateUnknownXID && len(keys) >= 2 {
			bogus.Opcode, bogus.InvalidateRKey = verbs.OpSendWithInv, keys[len(keys)-1]
			st.foreignInv.Add(1)
		}
		wrs = append(wrs, bogus)
		st.unknownXID.Add(1)
	}
	realReply := !m.UnknownXID || m.ThenReply
	if realReply {
		send := verbs.SendWR{Opcode: verbs.OpSend, SGL: []verbs.SGE{buf.sge(sendOff, len(msg))}}
		if (c.remoteInv || m.SendWithInvUnasked) && len(keys) == 1 && m.TruncateHeader == 0 {
			send.Opcode, send.InvalidateRKey = verbs.OpSendWithInv, keys[0]
			st.sendWithInv.Add(1)
		}
		if stale := c.lastRKey.Load(); m.StaleInvalidate && stale != 0 && !slices.Contains(keys, stale) {
			send.Opcode, send.InvalidateRKey = verbs.OpSendWithInv, stale
			st.staleInv.Add(1)
		}
		wrs = append(wrs, send)
		if m.DuplicateInvalidate && send.Opcode == verbs.OpSendWithInv {
			wrs = append(wrs, verbs.SendWR{Opcode: verbs.OpSendWithInv, InvalidateRKey: send.InvalidateRKey, SGL: []verbs.SGE{buf.sge(bogusOff, len(msg))}})
			st.dupInv.Add(1)
		}
		// A reply the client cannot decode does not return the call's
		// credit: it stays outstanding.
		if m.TruncateHeader == 0 && (m.ReplyVersion == 0 || m.ReplyVersion == rpcrdma.Version) {
			st.replies.Add(1)
			if h.Proc == rpcrdma.ProcNoMsg {
				st.replyChunkReplies.Add(1)
			}
			c.answered()
		}
	}
	st.writeBytes.Add(uint64(payloadLen))
	st.replyBytes.Add(uint64(replyLen))
	if m.OutOfBounds > 0 && !c.outOfBounds(call, m.OutOfBounds) {
		return
	}
	if len(keys) > 0 {
		c.lastRKey.Store(keys[0])
	}
	if err := c.postAndWait(wrs); err != nil {
		c.fail(fmt.Errorf("xprttest: sending the reply to xid %#08x: %w", call.XID, err))
		return
	}
	if m.LateWrite {
		c.lateWrite(call, m.LateWriteDelay)
	}
}

// lateWrite writes into the call's first Write chunk segment (or Reply
// chunk segment) after the reply: the rkey must be invalid by now.
func (c *conn) lateWrite(call *rpcrdma.Header, delay time.Duration) {
	var seg rpcrdma.Segment
	switch {
	case len(call.Writes) > 0 && len(call.Writes[0]) > 0:
		seg = call.Writes[0][0]
	case len(call.Reply) > 0:
		seg = call.Reply[0]
	default:
		return
	}
	n := min(int(seg.Length), 64)
	if n == 0 {
		return
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-c.done:
			t.Stop()
			return
		}
	}
	buf, err := newScratch(c.pd, n)
	if err != nil {
		c.fail(err)
		return
	}
	defer buf.close()
	for i := range buf.bytes {
		buf.bytes[i] = LateWriteByte
	}
	st := &c.s.st
	st.lateWrites.Add(1)
	ch, posted, err := c.post([]verbs.SendWR{{Opcode: verbs.OpRDMAWrite, SGL: []verbs.SGE{buf.sge(0, n)},
		RemoteAddr: seg.Offset, RKey: seg.Handle}})
	if err != nil {
		c.fail(err)
		return
	}
	wcs, _ := c.complete(ch, posted)
	if len(wcs) == 0 {
		return
	}
	switch wc := wcs[0]; wc.Status {
	case verbs.StatusSuccess:
		st.lateLand.Add(1)
		c.log.Warn("late RDMA WRITE landed: the client left the rkey valid", "rkey", fmt.Sprintf("%#x", seg.Handle))
	case verbs.StatusWRFlushErr:
	default:
		st.lateFailed.Add(1)
		c.log.Info("late RDMA WRITE failed as it should", "rkey", fmt.Sprintf("%#x", seg.Handle), "status", wc.Status)
		c.fail(&verbs.CompletionError{Completion: wc, Opcode: verbs.OpRDMAWrite})
	}
}

// outOfBounds accesses n bytes just past the end of the call's first chunk
// segment through its rkey: an RDMA READ past a Read chunk segment, an RDMA
// WRITE past a Write or Reply chunk segment. It reports whether the
// connection is still usable (the access was refused only if it is not).
func (c *conn) outOfBounds(call *rpcrdma.Header, n int) bool {
	var seg rpcrdma.Segment
	op := verbs.OpRDMAWrite
	switch {
	case len(call.Reads) > 0:
		seg, op = call.Reads[0].Segment, verbs.OpRDMARead
	case len(call.Writes) > 0 && len(call.Writes[0]) > 0:
		seg = call.Writes[0][0]
	case len(call.Reply) > 0:
		seg = call.Reply[0]
	default:
		return true
	}
	buf, err := newScratch(c.pd, n)
	if err != nil {
		c.fail(err)
		return false
	}
	defer buf.close()
	for i := range buf.bytes {
		buf.bytes[i] = LateWriteByte
	}
	st := &c.s.st
	st.oobTried.Add(1)
	ch, posted, err := c.post([]verbs.SendWR{{Opcode: op, SGL: []verbs.SGE{buf.sge(0, n)},
		RemoteAddr: seg.Offset + uint64(seg.Length), RKey: seg.Handle}})
	if err != nil {
		c.fail(err)
		return false
	}
	wcs, _ := c.complete(ch, posted)
	if len(wcs) == 0 {
		return false
	}
	switch wc := wcs[0]; wc.Status {
	case verbs.StatusSuccess:
		st.oobLanded.Add(1)
		c.log.Warn("an access past the segment landed", "op", op, "rkey", fmt.Sprintf("%#x", seg.Handle))
		return true
	case verbs.StatusWRFlushErr:
		return false
	default:
		c.log.Info("an access past the segment failed as it should", "op", op, "status", wc.Status)
		c.fail(&verbs.CompletionError{Completion: wc, Opcode: op})
		return false
	}
}

// LateWriteByte is the byte Misbehavior.LateWrite writes.
const LateWriteByte = 0xEE

func flipXID(b []byte) {
	binary.BigEndian.PutUint32(b, binary.BigEndian.Uint32(b)^0x80000000)
}
