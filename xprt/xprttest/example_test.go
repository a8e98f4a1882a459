package xprttest_test

import (
	"fmt"

	"github.com/go-git/go-billy/v5/memfs"

	"github.com/nfsrdma/nfsrdma/verbs/sim"
	"github.com/nfsrdma/nfsrdma/xprt/xprttest"
)

// A server answering NFSv3 and MOUNT from an in-memory file system, which
// drops the reply to the third call it receives.
func ExampleStart() {
	f := sim.NewFabric()
	defer f.Close()
	h, stop, err := xprttest.NewNFSHandler(memfs.New())
	if err != nil {
		panic(err)
	}
	defer stop()
	srv, err := xprttest.Start(xprttest.Config{Fabric: f, Handler: h,
		Misbehave: xprttest.Misbehavior{OnCall: 3, Drop: true}})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	// Dial srv.Addr() on f with the client transport; inspect srv.Stats()
	// and srv.QPs() for fault injection.
	fmt.Println(srv.Stats().Connections)
	// Output: 0
}
