package chunks

import (
	"bytes"
	"errors"
	"testing"
)

func mustPlan(t testing.TB, req *Request, lim Limits) *Plan {
	t.Helper()
	var p Plan
	if err := p.Build(req, lim); err != nil {
		t.Fatal(err)
	}
	return &p
}

func TestRebuild(t *testing.T) {
	const half = MiB / 2
	seg512K := with(knfsd, func(l *Limits) { l.MaxSegmentSize = half })
	seg16K := with(knfsd, func(l *Limits) { l.MaxSegmentSize = 16 << 10 })
	read := mustPlan(t, mkReq(readHead, 0, 0, MiB, readRest+MiB), seg512K) // Write chunk of 2 segments
	rdp := mustPlan(t, mkReq(160, 0, 0, 0, 64<<10), seg16K)                // Reply chunk of 4 segments
	null := mustPlan(t, mkReq(40, 0, 0, 0, 24), knfsd)                     // no chunks
	if read.Reply != ReplyWriteChunk || len(read.WriteSegments) != 2 || rdp.Reply != ReplyInReplyChunk || len(rdp.ReplySegments) != 4 {
		t.Fatalf("unexpected plans: %+v %+v", read, rdp)
	}
	inline := fill(readRest, 0x70)
	replyBuf := fill(64<<10, 0x80)
	bulkBuf := fill(MiB, 0x90)

	tests := []struct {
		name    string
		plan    *Plan
		in      Received
		bulk    []byte // the Write chunk's buffer
		buf     []byte // the Reply chunk's buffer
		want    Reply
		wantErr error
		segErr  *SegmentError
	}{
		{
			name: "Write chunk filled",
			plan: read,
			in:   Received{Type: RDMAMsg, Inline: inline, WriteList: [][]uint32{{half, half}}},
			bulk: bulkBuf,
			want: Reply{Message: inline, Bulk: bulkBuf},
		},
		{
			name: "server wrote less than offered (short READ at EOF)",
			plan: read,
			in:   Received{Type: RDMAMsg, Inline: inline, WriteList: [][]uint32{{half, 1000}}},
			bulk: bulkBuf,
			want: Reply{Message: inline, Bulk: bulkBuf[:half+1000]},
		},
		{
			name: "short first segment, second empty",
			plan: read,
			in:   Received{Type: RDMAMsg, Inline: inline, WriteList: [][]uint32{{1001, 0}}},
			bulk: bulkBuf,
			want: Reply{Message: inline, Bulk: bulkBuf[:1001]},
		},
		{
			name: "fewer segments returned than offered",
			plan: read,
			in:   Received{Type: RDMAMsg, Inline: inline, WriteList: [][]uint32{{700}}},
			bulk: bulkBuf,
			want: Reply{Message: inline, Bulk: bulkBuf[:700]},
		},
		{
			name:    "Write chunk buffer shorter than the data written",
			plan:    read,
			in:      Received{Type: RDMAMsg, Inline: inline, WriteList: [][]uint32{{700}}},
			bulk:    bulkBuf[:699],
			wantErr: ErrShortBuffer,
		},
		{
			name:    "server reports more than offered in a segment",
			plan:    read,
			in:      Received{Type: RDMAMsg, Inline: inline, WriteList: [][]uint32{{half + 1, 0}}},
			wantErr: ErrChunkOverrun,
			segErr:  &SegmentError{Chunk: ChunkWrite, Index: 0, Offered: half, Reported: half + 1},
		},
		{
			name:    "server reports a length beyond 32-bit int range",
			plan:    read,
			in:      Received{Type: RDMAMsg, Inline: inline, WriteList: [][]uint32{{half, 0xffffffff}}},
			wantErr: ErrChunkOverrun,
			segErr:  &SegmentError{Chunk: ChunkWrite, Index: 1, Offered: half, Reported: 0xffffffff},
		},
		{
			name:    "segment filled after a short one",
			plan:    read,
			in:      Received{Type: RDMAMsg, Inline: inline, WriteList: [][]uint32{{1000, 5}}},
			wantErr: ErrChunkGap,
			segErr:  &SegmentError{Chunk: ChunkWrite, Index: 1, Offered: half, Reported: 5},
		},
		{
			name:    "more segments than offered",
			plan:    read,
			in:      Received{Type: RDMAMsg, Inline: inline, WriteList: [][]uint32{{1, 0, 0}}},
			wantErr: ErrUnexpectedChunk,
		},
		{
			name:    "two Write chunks for one offered",
			plan:    read,
			in:      Received{Type: RDMAMsg, Inline: inline, WriteList: [][]uint32{{1, 0}, {1}}},
			wantErr: ErrUnexpectedChunk,
		},
		{
			name: "READ data returned inline despite the Write chunk (zero lengths)",
			plan: read,
			in:   Received{Type: RDMAMsg, Inline: inline, WriteList: [][]uint32{{0, 0}}},
			bulk: bulkBuf,
			want: Reply{Message: inline},
		},
		{
			name: "READ data returned inline, Write list left empty",
			plan: read,
			in:   Received{Type: RDMAMsg, Inline: inline},
			want: Reply{Message: inline},
		},
		{
			name:    "RDMA_NOMSG when no Reply chunk was offered",
			plan:    read,
			in:      Received{Type: RDMANoMsg, WriteList: [][]uint32{{half, half}}},
			wantErr: ErrUnexpectedChunk,
		},
		{
			name:    "RDMA_ERROR is not for Rebuild",
			plan:    read,
			in:      Received{Type: 4, Inline: inline},
			wantErr: ErrMessageType,
		},
		{
			name:    "RDMA_MSG without RPC bytes",
			plan:    null,
			in:      Received{Type: RDMAMsg},
			wantErr: ErrEmptyReply,
		},
		{
			name: "plain inline reply",
			plan: null,
			in:   Received{Type: RDMAMsg, Inline: inline[:24]},
			want: Reply{Message: inline[:24]},
		},
		{
			name:    "Write chunk data from a server that was offered none",
			plan:    null,
			in:      Received{Type: RDMAMsg, Inline: inline, WriteList: [][]uint32{{4}}},
			wantErr: ErrUnexpectedChunk,
		},
		{
			name:    "Reply chunk from a server that was offered none",
			plan:    null,
			in:      Received{Type: RDMAMsg, Inline: inline, ReplyChunk: []uint32{4}},
			wantErr: ErrUnexpectedChunk,
		},
		{
			name: "RDMA_NOMSG: the whole reply in the Reply chunk",
			plan: rdp,
			in:   Received{Type: RDMANoMsg, ReplyChunk: []uint32{16 << 10, 3000, 0, 0}},
			buf:  replyBuf,
			want: Reply{Message: replyBuf[:16<<10+3000]},
		},
		{
			name: "RDMA_NOMSG filling the Reply chunk",
			plan: rdp,
			in:   Received{Type: RDMANoMsg, ReplyChunk: []uint32{16 << 10, 16 << 10, 16 << 10, 16 << 10}},
			buf:  replyBuf,
			want: Reply{Message: replyBuf},
		},
		{
			name:    "Reply chunk segment overrun",
			plan:    rdp,
			in:      Received{Type: RDMANoMsg, ReplyChunk: []uint32{16<<10 + 4}},
			buf:     replyBuf,
			wantErr: ErrChunkOverrun,
			segErr:  &SegmentError{Chunk: ChunkReply, Index: 0, Offered: 16 << 10, Reported: 16<<10 + 4},
		},
		{
			name:    "Reply chunk with a hole",
			plan:    rdp,
			in:      Received{Type: RDMANoMsg, ReplyChunk: []uint32{100, 0, 8}},
			buf:     replyBuf,
			wantErr: ErrChunkGap,
			segErr:  &SegmentError{Chunk: ChunkReply, Index: 2, Offered: 16 << 10, Reported: 8},
		},
		{
			name:    "RDMA_NOMSG with nothing written",
			plan:    rdp,
			in:      Received{Type: RDMANoMsg, ReplyChunk: []uint32{0, 0, 0, 0}},
			buf:     replyBuf,
			wantErr: ErrEmptyReply,
		},
		{
			name:    "RDMA_NOMSG without a Reply chunk in the header",
			plan:    rdp,
			in:      Received{Type: RDMANoMsg},
			buf:     replyBuf,
			wantErr: ErrEmptyReply,
		},
		{
			name:    "Reply chunk buffer shorter than the reply",
			plan:    rdp,
			in:      Received{Type: RDMANoMsg, ReplyChunk: []uint32{16 << 10}},
			buf:     replyBuf[:100],
			wantErr: ErrShortBuffer,
		},
		{
			name: "short reply sent inline although a Reply chunk was offered",
			plan: rdp,
			in:   Received{Type: RDMAMsg, Inline: inline, ReplyChunk: []uint32{0, 0, 0, 0}},
			buf:  replyBuf,
			want: Reply{Message: inline},
		},
		{
			name:    "RDMA_MSG with data in the Reply chunk",
			plan:    rdp,
			in:      Received{Type: RDMAMsg, Inline: inline, ReplyChunk: []uint32{8}},
			buf:     replyBuf,
			wantErr: ErrUnexpectedChunk,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.plan.Rebuild(tt.in, tt.bulk, tt.buf)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Rebuild = %+v, %v; want %v", got, err, tt.wantErr)
				}
				if tt.segErr != nil {
					var se *SegmentError
					if !errors.As(err, &se) {
						t.Fatalf("%v is not a *SegmentError", err)
					}
					tt.segErr.Err = tt.wantErr
					if *se != *tt.segErr {
						t.Errorf("SegmentError %+v, want %+v", *se, *tt.segErr)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Rebuild: %v", err)
			}
			if !bytes.Equal(got.Message, tt.want.Message) || !bytes.Equal(got.Bulk, tt.want.Bulk) ||
				(got.Bulk == nil) != (tt.want.Bulk == nil) {
				t.Errorf("Rebuild = {%d bytes, bulk %d (nil %v)}, want {%d bytes, bulk %d (nil %v)}",
					len(got.Message), len(got.Bulk), got.Bulk == nil,
					len(tt.want.Message), len(tt.want.Bulk), tt.want.Bulk == nil)
			}
		})
	}
}

