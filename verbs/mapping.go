package verbs

import (
	"fmt"
	"os"
	"syscall"
)

// Mapping is anonymous memory from mmap, outside the Go heap, for
// registration with a device. The garbage collector never moves or frees
// it; it lives until Close.
type Mapping struct {
	b []byte
}

// Map maps n bytes (rounded up to the page size) of zeroed anonymous memory.
func Map(n int) (*Mapping, error) {
	if n <= 0 {
		return nil, fmt.Errorf("verbs: mapping of %d bytes", n)
	}
	page := os.Getpagesize()
	n = (n + page - 1) / page * page
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, &OpError{Verb: "mmap", Object: fmt.Sprintf("%d bytes", n), Err: err}
	}
	return &Mapping{b: b}, nil
}

// Bytes is the mapped memory.
func (m *Mapping) Bytes() []byte { return m.b }

// Close unmaps the memory. Close every MR over it first. Close is idempotent.
func (m *Mapping) Close() error {
	if m.b == nil {
		return nil
	}
	err := syscall.Munmap(m.b)
	m.b = nil
	return err
}
