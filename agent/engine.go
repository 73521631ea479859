package agent

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/phaseless/phaseless/agent/local"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/transport/llm"
)

// localEngine is the device's engine as the agent holds it.
type localEngine struct {
	gen       llm.Generator
	name      string                      // listed at /v1/models
	kvFaults  func() float64              // nil for external servers
	ready     func(context.Context) error // nil = always ready
	close     func() error
	batchSize int // generations the engine runs at once
}

// DefaultModelConfig is the stand-in edge model used when --model is empty:
// random weights in the shipped model's architecture and byte vocabulary,
// small enough to run under qemu. It produces noise, not answers; it exists
// so that a fresh agent serves the whole local path (API, router, engine,
// telemetry) before a real model is installed. The trained edge model
// replaces it once it is embedded (issue 9).
var DefaultModelConfig = lm.Config{Vocab: 258, Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, FFN: 128, ContextLen: 2048}

// defaultModelSeed makes the stand-in model the same on every device.
const defaultModelSeed = 1

// defaultModel builds the stand-in model through lm's own GGUF writer and
// reader, so it is loaded exactly as a model file would be.
func defaultModel() (*lm.Model, error) {
	w, err := lm.RandomWeights(DefaultModelConfig, defaultModelSeed)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := lm.WriteGGUF(&buf, DefaultModelConfig, lm.ByteTokenizerSpec(), w, map[string]any{"general.name": "phaseless-edge-random"}, lm.F32); err != nil {
		return nil, err
	}
	return lm.Read(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
}

// openEngine builds the local engine from the config: an OpenAI-compatible
// server by URL, the built-in engine with --model, or the stand-in model.
func openEngine(cfg Config) (*localEngine, error) {
	if cfg.LocalURL != "" {
		eng, err := local.NewOpenAI(cfg.LocalURL, cfg.LocalModel, nil)
		if err != nil {
			return nil, err
		}
		name := cfg.LocalModel
		if name == "" {
			name = "local-server"
		}
		return &localEngine{gen: eng, name: name, ready: eng.Ping, close: func() error { return nil }, batchSize: cfg.LocalConcurrency}, nil
	}
	var (
		m    *lm.Model
		err  error
		name = "phaseless-edge-random"
	)
	if cfg.Model != "" {
		m, err = lm.Load(cfg.Model)
		name = strings.TrimSuffix(filepath.Base(cfg.Model), filepath.Ext(cfg.Model))
	} else {
		m, err = defaultModel()
	}
	if err != nil {
		return nil, fmt.Errorf("local model: %w", err)
	}
	ecfg := lm.EngineConfig{MaxBatch: cfg.LocalConcurrency}
	eng, err := lm.NewEngine(m, ecfg)
	if err != nil {
		return nil, fmt.Errorf("local engine: %w", err)
	}
	return &localEngine{
		gen: eng, name: name, close: eng.Close, batchSize: cfg.LocalConcurrency,
		kvFaults: func() float64 { return eng.Stats().KVFaultsPerMs },
	}, nil
}
