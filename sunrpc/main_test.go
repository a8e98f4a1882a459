package sunrpc

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if goroutines outlive them (a
// transport's reader, a fake server).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
