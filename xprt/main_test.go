package xprt

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test's goroutines (the transport's pollers, reconnects and
// teardowns, the servers') have ended when the package's tests end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
