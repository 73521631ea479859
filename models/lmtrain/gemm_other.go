//go:build !amd64

package lmtrain

// kernel computes one full micro-tile; see kernelGo for the contract.
func kernel(k int, a *float32, rs, ps int, b, c *float32, ldc int, alpha, beta float32) {
	kernelPtr(k, a, rs, ps, b, c, ldc, alpha, beta)
}
