// Package cloudmodel ships the default language model of the cloud's built-in
// engine: a byte-level llama model (about 1.7M weights, twice the edge model)
// trained by models/lmtrain on world and science facts the project wrote and
// the in-vehicle corpus.
// The cloud serves it when no --model or --worker is given.
//
// The file is reproduced by `phaselessctl lm train --preset cloud --out
// models/cloudmodel/cloud.gguf` (see docs/models.md); its GGUF metadata records
// the training configuration, the command and the data sources.
package cloudmodel

import (
	"bytes"
	_ "embed"

	"github.com/phaseless/phaseless/models/lm"
)

//go:embed cloud.gguf
var gguf []byte

// Name is the model's name in its metadata and in /v1/models.
const Name = "phaseless-cloud"

// GGUF returns the embedded model file. The slice is shared: do not modify it.
func GGUF() []byte { return gguf }

// Open loads the embedded model into the engine.
func Open() (*lm.Model, error) {
	return lm.Read(bytes.NewReader(gguf), int64(len(gguf)))
}
