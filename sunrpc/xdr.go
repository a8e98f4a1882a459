package sunrpc

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// XDR (RFC 4506) encoders append to a caller's slice and never fail; decoders read
// from a Decoder that checks every bound and never panics.
//
// The Decoder keeps the first error it meets ("sticky"): after a failure every read
// returns the zero value and Err reports the failure, so a structure's decoder can
// read all its fields and check once at the end.

// ErrTruncated reports an XDR item that runs past the end of the message.
var ErrTruncated = errors.New("xdr: message truncated")

// LengthError reports a variable-length XDR item (opaque, string or array) whose
// length word exceeds the bound the protocol or the caller allows.
type LengthError struct {
	What string // the item, e.g. "opaque", "array"
	Len  uint32 // the length on the wire
	Max  int    // the bound
}

func (e *LengthError) Error() string {
	return fmt.Sprintf("xdr: %s length %d exceeds limit %d", e.What, e.Len, e.Max)
}

// BoolError reports an XDR boolean (RFC 4506 §4.4) that is neither 0 nor 1.
type BoolError struct{ Value uint32 }

func (e *BoolError) Error() string { return fmt.Sprintf("xdr: invalid boolean %d", e.Value) }

// BulkError reports a DDP-eligible item whose length word does not fit the data
// that travelled apart from the inline message (Reply.Bulk).
type BulkError struct {
	Len  uint32 // the length word on the wire
	Have int    // the bytes available in Reply.Bulk; -1 when the bulk was already consumed
}

func (e *BulkError) Error() string {
	if e.Have < 0 {
		return fmt.Sprintf("xdr: second bulk item (length %d) in one reply", e.Len)
	}
	return fmt.Sprintf("xdr: bulk item length %d exceeds the %d bytes received apart", e.Len, e.Have)
}

// Pad returns the number of zero bytes (0–3) that follow n bytes of opaque data
// to reach a multiple of four (RFC 4506 §3).
func Pad(n int) int { return (4 - n&3) & 3 }

// RoundUp returns n rounded up to a multiple of four.
func RoundUp(n int) int { return n + Pad(n) }

var zeroPad [4]byte

// PadBytes returns the XDR pad (0–3 zero bytes) that follows n bytes of opaque
// data. The result is read-only.
func PadBytes(n int) []byte { return zeroPad[:Pad(n)] }

// AppendUint32 appends an unsigned int (RFC 4506 §4.2).
func AppendUint32(b []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(b, v) }

// AppendInt32 appends an int (RFC 4506 §4.1).
func AppendInt32(b []byte, v int32) []byte { return AppendUint32(b, uint32(v)) }

// AppendUint64 appends an unsigned hyper (RFC 4506 §4.5).
func AppendUint64(b []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(b, v) }

// AppendInt64 appends a hyper (RFC 4506 §4.5).
func AppendInt64(b []byte, v int64) []byte { return AppendUint64(b, uint64(v)) }

// AppendBool appends a bool (RFC 4506 §4.4).
func AppendBool(b []byte, v bool) []byte {
	if v {
		return AppendUint32(b, 1)
	}
	return AppendUint32(b, 0)
}

// AppendFixedOpaque appends fixed-length opaque data and its pad (RFC 4506 §4.9).
func AppendFixedOpaque(b, p []byte) []byte {
	b = append(b, p...)
	return append(b, PadBytes(len(p))...)
}

// AppendOpaque appends variable-length opaque data: length word, data, pad
// (RFC 4506 §4.10).
func AppendOpaque(b, p []byte) []byte {
	b = AppendUint32(b, uint32(len(p)))
	return AppendFixedOpaque(b, p)
}

// AppendString appends a string (RFC 4506 §4.11).
func AppendString(b []byte, s string) []byte {
	b = AppendUint32(b, uint32(len(s)))
	b = append(b, s...)
	return append(b, PadBytes(len(s))...)
}

// Decoder reads XDR items from a received message. For an RPC reply whose
// DDP-eligible result travelled apart (Reply.Bulk), Bulk reads that item's data
// from the separate buffer; everything else is read from the inline bytes.
// The zero Decoder is an empty message.
type Decoder struct {
	buf      []byte
	off      int
	bulk     []byte
	bulkUsed bool
	err      error
}

// NewDecoder returns a Decoder over b. The slices it returns alias b.
func NewDecoder(b []byte) *Decoder { return &Decoder{buf: b} }

