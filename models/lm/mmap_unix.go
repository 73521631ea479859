//go:build unix

package lm

import (
	"os"
	"syscall"
)

// mapFile maps the whole file read-only and shared, so the weights live in
// the page cache once (not also in a heap copy) and pages come in as the
// forward pass first touches them. ok is false when the file cannot be
// mapped (empty, or a file system without mmap); the caller then reads it.
func mapFile(f *os.File, size int64) (data []byte, unmap func(), ok bool) {
	if size <= 0 || int64(int(size)) != size {
		return nil, nil, false
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, false
	}
	return b, func() { _ = syscall.Munmap(b) }, true
}
