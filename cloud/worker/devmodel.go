package worker

import (
	"bytes"
	"fmt"

	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

// DevModelConfig is the shape of the stand-in model the coordinator runs
// when --model is empty and no trained cloud model is shipped yet: small
// enough that a CPU serves a few streams at interactive speed, with the
// byte-level vocabulary so any text tokenizes.
var DevModelConfig = lm.Config{Vocab: 258, Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, FFN: 128, ContextLen: 1024}

// DevModel builds a random-weight model of cfg (seeded, so every run and
// every replica generates the same text). It produces gibberish; it exists
// so the scheduling, batching and streaming paths run for real.
func DevModel(cfg lm.Config, seed uint64) (*lm.Model, error) {
	w, err := lm.RandomWeights(cfg, seed)
	if err != nil {
		return nil, fmt.Errorf("dev model: %w", err)
	}
	var buf bytes.Buffer
	meta := map[string]any{"general.name": "phaseless-dev-random"}
	if err := lm.WriteGGUF(&buf, cfg, tokenizer.ByteSpec(), w, meta, lm.F32); err != nil {
		return nil, fmt.Errorf("dev model: %w", err)
	}
	return lm.Read(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
}
