//go:build !linux || !cgo

// Package ibv binds nfsrdma's verbs to rdma-core through cgo. This build has
// no cgo or is not Linux: every constructor returns an error that wraps
// verbs.ErrNoRDMA and says how to build with RDMA.
package ibv

import (
	"fmt"
	"runtime"

	"github.com/nfsrdma/nfsrdma/verbs"
)

// Fabric is unavailable in this build.
type Fabric struct{ verbs.Fabric }

// Open fails in this build, with the fix.
func Open() (*Fabric, error) { return nil, errNoRDMABuild }

// errNoRDMABuild says why this build has no RDMA and how to get one.
var errNoRDMABuild = func() error {
	if runtime.GOOS != "linux" {
		return fmt.Errorf("%w: RDMA is supported on Linux only (this is %s)", verbs.ErrNoRDMA, runtime.GOOS)
	}
	return fmt.Errorf("%w: this binary was built without cgo; rebuild it with CGO_ENABLED=1, a C compiler (gcc) and rdma-core's headers (apt-get install gcc libibverbs-dev librdmacm-dev)", verbs.ErrNoRDMA)
}()

// Quirks are device departures from the verbs specification.
type Quirks struct {
	Driver               string
	WithInvFlags         uint32
	WindowBoundsEnforced bool
	DoubleLocalInvPanics bool
	KickRecvFlush        bool
}

// QuirksOf reports no quirks in this build.
func QuirksOf(d verbs.Device) (Quirks, bool) { return Quirks{}, false }
