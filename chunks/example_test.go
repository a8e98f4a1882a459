package chunks_test

import (
	"fmt"

	"github.com/nfsrdma/nfsrdma/chunks"
)

// An NFSv3 WRITE of 1 MiB + 1 byte to knfsd (4 KiB inline both ways): the
// data goes in a Read chunk at the XDR position after Head, without its pad;
// the Send carries the transport header and Head.
func ExamplePlan_Build() {
	req := chunks.Request{
		Head:     make([]byte, 156), // RPC header, AUTH_SYS, fh, offset, count, stable, length word
		Bulk:     make([]byte, 1<<20+1),
		MaxReply: 148,
	}
	lim := chunks.Limits{InlineSend: 4096, InlineRecv: 4096, MaxSegmentSize: 1 << 20, MaxSegments: 8}
	var p chunks.Plan
	if err := p.Build(&req, lim); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Type, p.Call, "at", p.Position)
	fmt.Println("read segments:", p.ReadSegments)
	fmt.Println("send:", p.Send, "bytes:", p.SendLen)
	fmt.Println("reply:", p.Reply)
	// Output:
	// RDMA_MSG read chunk at 156
	// read segments: [{Bulk 0 1048576} {Bulk 1048576 1}]
	// send: [{Head 0 156}] bytes: 232
	// reply: inline
}
