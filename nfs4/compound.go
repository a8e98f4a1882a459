package nfs4

import (
	"fmt"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// The NFSv4 program (RFC 8881 §16.1, §18: NFSPROC4_NULL and NFSPROC4_COMPOUND).
const (
	Program = 100003
	Version = 4
	// MaxMinorVersion is the highest minor version this client speaks: the
	// NFSv4.2 operations (RFC 7862) need it; a server of 4.1 only gets 1.
	MaxMinorVersion = 2
	procNull        = 0
	procCompound    = 1
	maxTag          = 1024 // bound on a reply's tag (the client sends none)
	maxOpsInReply   = 64   // more than any compound this package sends
)

// Op is nfs_opnum4 (RFC 8881 §16.2.1, RFC 7862 §13).
type Op uint32

// The operations this package sends, and OP_ILLEGAL.
const (
	OpAccess          Op = 3
	OpClose           Op = 4
	OpCommit          Op = 5
	OpCreate          Op = 6
	OpGetattr         Op = 9
	OpGetFH           Op = 10
	OpLink            Op = 11
	OpLock            Op = 12
	OpLockT           Op = 13
	OpLockU           Op = 14
	OpLookup          Op = 15
	OpLookupP         Op = 16
	OpOpen            Op = 18
	OpPutFH           Op = 22
	OpPutRootFH       Op = 24
	OpRead            Op = 25
	OpReaddir         Op = 26
	OpReadlink        Op = 27
	OpRemove          Op = 28
	OpRename          Op = 29
	OpRestoreFH       Op = 31
	OpSaveFH          Op = 32
	OpSetattr         Op = 34
	OpWrite           Op = 38
	OpExchangeID      Op = 42
	OpCreateSession   Op = 43
	OpDestroySession  Op = 44
	OpSequence        Op = 53
	OpDestroyClientID Op = 57
	OpReclaimComplete Op = 58
	OpAllocate        Op = 59 // NFSv4.2
	OpCopy            Op = 60 // NFSv4.2
	OpDeallocate      Op = 62 // NFSv4.2
	OpSeek            Op = 69 // NFSv4.2
	OpIllegal         Op = 10044
)

var opNames = map[Op]string{
	OpAccess: "ACCESS", OpClose: "CLOSE", OpCommit: "COMMIT", OpCreate: "CREATE",
	OpGetattr: "GETATTR", OpGetFH: "GETFH", OpLink: "LINK", OpLock: "LOCK",
	OpLockT: "LOCKT", OpLockU: "LOCKU", OpLookup: "LOOKUP", OpLookupP: "LOOKUPP",
	OpOpen: "OPEN", OpPutFH: "PUTFH", OpPutRootFH: "PUTROOTFH", OpRead: "READ",
	OpReaddir: "READDIR", OpReadlink: "READLINK", OpRemove: "REMOVE", OpRename: "RENAME",
	OpRestoreFH: "RESTOREFH", OpSaveFH: "SAVEFH", OpSetattr: "SETATTR", OpWrite: "WRITE",
	OpExchangeID: "EXCHANGE_ID", OpCreateSession: "CREATE_SESSION",
	OpDestroySession: "DESTROY_SESSION", OpSequence: "SEQUENCE",
	OpDestroyClientID: "DESTROY_CLIENTID", OpReclaimComplete: "RECLAIM_COMPLETE",
	OpAllocate: "ALLOCATE", OpCopy: "COPY", OpDeallocate: "DEALLOCATE", OpSeek: "SEEK",
	OpIllegal: "ILLEGAL",
}

func (o Op) String() string {
	if n, ok := opNames[o]; ok {
		return n
	}
	return fmt.Sprintf("op(%d)", uint32(o))
}

// OpError is the failure of one operation of a COMPOUND (RFC 8881 §16.2.3:
// the server stops at the first operation that fails). It unwraps to the
// Status, so errors.Is(err, nfs4.ErrNoEnt) and errors.Is(err, fs.ErrNotExist)
// hold.
type OpError struct {
	Op     Op
	Index  int // position in the compound, SEQUENCE being 0
	Status Status
}

func (e *OpError) Error() string { return e.Op.String() + ": " + e.Status.Error() }

func (e *OpError) Unwrap() error { return e.Status }

// ReplyError reports a COMPOUND reply the client could not decode: the
// outcome of the operations is unknown.
type ReplyError struct {
	Ops []Op
	Err error
}

func (e *ReplyError) Error() string {
	return fmt.Sprintf("nfs4: malformed COMPOUND reply to %v: %v", e.Ops, e.Err)
}

func (e *ReplyError) Unwrap() error { return e.Err }

// opResult decodes one operation's result after its status: st is that
// status, and the decoder reads the arm of the result union st selects
// (for most operations only NFS4_OK has one).
type opResult func(d *sunrpc.Decoder, st Status)

// opResultHeader is the size of resop's opnum and status.
const opResultHeader = 8

// compound is one COMPOUND4args being built (RFC 8881 §16.2.1) with the
// decoders of its results. The encoding is split as sunrpc.Args wants it:
// everything goes to head until the one DDP-eligible argument (RFC 8267
// §6.1: WRITE data, a symbolic link's text in CREATE) is added, whose
// length word ends head; what follows goes to tail. Invariant: at most one
// DDP-eligible item, argument or result, per compound (RFC 8267 §6.1; the
// transport's Request carries one of each, and this package uses one in
// all).
type compound struct {
	head, tail []byte
	bulk       []byte
	hasBulk    bool   // a DDP-eligible argument was added (bulk may be empty)
	replyBulk  []byte // the buffer for the DDP-eligible result, nil when none
	ddp        bool   // a DDP-eligible item, argument or result, was added
	countAt    int    // offset in head of argarray's count word
	ops        []Op
	results    []opResult
	maxResults int // bound of the results' encoded size, status and tag included
}

// newCompound starts COMPOUND4args with an empty tag and minor version 1;
// setMinor changes it.
func newCompound() *compound {
	c := &compound{head: make([]byte, 0, 256)}
	c.head = sunrpc.AppendUint32(c.head, 0) // tag: empty utf8str_cs
	c.head = sunrpc.AppendUint32(c.head, 1)
	c.countAt = len(c.head)
	c.head = sunrpc.AppendUint32(c.head, 0) // the count, set by args
	c.maxResults = 4 + 4 + 4                // status, empty tag, resarray count
	return c
}

// setMinor sets the compound's minorversion.
func (c *compound) setMinor(minor uint32) { putUint32(c.head[4:], minor) }

// buf returns the slice the next argument bytes are appended to.
func (c *compound) buf() *[]byte {
	if c.hasBulk {
		return &c.tail
	}
	return &c.head
}

// add appends operation op with its encoded arguments, and registers the
// decoder of its result, whose encoded size is at most maxRes bytes after
// the opnum and status.
func (c *compound) add(op Op, args []byte, maxRes int, res opResult) {
	b := c.buf()
	*b = sunrpc.AppendUint32(*b, uint32(op))
	*b = append(*b, args...)
	c.ops = append(c.ops, op)
	c.results = append(c.results, res)
	c.maxResults += opResultHeader + maxRes
}

// addBulkArg appends op whose arguments are pre, then the DDP-eligible
// opaque data (its length word in head, the bytes in bulk), then post.
func (c *compound) addBulkArg(op Op, pre []byte, data []byte, post []byte, maxRes int, res opResult) {
	if c.ddp {
		panic("nfs4: a second DDP-eligible item in one compound")
	}
	c.ddp = true
	c.head = sunrpc.AppendUint32(c.head, uint32(op))
	c.head = append(c.head, pre...)
	c.head = sunrpc.AppendUint32(c.head, uint32(len(data)))
	c.bulk, c.hasBulk = data, true
	c.tail = append(c.tail, post...)
	c.ops = append(c.ops, op)
	c.results = append(c.results, res)
	c.maxResults += opResultHeader + maxRes
}

// expectBulkResult offers p as the landing buffer of the compound's
// DDP-eligible result (READ data, READLINK text; RFC 8267 §6.1).
func (c *compound) expectBulkResult(p []byte) {
	if c.ddp {
		panic("nfs4: a second DDP-eligible item in one compound")
	}
	c.ddp = true
	c.replyBulk = p
}

// args finishes the compound: the operation count is written and the parts
// handed over as sunrpc.Args.
func (c *compound) args() *sunrpc.Args {
	putUint32(c.head[c.countAt:], uint32(len(c.ops)))
	return &sunrpc.Args{Head: c.head, Bulk: c.bulk, Tail: c.tail, ReplyBulk: c.replyBulk, MaxResults: c.maxResults}
}

func putUint32(b []byte, v uint32) {
	_ = b[3]
	b[0], b[1], b[2], b[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
}

// decodeCompound reads COMPOUND4res (RFC 8881 §16.2.2) against the
// operations sent: each result's opnum must be the operation's, the results
// stop at the first failure, and the compound's status must be that of the
// last result. It returns nil when every operation succeeded, an *OpError
// for the first one that failed (its result arm decoded), or a decoding
// error.
func decodeCompound(d *sunrpc.Decoder, ops []Op, results []opResult) error {
	status := Status(d.Uint32())
	d.Opaque(maxTag)
	n := d.ArrayLen(len(ops), opResultHeader)
	if err := d.Err(); err != nil {
		return err
	}
	last := OK
	for i := 0; i < n; i++ {
		op := Op(d.Uint32())
		st := Status(d.Uint32())
		if d.Err() != nil {
			return d.Err()
		}
		if op != ops[i] {
			if op == OpIllegal {
				return &OpError{Op: ops[i], Index: i, Status: st}
			}
			return fmt.Errorf("result %d is for %v, the operation sent was %v", i, op, ops[i])
		}
		if results[i] != nil {
			results[i](d, st)
		}
		if err := d.Err(); err != nil {
			return fmt.Errorf("%v result: %w", op, err)
		}
		last = st
		if st != OK {
			if i != n-1 {
				return fmt.Errorf("%v failed with %v but %d more results follow", op, st.Name(), n-1-i)
			}
			if status != st {
				return fmt.Errorf("COMPOUND status %v but its last result's %v", status.Name(), st.Name())
			}
			return &OpError{Op: op, Index: i, Status: st}
		}
	}
	switch {
	case status != last:
		if n == 0 && status != OK {
			// A compound refused before its first operation (MINOR_VERS_MISMATCH,
			// RESOURCE, BADXDR...) carries no result (RFC 8881 §16.2.3).
			var op Op
			if len(ops) > 0 {
				op = ops[0]
			}
			return &OpError{Op: op, Index: -1, Status: status}
		}
		return fmt.Errorf("COMPOUND status %v after %d successful results", status.Name(), n)
	case n < len(ops):
		return fmt.Errorf("%d results for %d operations, all successful", n, len(ops))
	}
	return nil
}
