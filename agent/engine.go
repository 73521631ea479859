package agent

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/phaseless/phaseless/agent/local"
	"github.com/phaseless/phaseless/agent/ota"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/edgemodel"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/textfeat"
	"github.com/phaseless/phaseless/transport/httpapi"
)

// localEngine is the device's engine as the agent holds it.
type localEngine struct {
	gen  llm.Generator
	name string // listed at /v1/models
	// sampling is what the current model declares for omitted sampling
	// fields, listed at /v1/models; nil for external servers, whose
	// listing is their own.
	sampling func() llm.Sampling
	kvFaults func() float64 // recent faults per ms; nil for external servers
	// kvFaultsTotal is the cumulative count behind kvFaults (nil for
	// external servers), exported as a counter for PromQL's rate().
	kvFaultsTotal func() uint64
	ready         func(context.Context) error // nil = always ready
	close         func() error
	batchSize     int // generations the engine runs at once
	// templateSkipped: the model has a chat template this build does not
	// render (the device build leaves Jinja out, lm_nojinja).
	templateSkipped bool
	// probe measures a request on the shipped edge model for the router
	// (route.Config.Probe), which runs it only for a predictor that reads
	// the probe block (the shipped one does not); nil for external servers
	// and for other models, whose probe numbers no predictor was trained on.
	probe func(text string) textfeat.Probe
	// servesTools reports whether the engine serves a request's tools
	// (route.Config.LocalTools); nil for external servers, which serve any.
	servesTools func(tools []llm.Tool) bool
	// swap is the built-in engine, replaceable by the fleet's edge-model
	// artifacts; nil for an external server.
	swap *ota.SwapEngine
	// cfg is what a replacement engine is built with.
	engineCfg lm.EngineConfig
}

// PromptCacheDir is the built-in engine's prompt cache under the data
// directory (--prompt-cache-bytes).
const PromptCacheDir = "prompt-cache"

// defaultModel is the shipped edge model (models/edgemodel), embedded in
// the binary so a fresh agent answers in-car requests with no file to
// install. It is 1.6 MiB of the agent's size budget.
func defaultModel() (*lm.Model, error) { return edgemodel.Open() }

// modelSource is the edge model the agent started with, whose chunks an
// edge-model update need not fetch.
func modelSource(cfg Config) ota.Source {
	switch {
	case cfg.LocalURL != "":
		return ota.Source{}
	case cfg.Model != "":
		return ota.Source{Path: cfg.Model}
	}
	return ota.Source{Bytes: edgemodel.GGUF(), Name: "edge.gguf"}
}

// openEngine builds the local engine from the config: an OpenAI-compatible
// server by URL, the built-in engine with --model, or the shipped edge model.
func openEngine(cfg Config, log *slog.Logger) (*localEngine, error) {
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
		name = edgemodel.Name
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
	ecfg := lm.EngineConfig{MaxBatch: cfg.LocalConcurrency, Threads: cfg.Threads, Logger: log}
	if cfg.PromptCacheBytes > 0 {
		ecfg.PromptCacheDir, ecfg.PromptCacheBytes = filepath.Join(cfg.DataDir, PromptCacheDir), cfg.PromptCacheBytes
	}
	eng, err := lm.NewEngine(m, ecfg)
	if err != nil {
		return nil, fmt.Errorf("local engine: %w", err)
	}
	var probeModel *lm.Model
	if cfg.Model == "" {
		probeModel = m
	}
	sw := ota.NewSwapEngine(eng, probeModel)
	le := &localEngine{
		gen: sw, swap: sw, engineCfg: ecfg, name: name, close: sw.Close, batchSize: cfg.LocalConcurrency,
		kvFaults:        func() float64 { e, _ := sw.Current(); return e.Stats().KVFaultsPerMs },
		kvFaultsTotal:   func() uint64 { e, _ := sw.Current(); return e.Stats().KVFaults },
		templateSkipped: m.ChatTemplateSkipped(),
		sampling: func() llm.Sampling {
			e, _ := sw.Current()
			if le, ok := e.(*lm.Engine); ok {
				return le.Model().Sampling()
			}
			return llm.Sampling{}
		},
		servesTools: func(tools []llm.Tool) bool {
			// The model serving now: a fleet update may bring another.
			e, _ := sw.Current()
			if le, ok := e.(*lm.Engine); ok {
				return le.Model().ServesTools(tools)
			}
			return false
		},
	}
	if probeModel != nil {
		le.probe = func(text string) textfeat.Probe {
			if _, pm := sw.Current(); pm != nil {
				return probeText(pm, text)
			}
			return textfeat.Probe{} // a fleet-installed model: the probe block stays unmeasured
		}
	}
	return le, nil
}

// probeText is the router's probe of a request on the local model: its
// prefill and textfeat.ProbeSteps greedy steps on one core, so it does not
// take the engine's others (docs/predictor.md measures its cost).
func probeText(m *lm.Model, text string) textfeat.Probe {
	p := m.ProbeChat(text, textfeat.ProbeSteps, textfeat.ProbeMaxTokens, 1)
	return textfeat.Probe{PromptNLL: p.PromptNLL, Entropy: p.Entropy, TopProb: p.TopProb}
}

// listModels is GET /v1/models beyond "auto": the local engine's model,
// with the sampling it declares.
func (a *Agent) listModels() []httpapi.Model {
	m := httpapi.Model{ID: a.engine.name, OwnedBy: "device"}
	if a.engine.sampling != nil {
		m.Sampling = a.engine.sampling()
	}
	return []httpapi.Model{m}
}
