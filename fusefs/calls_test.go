package fusefs

import "github.com/nfsrdma/nfsrdma/sunrpc"

// callProc reads the program and procedure of a call message's head, for
// the fake and failing transports of the tests.
func callProc(head []byte) (prog, proc uint32, ok bool) { return sunrpc.CallProcedure(head) }
