package faults

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Ledger records what the workloads wrote: for each file (a path relative
// to the export's root) its size and SHA-256, set once the application was
// told the data is safe (WriteAt returned, fsync or close succeeded).
type Ledger struct {
	mu    sync.Mutex
	files map[string]entry
}

type entry struct {
	size int64
	sum  [sha256.Size]byte
}

// Record sets name's expected content.
func (l *Ledger) Record(name string, data []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.files == nil {
		l.files = map[string]entry{}
	}
	l.files[name] = entry{int64(len(data)), sha256.Sum256(data)}
}

// Forget drops name (a file the workload removed).
func (l *Ledger) Forget(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.files, name)
}

// Len is the number of files recorded.
func (l *Ledger) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.files)
}

// Verify reads every recorded file under root (the server's copy of the
// export) and compares size and checksum. It returns the files and bytes
// checked, and an error naming every file that differs or is missing.
func (l *Ledger) Verify(root string) (files int, n int64, err error) {
	l.mu.Lock()
	names := make([]string, 0, len(l.files))
	for name := range l.files {
		names = append(names, name)
	}
	want := make(map[string]entry, len(l.files))
	for k, v := range l.files {
		want[k] = v
	}
	l.mu.Unlock()
	sort.Strings(names)
	var errs []error
	for _, name := range names {
		e := want[name]
		got, rerr := os.ReadFile(filepath.Join(root, name))
		switch {
		case rerr != nil:
			errs = append(errs, fmt.Errorf("%s: %w", name, rerr))
		case int64(len(got)) != e.size:
			errs = append(errs, fmt.Errorf("%s: %d bytes on the server, %d written", name, len(got), e.size))
		case sha256.Sum256(got) != e.sum:
			errs = append(errs, fmt.Errorf("%s: content differs (sha256 %x, written %x)", name, sha256.Sum256(got), e.sum))
		default:
			files++
			n += e.size
		}
	}
	return files, n, errors.Join(errs...)
}

// Compare reports where got first differs from want (-1 when equal).
func Compare(got, want []byte) int {
	if bytes.Equal(got, want) {
		return -1
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return i
		}
	}
	return min(len(got), len(want))
}

// Progress counts a workload's completed operations and verified bytes
// and keeps the time of the last completion.
type Progress struct {
	ops, bytes atomic.Int64
	last       atomic.Int64 // UnixNano of the last Done
	errs       ErrorSet     // unexpected errors
	expected   atomic.Int64 // errors the fault makes expected
}

// Done records an operation that completed with n bytes verified.
func (p *Progress) Done(n int) {
	p.ops.Add(1)
	p.bytes.Add(int64(n))
	p.last.Store(time.Now().UnixNano())
}

// Fail records an unexpected error.
func (p *Progress) Fail(err error) { p.errs.Add(err) }

// Expected records an error the fault makes expected.
func (p *Progress) Expected() { p.expected.Add(1) }

// Ops, Bytes and Unexpected report the counts.
func (p *Progress) Ops() int64          { return p.ops.Load() }
func (p *Progress) Bytes() int64        { return p.bytes.Load() }
func (p *Progress) Unexpected() int     { return p.errs.Len() }
func (p *Progress) ExpectedErrs() int   { return int(p.expected.Load()) }
func (p *Progress) Errors() string      { return p.errs.String() }
func (p *Progress) AddBytes(n int64)    { p.bytes.Add(n) }
func (p *Progress) LastDone() time.Time { return time.Unix(0, p.last.Load()) }

// WaitOps waits until the workload has completed n operations more than
// it had when called, and returns when the last of them completed; false
// when timeout passed first.
func (p *Progress) WaitOps(n int64, timeout time.Duration) (time.Time, bool) {
	target := p.ops.Load() + n
	deadline := time.Now().Add(timeout)
	for p.ops.Load() < target {
		if time.Now().After(deadline) {
			return time.Time{}, false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return p.LastDone(), true
}

// WaitAfter waits for an operation that completes after t and returns the
// time it completed; false when timeout passed first.
func (p *Progress) WaitAfter(t time.Time, timeout time.Duration) (time.Time, bool) {
	deadline := time.Now().Add(timeout)
	for {
		if l := p.LastDone(); l.After(t) {
			return l, true
		}
		if time.Now().After(deadline) {
			return time.Time{}, false
		}
		time.Sleep(5 * time.Millisecond)
	}
}
