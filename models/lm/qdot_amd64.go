package lm

import "github.com/phaseless/phaseless/models/lm/gguf"

// fastDot returns the assembly kernel for d where this CPU has one.
func fastDot(d gguf.DType) func(w, x []byte, nb int) float32 {
	return nil
}
