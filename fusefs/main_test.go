package fusefs

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test's goroutines (the FUSE servers, the NFS client's) have ended
// when the package's tests end. go-nfs, the in-process test server, may
// still be finishing a reply to a connection the test already closed: that
// goroutine is the test server's, not the mount's.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/willscott/go-nfs.(*response).finish"))
}
