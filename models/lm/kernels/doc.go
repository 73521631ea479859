// Package kernels is the arithmetic of the built-in engine's forward pass:
// weight matrices (Matrix) stored F32, F16/BF16 or as a ggml block type,
// their products with a batch of token activations (Matrix.Mul) spread over
// a Pool of workers, and the attention and SwiGLU kernels, in Go and, where
// the CPU has them, in AVX2/AVX-512 (amd64) or NEON/SDOT (arm64) assembly.
//
// A (token, row) product is summed the same way whatever batch the token is
// in and however many workers run, so a sequence's logits do not depend on
// the requests batched with it; the quantized products also give the Go
// kernels' bits with any assembly kernel (qdot.go says how). The tests
// check both, on ARM under qemu too (TestArm64KernelsUnderQEMU).
package kernels
