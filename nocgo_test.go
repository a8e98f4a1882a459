//go:build !cgo

package nfsrdma

import (
	"errors"
	"strings"
	"testing"

	"github.com/nfsrdma/nfsrdma/verbs"
)

// TestMountWithoutCgo: a build without cgo has no RDMA, and Mount's error
// says how to build one (run with CGO_ENABLED=0).
func TestMountWithoutCgo(t *testing.T) {
	_, err := Mount(testCtx(t), "127.0.0.1:/export", nil)
	if !errors.Is(err, verbs.ErrNoRDMA) || !strings.Contains(err.Error(), "CGO_ENABLED=1") {
		t.Fatalf("Mount without cgo: %v; want verbs.ErrNoRDMA saying how to build with cgo", err)
	}
	t.Log(err)
}
