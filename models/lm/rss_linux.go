package lm

import (
	"bytes"
	"os"
	"strconv"
)

// ResidentBytes is this process's resident set size (from /proc/self/statm),
// or 0 when it cannot be read. Bench reports it to show that a loaded,
// memory-mapped model costs its file size once, not twice.
func ResidentBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(string(f[1]), 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}
