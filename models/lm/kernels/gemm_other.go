//go:build !amd64

package kernels

// quantizeBlock is quantizeAct: no assembly quantizer on this architecture.
func quantizeBlock(dst []byte, x []float32, superK bool) { quantizeAct(dst, x, superK) }
