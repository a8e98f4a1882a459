package xprttest

import (
	"errors"

	"github.com/go-git/go-billy/v5"

	"github.com/nfsrdma/nfsrdma/nfs3/gonfstest"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// Handler answers RPC calls. call is the whole RPC call message (RFC 5531
// §9), Read chunks already pulled and spliced in at their XDR positions;
// the result is the whole RPC reply message, or nil to send no reply. It is
// called concurrently, on many calls at once.
type Handler interface {
	ServeRPC(call []byte) (reply []byte)
}

// HandlerFunc is a function as a Handler.
type HandlerFunc func(call []byte) []byte

// ServeRPC calls f.
func (f HandlerFunc) ServeRPC(call []byte) []byte { return f(call) }

// NullHandler answers every well-formed call with an accepted, successful
// reply with no results (what the NULL procedure returns, RFC 5531 §12.1)
// and drops anything else.
func NullHandler() Handler {
	return HandlerFunc(func(call []byte) []byte {
		h, err := sunrpc.DecodeCall(sunrpc.NewDecoder(call))
		if err != nil {
			return nil
		}
		return sunrpc.AppendReply(nil, &sunrpc.ReplyHeader{XID: h.XID, Stat: sunrpc.MsgAccepted,
			Verf: sunrpc.AuthNone, Accept: sunrpc.Success})
	})
}

// NewNFSHandler serves NFSv3 and MOUNT v3 for fs with
// github.com/willscott/go-nfs: the tests' one go-nfs fixture,
// gonfstest.RPCServer (null authentication, handles cached, calls carried to
// go-nfs over pooled in-memory connections and served concurrently). The
// returned function stops go-nfs and waits for its goroutines; it is
// idempotent.
//
// go-nfs logs through its package-level logger (gonfs.Log): quiet it in
// TestMain (gonfstest.Quiet) if its noise bothers.
func NewNFSHandler(fs billy.Filesystem) (Handler, func() error, error) {
	if fs == nil {
		return nil, nil, errors.New("xprttest: NewNFSHandler: nil file system")
	}
	s := gonfstest.NewRPCServer(fs)
	return s, s.Close, nil
}
