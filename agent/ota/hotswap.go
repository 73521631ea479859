package ota

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/phaseless/phaseless/agent/probegate"
	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/predictor"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// hotArtifact installs one artifact kind that the running agent swaps in
// place — the router model (firmware.KindPredictor, ONNX) or the edge
// language model (firmware.KindModel, GGUF) — from a bundle Updater.Update has
// verified against the fleet key, this board and the version in force.
// The steps, each safe to kill -9 (firmware.Artifacts): install the files
// beside the version in force; load and health-check the new one without
// serving it; make it current on disk; swap it in. A candidate that fails
// its health check is recorded as failed (reported in the status as rolled
// back, so a rollout counts it) and the version in force keeps serving: no
// request ever sees it. At start, the current version is loaded and checked
// again; one that no longer loads gives way to the previous one.
type hotArtifact struct {
	// own is what the agent itself started with for this kind: its chunks
	// are offered to updates of the kind.
	own  Source
	kind string
	ext  string // the payload is the bundle's first file with this extension

	mu    sync.Mutex // guards store; one install at a time
	store *firmware.Artifacts
	// gateMu guards lastGate, apart from mu: the status reads it while
	// an install holds mu through its probe gate.
	gateMu sync.Mutex
	// lastGate is the last probe gate an install went through; nil
	// before one carried a probe set.
	lastGate *fleetwire.ProbeGate

	// load reads an installed file and health-checks it without serving
	// it; the candidate's swap puts it in service.
	load func(ctx context.Context, file string) (candidate, error)
	// gate is the probe gate an install passes after its health check
	// (probes.go).
	gate probeGate
	// changed republishes the device status (nil without a fleet).
	changed func()
	log     *slog.Logger
}

func (h *hotArtifact) state() firmware.ArtifactState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.store.State()
}

// version is the version in force, "" when the agent runs its own.
func (h *hotArtifact) version() string { return h.state().Current }

// payload is the file of dir that holds the artifact.
func (h *hotArtifact) payload(dir string, m firmware.Manifest) (string, error) {
	for _, f := range m.Files {
		if strings.EqualFold(filepath.Ext(f.Name), h.ext) {
			return filepath.Join(dir, filepath.FromSlash(f.Name)), nil
		}
	}
	return "", fmt.Errorf("%s bundle %s has no %s file", h.kind, m.Version, h.ext)
}

func (h *hotArtifact) install(ctx context.Context, v *firmware.Verified) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ver, was := v.Manifest.Version, h.store.State().Current
	if was == "" {
		was = "the agent's own"
	}
	file, err := h.payload("", v.Manifest)
	if err != nil {
		return "", err
	}
	dir, err := h.store.Install(v)
	if err != nil {
		return "", err
	}
	c, err := h.load(ctx, filepath.Join(dir, file))
	var gated string
	if err == nil {
		var g *fleetwire.ProbeGate
		if g, err = h.gate.run(ctx, h.kind, dir, v.Manifest, c); g != nil {
			h.gateMu.Lock()
			h.lastGate, gated = g, g.Result
			h.gateMu.Unlock()
		}
		if err != nil {
			c.discard() // it never serves
		}
	}
	if err != nil {
		if ferr := h.store.Fail(ver); ferr != nil {
			err = errors.Join(err, ferr)
		}
		h.notify()
		return "", fmt.Errorf("%s %s failed its health check and was rolled back; %s keeps serving: %w", h.kind, ver, was, err)
	}
	if err := h.store.Activate(ver); err != nil {
		c.discard() // the loaded engine never serves: free it
		return "", err
	}
	c.swap()
	h.notify()
	h.log.Info("artifact swapped in", "kind", h.kind, "version", ver, "previous", was, "probe_gate", gated)
	if gated != "" {
		gated = "; " + gated
	}
	return fmt.Sprintf("%s %s verified, health-checked and swapped in without a restart (previous: %s)%s", h.kind, ver, was, gated), nil
}

func (h *hotArtifact) notify() {
	if h.changed != nil {
		go h.changed() // the status goes out through the fleet client's queue
	}
}

// boot puts the installed version in force at start: Current, or Previous
// when Current no longer verifies or loads. It returns the version serving,
// "" when the agent's own does.
func (h *hotArtifact) boot(ctx context.Context) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.store.State()
	for _, v := range []string{st.Current, st.Previous} {
		if v == "" {
			continue
		}
		dir := h.store.Path(v)
		m, err := firmware.VerifyInstalled(dir)
		var file string
		if err == nil {
			file, err = h.payload(dir, m)
		}
		var c candidate
		if err == nil {
			c, err = h.load(ctx, file)
		}
		if err == nil {
			if v != h.store.State().Current {
				err = h.store.Activate(v)
			}
			if err == nil {
				c.swap()
				return v
			}
			c.discard()
		}
		h.log.Warn("installed artifact does not load; falling back", "kind", h.kind, "version", v, "err", err)
		if err := h.store.Fail(v); err != nil {
			h.log.Error("record failed artifact", "kind", h.kind, "version", v, "err", err)
		}
	}
	return ""
}

