package xprttest

import "github.com/nfsrdma/nfsrdma/sunrpc"

// NFSv3 (RFC 1813) numbers the server needs to find DDP-eligible results.
const (
	nfsProgram      = 100003
	nfsProcReadlink = 5
	nfsProcRead     = 6
	fattr3Len       = 84 // RFC 1813 §2.6: fattr3 is 21 XDR words
)

// ddpResult finds the DDP-eligible result of an NFSv3 reply (RFC 8267 §3):
// the data of a successful READ (after status, post_op_attr, count, eof and
// the length word) or the path of a successful READLINK (after status,
// post_op_attr and the length word). It returns the offset of the data's
// first byte in rep and its length; ok is false when the reply has none
// (another procedure, an RPC or NFS error, or a malformed reply).
func ddpResult(rep []byte, proc uint32) (off, n int, ok bool) {
	if proc != nfsProcRead && proc != nfsProcReadlink {
		return 0, 0, false
	}
	d := sunrpc.NewDecoder(rep)
	h, err := sunrpc.DecodeReply(d)
	if err != nil || h.Err() != nil {
		return 0, 0, false
	}
	if status := d.Uint32(); status != 0 {
		return 0, 0, false
	}
	if d.Bool() { // post_op_attr: attributes_follow
		d.FixedOpaque(fattr3Len)
	}
	if proc == nfsProcRead {
		d.Uint32() // count
		d.Bool()   // eof
	}
	length := d.Uint32()
	off = d.Offset()
	if d.Err() != nil || uint64(length) > uint64(len(rep)-off) {
		return 0, 0, false
	}
	return off, int(length), true
}
