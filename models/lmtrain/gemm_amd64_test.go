package lmtrain

import "testing"

// useGoKernel makes gemm use the portable micro-kernel for the rest of t.
func useGoKernel(t *testing.T) {
	old := haveFMA
	haveFMA = false
	t.Cleanup(func() { haveFMA = old })
}
