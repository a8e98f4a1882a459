//go:build integration

package integration

import (
	"fmt"
	"net/netip"
	"os"
	"testing"
)

// The bed's fixed facts (integration/testbed/guest/testbed-init).
var (
	serverAddr = netip.MustParseAddr("10.99.0.1")
	nfsRDMA    = netip.AddrPortFrom(serverAddr, 20049)
	// exportDir is exported with exports(5)'s defaults (secure,
	// root_squash): root acts as nobody (65534) there, as on a stock server.
	exportDir = "/export"
	// insecureExportDir is exported insecure,no_root_squash, for the tests
	// that need an ordinary source port or root acting as root.
	insecureExportDir  = "/export-insecure"
	insecureExportSpec = serverAddr.String() + ":" + insecureExportDir
)

func TestMain(m *testing.M) {
	if mode := os.Getenv("NFSRDMA_LOCK_HELPER"); mode != "" {
		os.Exit(lockHelper(mode, os.Getenv("NFSRDMA_LOCK_FILE"))) // lock_test.go's second process
	}
	if mode := os.Getenv(libraryMemlockEnv); mode != "" {
		os.Exit(libraryMemlockChild(mode)) // library_memlock_test.go's child
	}
	if os.Getenv(runnerEnv) != "" {
		os.Exit(runnerMain()) // runner_test.go: the bed's commands
	}
	if os.Getenv("TESTBED_GUEST") != "1" {
		fmt.Fprintln(os.Stderr, "integration: these tests run inside the test-bed guest (knfsd over Soft-RoCE).\n"+
			"Run them with 'make test', or build with 'go test -c -tags integration ./integration' and run the binary with\n"+
			"'go run ./integration/cmd/testbed run -- ./integration.test -test.v'.")
		os.Exit(2)
	}
	if err := startRunner(); err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
