package sunrpc

import (
	"encoding/binary"
	"io"
	"net"
	"slices"
)

// Record marking (RFC 5531 §11): each record is sent as fragments, each preceded
// by a four-byte header whose high bit marks the last fragment and whose low 31
// bits are the fragment's length.
const (
	lastFragment   = 1 << 31
	maxFragmentLen = 1<<31 - 1
)

// WriteRecord writes rec to w as one record (of one fragment when rec is
// under 2 GiB), header and body in one writev on a stream socket.
func WriteRecord(w io.Writer, rec []byte) error {
	bufs := frameRecord([][]byte{rec}, maxFragmentLen)
	_, err := bufs.WriteTo(w)
	return err
}

// frameRecord lays parts out as one record of fragments of at most maxFrag
// bytes, each behind its record-marking header, without copying the parts.
func frameRecord(parts [][]byte, maxFrag int) net.Buffers {
	total := 0
	for _, p := range parts {
		total += len(p)
	}
	bufs := make(net.Buffers, 0, len(parts)+2)
	for {
		n := min(total, maxFrag)
		total -= n
		hdr := uint32(n)
		if total == 0 {
			hdr |= lastFragment
		}
		bufs = append(bufs, binary.BigEndian.AppendUint32(make([]byte, 0, 4), hdr))
		for n > 0 {
			p := parts[0]
			if len(p) == 0 {
				parts = parts[1:]
				continue
			}
			k := min(n, len(p))
			bufs = append(bufs, p[:k])
			parts[0] = p[k:]
			n -= k
		}
		if total == 0 {
			return bufs
		}
	}
}

// ReadRecord reads one record from r, reassembling its fragments; a record
// of more than maxSize bytes fails with *RecordTooLargeError (the stream
// cannot be read on from there), a stream that ends within a record with
// io.ErrUnexpectedEOF.
func ReadRecord(r io.Reader, maxSize int) ([]byte, error) {
	var rec []byte
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return nil, err
		}
		m := binary.BigEndian.Uint32(hdr[:])
		n := int(m &^ lastFragment)
		if len(rec)+n > maxSize {
			return nil, &RecordTooLargeError{Size: len(rec) + n, Max: maxSize}
		}
		rec = slices.Grow(rec, n)
		if _, err := io.ReadFull(r, rec[len(rec):len(rec)+n]); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		rec = rec[:len(rec)+n]
		if m&lastFragment != 0 {
			return rec, nil
		}
	}
}
