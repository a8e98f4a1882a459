package fusefs

import (
	"context"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/fusefs/fusefstest"
)

// The backends of the test server (see fusefstest).
const (
	backendMem          = fusefstest.Mem
	backendDisk         = fusefstest.Disk
	backendDiskSquashed = fusefstest.DiskSquashed
)

func startGoNFS(t testing.TB, backend string) *fusefstest.Server {
	return fusefstest.Start(t, backend)
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}