// hotKinds names the kinds this agent swaps in, for refusals.
func (o *Updater) hotKinds() string {
	if len(o.hot) == 0 {
		return "it swaps in no artifact kinds"
	}
	ks := make([]string, 0, len(o.hot))
	for k := range o.hot {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return "it swaps in " + strings.Join(ks, " and ")
}

// Targets are what the hot-swapped kinds replace in the running agent.
type Targets struct {
	// Router is the router model, replaced by firmware.KindPredictor
	// bundles.
	Router *predictor.Swappable
	// Engine is the built-in engine, replaced by firmware.KindModel
	// bundles; nil when an external --local-url server runs, which manages
	// its own model.
	Engine *SwapEngine
	// EngineConfig is what a replacement engine is built with.
	EngineConfig lm.EngineConfig
	// RouterOwn and ModelOwn are the files (or embedded images) the agent
	// started with: an update of their kind fetches only the chunks it
	// does not share with them or an installed version.
	RouterOwn, ModelOwn Source
}

// OpenArtifacts builds the hot-swapped kinds under DATA_DIR/artifacts/KIND
// — the router model always, the edge model when t.Engine is set — and
// puts the version of each that the fleet installed in force, replacing
// what the agent started with. It returns the fleet-installed version now
// serving, by kind; a kind running the agent's own is absent. Call it once,
// before the fleet client runs.
func (o *Updater) OpenArtifacts(ctx context.Context, t Targets) (map[string]string, error) {
	hot := map[string]*hotArtifact{}
	add := func(kind, ext string, own Source, load func(context.Context, string) (candidate, error), installed func(tokens int) probegate.Answerer) error {
		st, err := firmware.OpenArtifacts(filepath.Join(o.dataDir, "artifacts", kind))
		if err != nil {
			return fmt.Errorf("%s artifacts: %w", kind, err)
		}
		if st.Discarded != nil {
			o.log.Warn("installed artifacts' state is damaged; running the agent's own until the fleet updates it", "kind", kind, "err", st.Discarded)
		}
		hot[kind] = &hotArtifact{kind: kind, ext: ext, own: own, store: st, load: load, log: o.log, changed: o.changed,
			gate: probeGate{probeSource: o.probes, margin: o.probeMargin, installed: installed}}
		return nil
	}
	if err := add(firmware.KindPredictor, ".onnx", t.RouterOwn, predictorLoader(t.Router, o.log), routerAnswers(t.Router)); err != nil {
		return nil, err
	}
	if t.Engine != nil {
		if err := add(firmware.KindModel, ".gguf", t.ModelOwn, modelLoader(t.Engine, t.EngineConfig), modelAnswers(t.Engine)); err != nil {
			return nil, err
		}
	}
	o.hot = hot
	inForce := map[string]string{}
	for kind, h := range o.hot {
		if v := h.boot(ctx); v != "" {
			o.log.Info("fleet-installed artifact in force", "kind", kind, "version", v)
			inForce[kind] = v
		}
	}
	return inForce, nil
}

// predictorLoader's health check is predictor.Validate: the model takes
// this build's feature vector and answers a probability for each probe
// text.
func predictorLoader(p *predictor.Swappable, log *slog.Logger) func(context.Context, string) (candidate, error) {
	return func(_ context.Context, file string) (candidate, error) {
		m, err := predictor.Load(file)
		if err != nil {
			return candidate{}, err
		}
		if err := predictor.Validate(m); err != nil {
			return candidate{}, err
		}
		return candidate{swap: func() {
			if err := p.SwapTo(m); err != nil { // validated above: not expected
				log.Error("swap predictor", "err", err)
			}
		}, discard: func() {}, answers: routerAnswers(m)}, nil
	}
}

// modelHealthTimeout bounds the edge model's health check.
const modelHealthTimeout = 60 * time.Second

// modelLoader's health check builds an engine on the new model and has it
// answer a short chat: it must produce tokens without an error.
func modelLoader(sw *SwapEngine, cfg lm.EngineConfig) func(context.Context, string) (candidate, error) {
	return func(ctx context.Context, file string) (candidate, error) {
		m, err := lm.Load(file)
		if err != nil {
			return candidate{}, err
		}
		eng, err := lm.NewEngine(m, cfg)
		if err != nil {
			return candidate{}, err
		}
		hctx, cancel := context.WithTimeout(ctx, modelHealthTimeout)
		defer cancel()
		if err := EngineAnswers(hctx, eng); err != nil {
			eng.Close()
			return candidate{}, fmt.Errorf("health check: %w", err)
		}
		return candidate{swap: func() { sw.Replace(eng, nil) }, discard: func() { eng.Close() }, answers: modelAnswers(eng)}, nil
	}
}

// EngineAnswers asks eng for a few tokens through its scheduler, the code
// path requests take: it is the edge model's health check before a swap,
// and the agent's selfcheck runs it on the shipped model.
func EngineAnswers(ctx context.Context, eng llm.Generator) error {
	fin, err := eng.Generate(ctx, &llm.Request{ID: "health-check", MaxTokens: 4, Seed: 1, Messages: []llm.Message{{Role: "user", Content: "selfcheck"}}}, func(llm.Token) error { return nil })
	if err != nil {
		return err
	}
	if fin.CompletionTokens < 1 {
		return fmt.Errorf("engine produced no token (finish %q)", fin.FinishReason)
	}
	return nil
}
