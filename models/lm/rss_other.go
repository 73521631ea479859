//go:build !linux

package lm

// ResidentBytes is unknown off Linux: 0.
func ResidentBytes() int64 { return 0 }
