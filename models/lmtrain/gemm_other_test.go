//go:build !amd64

package lmtrain

import "testing"

// useGoKernel is a no-op: without amd64 assembly gemm always uses the
// portable micro-kernel.
func useGoKernel(*testing.T) {}
