package nfs4

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// fakeServer is an in-process sunrpc.Transport that answers the client ID
// and session operations as RFC 8881 §18.35–18.37, §18.46, §18.50–18.51
// describe, plus PUTROOTFH and GETATTR of lease_time: enough to drive the
// session layer (establishment, slots, renewal, recovery, teardown) without
// a real server. mu guards everything.
type fakeServer struct {
	mu        sync.Mutex
	lease     uint32
	maxSlots  uint32
	maxMinor  uint32 // the highest minor version served
	target    uint32 // sr_target_highest_slotid; 0 means maxSlots-1
	owners    map[string]uint64
	clients   map[uint64]bool
	sessions  map[SessionID]*fakeSession
	nextID    uint64
	seqOnly   int // SEQUENCE-only compounds (lease renewals)
	compounds int
	mostOps   int // the most operations in one compound
	destroyed struct{ sessions, clients int }
	// dropNext makes the next SEQUENCE compound executed but its reply
	// lost (the call fails with errLost), once.
	dropNext bool
	closed   bool
	// One regular file, behind any handle: its data, the write verifier,
	// and a restart (new verifier) after the bumpAfter-th WRITE (0: never).
	data []byte
	verf Verifier
	// The namespace: a handle is its name; names starting with "f" are
	// regular files, the rest directories. cur is the current handle of
	// the compound being executed, opens the opens not yet closed.
	cur       string
	opens     int
	dirs      map[string][]string // the entries of each directory handle
	removed   []string            // REMOVE's names, in order
	writes    int
	bumpAfter int
}

type fakeSession struct {
	client uint64
	last   []uint32 // the last sequence id seen per slot
}

var errLost = fmt.Errorf("fake: reply lost")

func newFakeServer(lease uint32, slots uint32) *fakeServer {
	return &fakeServer{lease: lease, maxSlots: slots, maxMinor: 1, dirs: map[string][]string{}, owners: map[string]uint64{}, clients: map[uint64]bool{}, sessions: map[SessionID]*fakeSession{}, nextID: 0x100}
}

func (s *fakeServer) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}

// killSessions forgets every session (a server restart that kept the
// clients, or BADSESSION on demand).
func (s *fakeServer) killSessions() {
	s.mu.Lock()
	clear(s.sessions)
	s.mu.Unlock()
}

// restart forgets the clients and sessions.
func (s *fakeServer) restart() {
	s.mu.Lock()
	clear(s.sessions)
	clear(s.clients)
	clear(s.owners)
	s.mu.Unlock()
}

func (s *fakeServer) counts() (seqOnly, compounds, sessions int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seqOnly, s.compounds, len(s.sessions)
}

func (s *fakeServer) RoundTrip(ctx context.Context, req *sunrpc.Request) (*sunrpc.Reply, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	msg := append(append(append([]byte(nil), req.Head...), req.Bulk...), sunrpc.PadBytes(len(req.Bulk))...)
	msg = append(msg, req.Tail...)
	d := sunrpc.NewDecoder(msg)
	h, err := sunrpc.DecodeCall(d)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, sunrpc.ErrClosed
	}
	out := sunrpc.AppendReply(nil, &sunrpc.ReplyHeader{XID: h.XID, Stat: sunrpc.MsgAccepted, Accept: sunrpc.Success})
	if h.Proc == procNull {
		return sunrpc.NewReply(out, nil, nil), nil
	}
	s.compounds++
	res, drop := s.compound(d)
	if d.Err() != nil {
		return nil, fmt.Errorf("fake: malformed call: %w", d.Err())
	}
	if drop {
		return nil, errLost
	}
	return sunrpc.NewReply(append(out, res...), nil, nil), nil
}

// compound executes COMPOUND4args and returns COMPOUND4res.
func (s *fakeServer) compound(d *sunrpc.Decoder) (res []byte, drop bool) {
	d.Opaque(maxTag)
	if minor := d.Uint32(); minor < 1 || minor > s.maxMinor {
		return words3(uint32(ErrMinorVersMismatch), 0, 0), false
	}
	n := int(d.Uint32())
	s.mostOps = max(s.mostOps, n)
	s.cur = ""
	var body []byte
	status := OK
	done := 0
	for i := 0; i < n && status == OK && d.Err() == nil; i++ {
		op := Op(d.Uint32())
		var r []byte
		status, r = s.op(d, op, n)
		if op == OpSequence && status == OK && s.dropNext {
			s.dropNext = false
			drop = true
		}
		body = sunrpc.AppendUint32(sunrpc.AppendUint32(body, uint32(op)), uint32(status))
		body = append(body, r...)
		done++
	}
	out := sunrpc.AppendUint32(nil, uint32(status))
	out = sunrpc.AppendUint32(out, 0)
	out = sunrpc.AppendUint32(out, uint32(done))
	return append(out, body...), drop
}

