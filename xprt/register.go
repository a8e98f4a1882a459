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
	reg := t.reg
	if len(p.ReadSegments) > 0 {
		if cl.readBuf == nil {
			b, err := reg.GetBuffer(ctx)
			if err != nil {
				return err
			}
			cl.readBuf = b
		}
		mem := cl.readBuf.Bytes()
		if p.Call == chunks.CallPositionZero {
			t.ctr.pos0.Add(1)
		} else {
			t.ctr.readChunks.Add(1)
		}
		// The planned segments are consecutive pieces of one message
		// (Head, Bulk, pad, Tail at position zero; the Bulk otherwise):
		// lay them out back to back and expose each one.
		off := 0
		for _, s := range p.ReadSegments {
			if s.Len > len(mem)-off {
				return fmt.Errorf("%w: a Read chunk of more than %d bytes", ErrTooLarge, len(mem))
			}
			if !cl.readLent {
				if n := len(cl.creq.AppendRange(mem[off:off], s)); n != s.Len {
					return fmt.Errorf("xprt: internal error: segment %+v laid out as %d bytes", s, n)
				}
			} else if s.Buf != chunks.BufBulk || s.Off != off {
				return fmt.Errorf("xprt: internal error: lent buffer with segment %+v at %d", s, off)
			}
			g, err := reg.Register(ctx, cl.readBuf, off, s.Len, frwr.ToPeer)
			if err != nil {
				return err
			}
			cl.regs = append(cl.regs, g)
			off += s.Len
		}
	}
	segs := p.WriteSegments
	if p.Reply == chunks.ReplyInReplyChunk {
		segs = p.ReplySegments
		t.ctr.replyChunks.Add(1)
	} else if len(segs) > 0 {
		t.ctr.writeChunks.Add(1)
		if cl.replyLent {
			t.ctr.zeroCopy.Add(1)
		}
	}
	if cl.readLent {
		t.ctr.zeroCopyWrites.Add(1)
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