// TestRebuildNoMsgWithWriteData: Build never offers both chunks, but a plan
// that does must not accept Write chunk data beside an RDMA_NOMSG reply.
func TestRebuildNoMsgWithWriteData(t *testing.T) {
	p := &Plan{
		WriteSegments: []Range{rg(BufReplyBulk, 0, 4096)},
		ReplySegments: []Range{rg(BufReplyChunk, 0, 8192)},
	}
	in := Received{Type: RDMANoMsg, WriteList: [][]uint32{{4096}}, ReplyChunk: []uint32{200}}
	if _, err := p.Rebuild(in, make([]byte, 4096), make([]byte, 8192)); !errors.Is(err, ErrUnexpectedChunk) {
		t.Errorf("Rebuild = %v, want %v", err, ErrUnexpectedChunk)
	}
}

func TestStrings(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{RDMAMsg.String(), "RDMA_MSG"},
		{RDMANoMsg.String(), "RDMA_NOMSG"},
		{MessageType(4).String(), "rdma_proc(4)"},
		{BufPad.String(), "Pad"},
		{Buffer(0).String(), "Buffer(0)"},
		{CallPositionZero.String(), "position-zero read chunk"},
		{ReplyInReplyChunk.String(), "reply chunk"},
		{ChunkWrite.String(), "write chunk"},
		{(&SegmentError{Chunk: ChunkReply, Index: 2, Offered: 16, Reported: 20, Err: ErrChunkOverrun}).Error(),
			"chunks: segment length exceeds the offered length: reply chunk segment 2: offered 16 bytes, server reports 20"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestRebuildAllocs(t *testing.T) {
	p := mustPlan(t, mkReq(readHead, 0, 0, MiB, readRest+MiB), with(knfsd, func(l *Limits) { l.MaxSegmentSize = MiB / 4 }))
	in := Received{Type: RDMAMsg, Inline: fill(readRest, 1), WriteList: [][]uint32{{MiB / 4, MiB / 4, 100, 0}}}
	bulk := make([]byte, MiB)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := p.Rebuild(in, bulk, nil); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Rebuild allocates %v times", allocs)
	}
}

// FuzzRebuild: whatever a server sends, Rebuild neither panics nor hands the
// RPC layer more than was offered.
func FuzzRebuild(f *testing.F) {
	f.Add(uint8(0), uint8(0), []byte{0, 8, 0, 0, 0, 8, 0, 0})
	f.Add(uint8(1), uint8(1), []byte{0, 0, 64, 0, 0, 0, 1, 0})
	f.Add(uint8(2), uint8(0), []byte{})
	f.Add(uint8(0), uint8(4), []byte{0xff, 0xff, 0xff, 0xff})
	plans := []*Plan{
		mustPlan(f, mkReq(readHead, 0, 0, MiB, readRest+MiB), with(knfsd, func(l *Limits) { l.MaxSegmentSize = MiB / 2 })),
		mustPlan(f, mkReq(160, 0, 0, 0, 64<<10), with(knfsd, func(l *Limits) { l.MaxSegmentSize = 16 << 10 })),
		mustPlan(f, mkReq(40, 0, 0, 0, 24), knfsd),
	}
	replyBuf, bulkBuf := make([]byte, 64<<10), make([]byte, MiB)
	f.Fuzz(func(t *testing.T, which, typ uint8, lens []byte) {
		p := plans[int(which)%len(plans)]
		// The first byte's low bits pick how many Write chunks; the rest
		// are segment lengths, alternating between Write and Reply chunk.
		in := Received{Type: MessageType(typ % 5), Inline: fill(int(typ)%64, 1)}
		var w, rc []uint32
		for i := 0; i+4 <= len(lens); i += 4 {
			n := uint32(lens[i])<<24 | uint32(lens[i+1])<<16 | uint32(lens[i+2])<<8 | uint32(lens[i+3])
			if i/4%2 == 0 {
				w = append(w, n)
			} else {
				rc = append(rc, n)
			}
		}
		if len(w) > 0 {
			in.WriteList = [][]uint32{w}
		}
		if len(lens) > 0 && lens[0]&1 == 1 {
			in.ReplyChunk = rc
		}
		rep, err := p.Rebuild(in, bulkBuf, replyBuf)
		if err != nil {
			return
		}
		offered := func(segs []Range) (n int) {
			for _, s := range segs {
				n += s.Len
			}
			return n
		}
		if len(rep.Bulk) > offered(p.WriteSegments) || (rep.Bulk != nil && len(rep.Bulk) == 0) {
			t.Fatalf("bulk of %d bytes (nil %v), offered %d", len(rep.Bulk), rep.Bulk == nil, offered(p.WriteSegments))
		}
		if in.Type == RDMANoMsg && (len(rep.Message) == 0 || len(rep.Message) > offered(p.ReplySegments)) {
			t.Fatalf("NOMSG message of %d bytes, offered %d", len(rep.Message), offered(p.ReplySegments))
		}
		if in.Type == RDMAMsg && !bytes.Equal(rep.Message, in.Inline) {
			t.Fatalf("MSG message is not the inline part")
		}
	})
}
