// Package edgemodel ships the default language model of the agent's local engine:
// a byte-level llama model (about 0.8M weights) trained by models/lmtrain to
// answer short in-vehicle requests (car, navigation, climate, media, weather,
// time). The agent runs it when no --model is given.
//
// The file is reproduced by `phaselessctl lm train --preset edge --out
// models/edgemodel/edge.gguf` (see docs/models.md); its GGUF metadata records
// the training configuration, the command and the data sources.
package edgemodel

import (
	"bytes"
	_ "embed"

	"github.com/phaseless/phaseless/models/lm"
)

//go:embed edge.gguf
var gguf []byte

// Name is the model's name in its metadata and in /v1/models.
const Name = "phaseless-edge"

// GGUF returns the embedded model file. The slice is shared: do not modify it.
func GGUF() []byte { return gguf }

// Open loads the embedded model into the engine.
func Open() (*lm.Model, error) {
	return lm.Read(bytes.NewReader(gguf), int64(len(gguf)))
}
