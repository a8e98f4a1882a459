//go:build integration

package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma"
	"github.com/nfsrdma/nfsrdma/nfs3"
)

// The library's front door against knfsd: nfsrdma.Mount over RDMA and over
// TCP with a "host:/export" spec naming the server by a host name, as
// nfsrdma's ExampleMount does, then write, read back, list and Close; after
// Close the process must be as before: no goroutine and no RDMA file left.

// serverName is a host name of the bed's server, which these tests give it
// in the guest's /etc/hosts (the guest's root is a throw-away snapshot).
const serverName = "nfsrdma-server"

// nameServer makes serverName resolve to the server through
// net.DefaultResolver.
func nameServer(t *testing.T) {
	t.Helper()
	if addrs, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip4", serverName); err == nil && resolvesToServer(addrs) {
		return
	}
	f, err := os.OpenFile("/etc/hosts", os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatalf("naming the server in /etc/hosts: %v", err)
	}
	_, err = fmt.Fprintf(f, "%s\t%s\n", serverAddr, serverName)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("naming the server in /etc/hosts: %v", err)
	}
	// Go's resolver re-reads /etc/hosts at most every 5 seconds.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		addrs, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip4", serverName)
		if err == nil && resolvesToServer(addrs) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not resolve to %s after its line in /etc/hosts: %v, %v", serverName, serverAddr, addrs, err)
		}
	}
}

// resolvesToServer reports whether addrs hold the server's address (as
// the resolver gives it: IPv4 in IPv6 form for "ip4").
func resolvesToServer(addrs []netip.Addr) bool {
	return slices.ContainsFunc(addrs, func(a netip.Addr) bool { return a.Unmap() == serverAddr })
}

// processState is what a closed mount must give back: the goroutines
// (those of the stacks below, without verbs/ibv's idle-device watch, which
// runs for the process while it has no rdma_cm id, by design) and the
// files of rdma_cm and completion channels (not librdmacm's own device
// contexts, which it keeps until the process exits).
type processState struct {
	goroutines int
	rdmaFiles  map[string]int
}

func currentState(t *testing.T) processState {
	t.Helper()
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var s processState
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if !strings.Contains(g, "ibv.watchIdleDevices") {
			s.goroutines++
		}
	}
	s.rdmaFiles = map[string]int{}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		l, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // the directory's own descriptor
		}
		if l == "/dev/infiniband/rdma_cm" || strings.Contains(l, "infiniband") && strings.HasPrefix(l, "anon_inode:") {
			s.rdmaFiles[l]++
		}
	}
	return s
}

func TestLibraryMount(t *testing.T) {
	nameServer(t)
	// The process's first RDMA connection makes librdmacm open the
	// device's context (its uverbs file and its asynchronous-event file, an
	// [infinibandevent]), which it keeps until the process exits: files are
	// compared from the second RDMA mount on, which must leave none.
	firstRDMA := true
	for _, tc := range []struct {
		name string
		tcp  bool
	}{
		{"rdma", false},
		{"rdma-again", false},
		{"tcp", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			before := currentState(t)
			target, err := nfsrdma.Mount(ctx, serverName+":"+insecureExportDir, &nfsrdma.Options{
				MountOptions: nfs3.MountOptions{NConnect: 2},
				TCP:          tc.tcp,
			})
			if err != nil {
				t.Fatal(err)
			}
			closed := false
			defer func() {
				if !closed {
					target.Close()
				}
			}()
			dir := "library-" + tc.name
			if err := target.RemoveAll(ctx, dir); err != nil {
				t.Fatal(err)
			}
			if _, err := target.Mkdir(ctx, dir, 0o755); err != nil {
				t.Fatal(err)
			}
			// Larger than an inline message and than one WRITE's default
			// size: chunks, several WRITEs and READs over two connections.
			data := bytes.Repeat([]byte("nfsrdma library "), 96<<10) // 1.5 MiB
			f, err := target.OpenFileContext(ctx, dir+"/a", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteContext(ctx, data); err != nil {
				t.Fatal(err)
			}
			if err := f.CloseContext(ctx); err != nil {
				t.Fatal(err)
			}
			got, err := target.ReadFileContext(ctx, dir+"/a")
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read back %d bytes (%v), want the %d written", len(got), err, len(data))
			}
			ents, err := target.ReadDirContext(ctx, dir)
			if err != nil || len(ents) != 1 || ents[0].Name() != "a" {
				t.Fatalf("ReadDirContext(%s) = %v, %v", dir, ents, err)
			}
			if names, err := fs.Glob(target, dir+"/*"); err != nil || !slices.Equal(names, []string{dir + "/a"}) {
				t.Errorf("fs.Glob = %v, %v", names, err)
			}
			// knfsd's refusal reads as what it means.
			_, err = target.Mkdir(ctx, dir+"/a/b", 0o755)
			if !errors.Is(err, nfs3.ErrNotDir) || !strings.Contains(err.Error(), "NFS3ERR_NOTDIR (not a directory)") {
				t.Errorf("mkdir under a file: %v, want NFS3ERR_NOTDIR (not a directory)", err)
			}
			if err := target.RemoveAll(ctx, dir); err != nil {
				t.Fatal(err)
			}
			closed = true
			if err := target.Close(); err != nil {
				t.Fatalf("Close: %v", err) // for RDMA: a verbs resource left on the fabric Mount opened
			}
			var after processState
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				after = currentState(t)
				if after.goroutines <= before.goroutines && maps.Equal(after.rdmaFiles, before.rdmaFiles) || time.Now().After(deadline) {
					break
				}
			}
			if after.goroutines > before.goroutines {
				t.Errorf("%d goroutines after Close, %d before", after.goroutines, before.goroutines)
			}
			if !maps.Equal(after.rdmaFiles, before.rdmaFiles) && !(firstRDMA && !tc.tcp) {
				t.Errorf("RDMA files after Close %v, before %v", after.rdmaFiles, before.rdmaFiles)
			}
			t.Logf("goroutines %d before, %d after; RDMA files %v before, %v after", before.goroutines, after.goroutines, before.rdmaFiles, after.rdmaFiles)
			if !tc.tcp {
				firstRDMA = false
			}
		})
	}
}
