package sunrpctest

import (
	"bufio"
	"io"

	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/sunrpc/internal/accept"
)

// maxRecord bounds a call record a test server reads.
const maxRecord = 64 << 20

// Conns is the accept loop of a test server: it serves every connection
// accepted on its listeners on a goroutine of its own, and drops them on
// demand. The zero value is ready to use.
type Conns = accept.Conns

// ServeRecords is the serve loop of a test server: it reads call records
// from c (record marking, RFC 5531 §11) and answers each, one at a time,
// with the reply record handle returns (none for a nil reply), until
// reading or writing c fails.
func ServeRecords(c io.ReadWriter, handle func(call []byte) []byte) {
	br := bufio.NewReader(c)
	for {
		call, err := sunrpc.ReadRecord(br, maxRecord)
		if err != nil {
			return
		}
		if rep := handle(call); rep != nil {
			if sunrpc.WriteRecord(c, rep) != nil {
				return
			}
		}
	}
}
