package xprt

import (
	"context"
	"fmt"

	"github.com/nfsrdma/nfsrdma/chunks"
	"github.com/nfsrdma/nfsrdma/frwr"
)

// register lays the call's chunk data out in registered memory as the plan
// says and binds a window over exactly each planned segment, with only the
// access its direction needs (rule 8). The budget for it is already held,
// so no pool makes it wait for another call.
func (cl *call) register(ctx context.Context) error {
	t, p := cl.t, &cl.plan
	reg := cl.reg
	readDone, err := cl.takeReadyRead()
	if err != nil {
		return err
	}
	if len(p.ReadSegments) > 0 && !readDone {
		if p.Call == chunks.CallPositionZero {
			t.ctr[ctrPositionZero].Add(1)
		} else {
			t.ctr[ctrReadChunks].Add(1)
		}
		size := t.bufSize()
		// The planned segments are consecutive pieces of one message
		// (Head, Bulk, pad, Tail at position zero; the Bulk otherwise):
		// lay them out back to back and expose each one.
		packSegments(p.ReadSegments, size, func(i, bi, off int) {
			s := p.ReadSegments[i]
			if err != nil {
				return
			}
			if s.Len > size-off {
				err = fmt.Errorf("%w: a Read-chunk segment of %d bytes", ErrTooLarge, s.Len)
				return
			}
			for bi >= len(cl.readBufs) {
				var b *frwr.Buffer
				if b, err = reg.GetBuffer(ctx); err != nil {
					return
				}
				cl.readBufs = append(cl.readBufs, b)
			}
			b := cl.readBufs[bi]
			if !cl.readLent {
				if n := len(cl.creq.AppendRange(b.Bytes()[off:off], s)); n != s.Len {
					err = fmt.Errorf("xprt: internal error: segment %+v laid out as %d bytes", s, n)
					return
				}
			} else if s.Buf != chunks.BufBulk || s.Off != off || bi != 0 {
				err = fmt.Errorf("xprt: internal error: lent buffer with segment %+v at %d", s, off)
				return
			}
			var g *frwr.Registration
			if g, err = reg.Register(ctx, b, off, s.Len, frwr.ToPeer); err == nil {
				cl.regs = append(cl.regs, g)
			}
		})
		if err != nil {
			return err
		}
	}
	segs := p.WriteSegments
	if p.Reply == chunks.ReplyInReplyChunk {
		segs = p.ReplySegments
		t.ctr[ctrReplyChunks].Add(1)
	} else if len(segs) > 0 {
		t.ctr[ctrWriteChunks].Add(1)
		if cl.replyLent {
			t.ctr[ctrZeroCopyReads].Add(1)
		}
	}
	if cl.readLent {
		t.ctr[ctrZeroCopyWrites].Add(1)
	}
	if len(segs) == 1 && cl.replyBuf == nil && p.Reply != chunks.ReplyInReplyChunk && segs[0].Off == 0 {
		// A small Write chunk: memory registered ahead, if there is. (A
		// Reply chunk's buffer may be kept with the reply: never these.)
		if b, g, ok := reg.TakeReady(segs[0].Len, frwr.FromPeer); ok {
			cl.replyBuf = b
			cl.regs = append(cl.regs, g)
			t.ctr[ctrReadyRegistrations].Add(1)
			return nil
		}
	}
	if len(segs) > 0 {
		if cl.replyBuf == nil {
			b, err := reg.GetBuffer(ctx)
			if err != nil {
				return err
			}
			cl.replyBuf = b
		}
		size := len(cl.replyBuf.Bytes())
		for _, s := range segs {
			if s.Off < 0 || s.Len > size-s.Off {
				return fmt.Errorf("%w: a reply of more than %d bytes", ErrTooLarge, size)
			}
			g, err := reg.Register(ctx, cl.replyBuf, s.Off, s.Len, frwr.FromPeer)
			if err != nil {
				return err
			}
			cl.regs = append(cl.regs, g)
		}
	}
	return nil
}

// takeReadyRead lays a small Read chunk (one segment: the bulk of a WRITE)
// out in memory registered ahead, when the registry has some of its size
// (frwr.Registry.TakeReady), and reports whether it did.
func (cl *call) takeReadyRead() (bool, error) {
	p := &cl.plan
	if len(p.ReadSegments) != 1 || p.Call == chunks.CallPositionZero || cl.readLent || len(cl.readBufs) > 0 {
		return false, nil
	}
	s := p.ReadSegments[0]
	b, g, ok := cl.reg.TakeReady(s.Len, frwr.ToPeer)
	if !ok {
		return false, nil
	}
	cl.readBufs = append(cl.readBufs, b)
	cl.regs = append(cl.regs, g)
	cl.t.ctr[ctrReadChunks].Add(1)
	cl.t.ctr[ctrReadyRegistrations].Add(1)
	if n := len(cl.creq.AppendRange(b.Bytes()[:0], s)); n != s.Len {
		return true, fmt.Errorf("xprt: internal error: segment %+v laid out as %d bytes", s, n)
	}
	return true, nil
}
