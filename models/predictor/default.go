package predictor

import (
	_ "embed"
	"sync"
)

// shipped is the trained router, reproduced byte for byte by
// `phaselessctl model train --seed 1 --out models/predictor/predictor.onnx`
// from models/data/routing (see docs/predictor.md).
//
//go:embed predictor.onnx
var shipped []byte

var (
	defaultOnce  sync.Once
	defaultModel *Model
	defaultErr   error
)

// Default returns the shipped predictor embedded in the binary. Every call
// returns the same *Model, which is safe for concurrent use.
func Default() (*Model, error) {
	defaultOnce.Do(func() { defaultModel, defaultErr = Read(shipped) })
	return defaultModel, defaultErr
}

// Shipped returns a copy of the embedded model file, for writing it out or
// putting it in an update bundle.
func Shipped() []byte { return append([]byte(nil), shipped...) }
