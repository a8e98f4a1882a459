package sunrpc_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// An AUTH_SYS credential for the calls of a Client.
func ExampleAuthSys() {
	cred, err := (&sunrpc.AuthSys{MachineName: "client1", UID: 1000, GID: 1000, GIDs: []uint32{4, 27}}).Credential()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(cred.Flavor, len(cred.Body))
	// Output: AUTH_SYS 36
}

// A call over TCP with nfs(5)-style soft retransmission: the arguments are
// encoded with the append-style helpers, the results read from the Result's
// Decoder.
func ExampleClient_Call() {
	ctx := context.Background()
	tr, err := sunrpc.DialTCP(ctx, "server.example:111", nil)
	if err != nil {
		log.Print(err)
		return
	}
	c, err := sunrpc.NewClient(tr, sunrpc.ClientConfig{
		Prog: sunrpc.PortmapProg, Vers: sunrpc.PortmapVers,
		Retry: sunrpc.RetryPolicy{Timeout: 6 * time.Second, Retrans: 2},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	args := sunrpc.AppendMapping(nil, &sunrpc.Mapping{Prog: 100003, Vers: 3, Prot: sunrpc.IPProtoTCP})
	res, err := c.Call(ctx, sunrpc.PmapProcGetPort, &sunrpc.Args{Head: args, MaxResults: 4})
	if err != nil {
		log.Fatal(err) // *sunrpc.AcceptError, *sunrpc.TimeoutError, ...
	}
	defer res.Release()
	port := res.Uint32()
	if err := res.Err(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("nfs is on port", port)
}
