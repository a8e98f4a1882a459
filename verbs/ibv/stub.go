//go:build !linux || !cgo

// Package ibv binds nfsrdma's verbs to rdma-core through cgo. This build has
// no cgo or is not Linux: every constructor returns verbs.ErrNoRDMA.
package ibv

import "github.com/nfsrdma/nfsrdma/verbs"

// Fabric is unavailable in this build.
type Fabric struct{ verbs.Fabric }

// Open returns verbs.ErrNoRDMA in this build.
func Open() (*Fabric, error) { return nil, verbs.ErrNoRDMA }

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
