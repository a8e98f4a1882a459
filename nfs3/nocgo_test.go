//go:build !cgo

package nfs3

import (
	"errors"
	"strings"
	"testing"

	"github.com/nfsrdma/nfsrdma/verbs"
)

// TestMountRDMAWithoutCgo: a build without cgo has no RDMA, and MountRDMA's
// error says how to build one (run with CGO_ENABLED=0).
func TestMountRDMAWithoutCgo(t *testing.T) {
	_, err := MountRDMA(testCtx(t), "127.0.0.1:/export", nil)
	if !errors.Is(err, verbs.ErrNoRDMA) || !strings.Contains(err.Error(), "CGO_ENABLED=1") {
		t.Fatalf("MountRDMA without cgo: %v; want verbs.ErrNoRDMA saying how to build with cgo", err)
	}
	t.Log(err)
}
