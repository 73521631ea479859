//go:build !amd64 && !arm64 && !(arm && arm.6)

package kernels

import "github.com/phaseless/phaseless/models/lm/gguf"

// fastDot: no assembly kernels on this architecture (nor on arm with
// software float, GOARM=5: qdot_arm.go), the Go kernels run.
func fastDot(gguf.DType) func(w, x []byte, nb int) float32 { return nil }

// fastDot4: none here.
func fastDot4(gguf.DType) func(w, x []byte, stride, nb int, out *[4]float32) { return nil }