func words3(a, b, c uint32) []byte {
	return sunrpc.AppendUint32(sunrpc.AppendUint32(sunrpc.AppendUint32(nil, a), b), c)
}

func (s *fakeServer) op(d *sunrpc.Decoder, op Op, n int) (Status, []byte) {
	var r []byte
	switch op {
	case OpExchangeID:
		d.FixedOpaque(8)
		owner := string(d.Opaque(maxOpaque))
		d.Uint32() // flags
		if how := d.Uint32(); how != 0 {
			return ErrInval, nil
		}
		for range d.ArrayLen(1, 20) {
			d.String(-1)
			d.String(-1)
			decodeTime(d)
		}
		id, ok := s.owners[owner]
		if !ok {
			s.nextID++
			id = s.nextID
			s.owners[owner] = id
			s.clients[id] = true
		}
		r = sunrpc.AppendUint64(r, id)
		r = sunrpc.AppendUint32(r, 1)
		r = sunrpc.AppendUint32(r, ExchgIDFlagUseNonPNFS)
		r = sunrpc.AppendUint32(r, 0)
		r = sunrpc.AppendUint64(r, 0)
		r = sunrpc.AppendOpaque(r, []byte("fake"))
		r = sunrpc.AppendOpaque(r, []byte("fake"))
		r = sunrpc.AppendUint32(r, 0)
		return OK, r
	case OpCreateSession:
		id := d.Uint64()
		seq := d.Uint32()
		d.Uint32()
		fore := decodeChannelAttrs(d)
		back := decodeChannelAttrs(d)
		d.Uint32()
		for range d.ArrayLen(4, 4) {
			if f := d.Uint32(); f != 0 {
				return ErrInval, nil
			}
		}
		if !s.clients[id] {
			return ErrStaleClientID, nil
		}
		fore.MaxRequests = min(fore.MaxRequests, s.maxSlots)
		var sid SessionID
		s.nextID++
		copy(sid[:], fmt.Sprintf("session%09d", s.nextID))
		s.sessions[sid] = &fakeSession{client: id, last: make([]uint32, fore.MaxRequests)}
		r = append(r, sid[:]...)
		r = sunrpc.AppendUint32(r, seq)
		r = sunrpc.AppendUint32(r, 0)
		r = appendChannelAttrs(r, &fore)
		r = appendChannelAttrs(r, &back)
		return OK, r
	case OpSequence:
		var sid SessionID
		copy(sid[:], d.FixedOpaque(16))
		seq, slot, _ := d.Uint32(), d.Uint32(), d.Uint32()
		d.Bool()
		ss, ok := s.sessions[sid]
		switch {
		case !ok:
			return ErrBadSession, nil
		case int(slot) >= len(ss.last):
			return ErrBadSlot, nil
		case seq != ss.last[slot]+1:
			return ErrSeqMisordered, nil
		}
		ss.last[slot] = seq
		if n == 1 {
			s.seqOnly++
		}
		target := s.target
		if target == 0 {
			target = uint32(len(ss.last) - 1)
		}
		r = append(r, sid[:]...)
		for _, v := range []uint32{seq, slot, uint32(len(ss.last) - 1), target, SeqStatusCBPathDown} {
			r = sunrpc.AppendUint32(r, v)
		}
		return OK, r
	case OpReclaimComplete:
		d.Bool()
		return OK, nil
	case OpPutRootFH:
		s.cur = "root"
		return OK, nil
	case OpRead:
		d.FixedOpaque(stateIDSize)
		off, count := d.Uint64(), d.Uint32()
		lo := min(off, uint64(len(s.data)))
		hi := min(lo+uint64(count), uint64(len(s.data)))
		r = sunrpc.AppendBool(r, hi == uint64(len(s.data)))
		return OK, sunrpc.AppendOpaque(r, s.data[lo:hi])
	case OpWrite:
		d.FixedOpaque(stateIDSize)
		off := d.Uint64()
		d.Uint32()
		p := d.Opaque(-1)
		if end := int(off) + len(p); end > len(s.data) {
			s.data = append(s.data, make([]byte, end-len(s.data))...)
		}
		copy(s.data[off:], p)
		s.writes++
		if s.writes == s.bumpAfter {
			s.verf[0]++
		}
		r = sunrpc.AppendUint32(r, uint32(len(p)))
		r = sunrpc.AppendUint32(r, uint32(Unstable))
		return OK, append(r, s.verf[:]...)
	case OpCommit:
		d.Uint64()
		d.Uint32()
		return OK, append(r, s.verf[:]...)
	case OpPutFH:
		s.cur = string(d.Opaque(MaxFH))
		return OK, nil
	case OpLookup:
		s.cur = d.String(maxName)
		return OK, nil
	case OpGetFH:
		return OK, sunrpc.AppendOpaque(nil, []byte(s.cur))
	case OpGetattr:
		m := decodeBitmap(d)
		var mask Bitmap
		var vals []byte
		if m.Has(AttrType) {
			mask = mask.With(AttrType)
			t := TypeDir
			if strings.HasPrefix(s.cur, "f") {
				t = TypeReg
			}
			vals = sunrpc.AppendUint32(vals, uint32(t))
		}
		if m.Has(AttrLeaseTime) {
			mask = mask.With(AttrLeaseTime)
			vals = sunrpc.AppendUint32(vals, s.lease)
		}
		return OK, sunrpc.AppendOpaque(appendBitmap(nil, mask), vals)
	case OpOpen:
		d.Uint32()
		d.Uint32()
		d.Uint32()
		decodeOwner(d)
		if d.Uint32() == 1 { // OPEN4_CREATE
			switch CreateMode(d.Uint32()) {
			case Unchecked, Guarded:
				decodeBitmap(d)
				d.Opaque(-1)
			case Exclusive4:
				d.FixedOpaque(8)
			case Exclusive41:
				d.FixedOpaque(8)
				decodeBitmap(d)
				d.Opaque(-1)
			}
		}
		if claim := d.Uint32(); claim != 0 {
			return ErrNotSupp, nil
		}
		s.cur = d.String(maxName)
		s.opens++
		r = appendStateID(r, StateID{Seq: 1, Other: [12]byte{byte(s.opens)}})
		r = append(r, make([]byte, changeInfoSize)...)
		r = sunrpc.AppendUint32(r, 0)
		r = appendBitmap(r, NewBitmap(AttrMode))
		return OK, sunrpc.AppendUint32(r, 0) // OPEN_DELEGATE_NONE
	case OpReaddir:
		d.Uint64()
		d.FixedOpaque(8)
		d.Uint32()
		d.Uint32()
		m := decodeBitmap(d)
		r = append(r, make([]byte, 8)...)
		for i, name := range s.dirs[s.cur] {
			r = sunrpc.AppendBool(r, true)
			r = sunrpc.AppendUint64(r, uint64(i+1))
			r = sunrpc.AppendString(r, name)
			var mask Bitmap
			var vals []byte
			if m.Has(AttrType) {
				mask = mask.With(AttrType)
				t := TypeDir
				if strings.HasPrefix(name, "f") {
					t = TypeReg
				}
				vals = sunrpc.AppendUint32(vals, uint32(t))
			}
			if m.Has(AttrFileHandle) {
				mask = mask.With(AttrFileHandle)
				vals = sunrpc.AppendOpaque(vals, []byte(name))
			}
			r = sunrpc.AppendOpaque(appendBitmap(r, mask), vals)
		}
		r = sunrpc.AppendBool(r, false)
		return OK, sunrpc.AppendBool(r, true)
	case OpRemove:
		name := d.String(maxName)
		if len(s.dirs[name]) > 0 {
			return ErrNotEmpty, nil
		}
		es := s.dirs[s.cur]
		i := slices.Index(es, name)
		if i < 0 {
			return ErrNoEnt, nil
		}
		s.dirs[s.cur] = slices.Delete(es, i, i+1)
		s.removed = append(s.removed, name)
		return OK, make([]byte, changeInfoSize)
	case OpClose:
		d.Uint32()
		sid := decodeStateID(d)
		if s.opens == 0 {
			return ErrBadStateID, nil
		}
		s.opens--
		return OK, appendStateID(nil, sid)
	case OpDestroySession:
		var sid SessionID
		copy(sid[:], d.FixedOpaque(16))
		if _, ok := s.sessions[sid]; !ok {
			return ErrBadSession, nil
		}
		delete(s.sessions, sid)
		s.destroyed.sessions++
		return OK, nil
	case OpDestroyClientID:
		id := d.Uint64()
		if !s.clients[id] {
			return ErrStaleClientID, nil
		}
		for _, ss := range s.sessions {
			if ss.client == id {
				return ErrClientIDBusy, nil
			}
		}
		if s.opens > 0 {
			return ErrClientIDBusy, nil // knfsd: a client ID with state
		}
		delete(s.clients, id)
		s.destroyed.clients++
		return OK, nil
	}
	d.Fail(fmt.Errorf("fake: operation %v not implemented", op))
	return ErrOpIllegal, nil
}