// NewBulkDecoder returns a Decoder over an inline message whose DDP-eligible item's
// data was received apart into bulk (nil when it was not; see Reply).
func NewBulkDecoder(inline, bulk []byte) *Decoder { return &Decoder{buf: inline, bulk: bulk} }

// Err returns the first error met, or nil.
func (d *Decoder) Err() error { return d.err }

// Offset returns the number of inline bytes consumed.
func (d *Decoder) Offset() int { return d.off }

// Len returns the number of inline bytes not yet read.
func (d *Decoder) Len() int { return len(d.buf) - d.off }

// Fail records err as the decoder's error unless one is already recorded, so that
// a caller's semantic checks join the same sticky error.
func (d *Decoder) Fail(err error) {
	if d.err == nil && err != nil {
		d.err = err
	}
}

func (d *Decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.buf)-d.off {
		d.err = ErrTruncated
		return nil
	}
	p := d.buf[d.off : d.off+n : d.off+n]
	d.off += n
	return p
}

// Uint32 reads an unsigned int.
func (d *Decoder) Uint32() uint32 {
	p := d.take(4)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint32(p)
}

// Int32 reads an int.
func (d *Decoder) Int32() int32 { return int32(d.Uint32()) }

// Uint64 reads an unsigned hyper.
func (d *Decoder) Uint64() uint64 {
	p := d.take(8)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint64(p)
}

// Int64 reads a hyper.
func (d *Decoder) Int64() int64 { return int64(d.Uint64()) }

// Bool reads a bool; values other than 0 and 1 are an error.
func (d *Decoder) Bool() bool {
	v := d.Uint32()
	if v > 1 {
		d.Fail(&BoolError{Value: v})
		return false
	}
	return v == 1
}

// FixedOpaque reads n bytes of fixed-length opaque data and skips the pad. The
// result aliases the message.
func (d *Decoder) FixedOpaque(n int) []byte {
	p := d.take(n)
	d.take(Pad(n))
	if d.err != nil {
		return nil
	}
	return p
}

// length reads a length word and checks it against max and the bytes left.
func (d *Decoder) length(what string, max int) int {
	n := d.Uint32()
	if d.err != nil {
		return 0
	}
	if max >= 0 && uint64(n) > uint64(max) {
		d.Fail(&LengthError{What: what, Len: n, Max: max})
		return 0
	}
	return int(n)
}

// Opaque reads variable-length opaque data of at most max bytes (max < 0: no
// bound but the message's). The result aliases the message.
func (d *Decoder) Opaque(max int) []byte {
	n := d.length("opaque", max)
	if d.err != nil {
		return nil
	}
	return d.FixedOpaque(n)
}

// String reads a string of at most max bytes (max < 0: no bound but the
// message's).
func (d *Decoder) String(max int) string {
	n := d.length("string", max)
	if d.err != nil {
		return ""
	}
	return string(d.FixedOpaque(n))
}

// ArrayLen reads the element count of a variable-length array of at most max
// elements, each at least minSize bytes on the wire; the count is checked against
// the bytes left so that a hostile count cannot make the caller allocate.
func (d *Decoder) ArrayLen(max, minSize int) int {
	n := d.length("array", max)
	if d.err != nil {
		return 0
	}
	if minSize > 0 && n > d.Len()/minSize {
		d.Fail(ErrTruncated)
		return 0
	}
	return n
}

// Bulk reads a variable-length opaque item that is DDP-eligible (RFC 8267 §3) of
// at most max bytes. When the message's bulk data travelled apart, the length word
// is read inline and the data is taken from the separate buffer (and no pad is
// skipped); otherwise this is Opaque. The result aliases the message or the bulk
// buffer.
func (d *Decoder) Bulk(max int) []byte {
	n := d.length("bulk", max)
	if d.err != nil {
		return nil
	}
	if d.bulk == nil {
		return d.FixedOpaque(n)
	}
	if d.bulkUsed {
		d.Fail(&BulkError{Len: uint32(n), Have: -1})
		return nil
	}
	if n > len(d.bulk) {
		d.Fail(&BulkError{Len: uint32(n), Have: len(d.bulk)})
		return nil
	}
	d.bulkUsed = true
	return d.bulk[:n:n]
}

// Rest returns the unread inline bytes and consumes them.
func (d *Decoder) Rest() []byte { return d.take(d.Len()) }
