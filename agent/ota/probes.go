package ota

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/phaseless/phaseless/agent/probegate"
	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/predictor"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// candidate is a hot-swapped artifact loaded and health-checked but not
// serving: swap puts it in service, discard frees it, answers is how the
// probe gate asks it.
type candidate struct {
	swap, discard func()
	answers       answerers
}

// answerers makes the probe gate's Answerer for an artifact, given the
// answer length of the probe set at hand.
type answerers func(tokens int) probegate.Answerer

func modelAnswers(gen llm.Generator) answerers {
	return func(tokens int) probegate.Answerer { return probegate.Generator(gen, tokens) }
}

// routerAnswers judges a router at its own threshold (0.5 without one):
// the fleet's route-threshold moves both routers alike, and a router
// retrained for another threshold declares it in its metadata.
func routerAnswers(p predictor.Predictor) answerers {
	return func(int) probegate.Answerer { return probegate.Router(p, 0) }
}

// probeGateTimeout bounds one gate: a probe set of a few hundred prompts,
// answered twice by a device's CPU, takes well under it.
const probeGateTimeout = 10 * time.Minute

// probeSource finds the probe set that gates an update: the bundle's own
// (firmware.ProbeSetFile), else the one the fleet's probe-set setting
// names.
type probeSource struct {
	key   ed25519.PublicKey // the fleet's: every probe set must be signed by it
	fleet func() string     // the probe-set setting; nil or "": none
}

// forBundle is the probe set for the bundle m extracted into dir; ok is
// false when neither the bundle nor the fleet names one.
func (s probeSource) forBundle(dir string, m firmware.Manifest) (set firmware.ProbeSet, ok bool, err error) {
	if carriesProbes(m) {
		set, err := readProbeSet(dir, s.key)
		return set, true, err
	}
	v := ""
	if s.fleet != nil {
		v = s.fleet()
	}
	if v == "" {
		return firmware.ProbeSet{}, false, nil
	}
	raw := []byte(v)
	if !InlineProbeSet(v) {
		if raw, err = os.ReadFile(v); err != nil {
			return firmware.ProbeSet{}, true, fmt.Errorf("the fleet's probe-set: %w", err)
		}
	}
	if set, err = firmware.OpenProbeSet(raw, s.key); err != nil {
		return firmware.ProbeSet{}, true, fmt.Errorf("the fleet's probe-set: %w", err)
	}
	return set, true, nil
}

// InlineProbeSet reports whether a probe-set setting holds the signed
// probe set itself (as the fleet config sends it) rather than a file's
// path.
func InlineProbeSet(v string) bool { return strings.HasPrefix(strings.TrimSpace(v), "{") }

// probeGate runs the probe set of an update (probeSource) on a candidate
// and on the artifact of its kind in force.
type probeGate struct {
	probeSource
	margin    func() float64 // the fleet's probe-margin setting; nil or 0: the set's own
	installed answerers      // the artifact in force
}

// run is the gate for a bundle extracted into dir: nil and nil when no
// probe set gates it; the outcome when the gate reached a
// verdict; an error when the probe set does not verify or the candidate
// scores below the bar.
func (g probeGate) run(ctx context.Context, kind, dir string, m firmware.Manifest, c candidate) (*fleetwire.ProbeGate, error) {
	set, ok, err := g.forBundle(dir, m)
	if !ok || err != nil {
		return nil, err
	}
	if c.answers == nil || g.installed == nil {
		return nil, fmt.Errorf("a probe set gates this update, but this agent cannot probe a %s", kind)
	}
	var override float64
	if g.margin != nil {
		override = g.margin()
	}
	ctx, cancel := context.WithTimeout(ctx, probeGateTimeout)
	defer cancel()
	res, err := probegate.Run(ctx, set, probegate.Margin(set, override), c.answers(set.Tokens()), g.installed(set.Tokens()))
	if err != nil {
		return nil, fmt.Errorf("probe gate: %w", err)
	}
	return gateStatus(m.Version, res), res.Err()
}

// maxGateResult bounds a gate's line in the status, which the broker
// takes up to fleetwire.MaxStatusBytes (8 KiB) with every kind's; the
// update's command result carries the whole line.
const maxGateResult = 512

func gateStatus(version string, res probegate.Result) *fleetwire.ProbeGate {
	line := res.String()
	if len(line) > maxGateResult {
		line = strings.ToValidUTF8(line[:maxGateResult], "") + "…"
	}
	return &fleetwire.ProbeGate{Version: version, Pass: res.Pass, Result: line}
}

func carriesProbes(m firmware.Manifest) bool {
	for _, f := range m.Files {
		if f.Name == firmware.ProbeSetFile {
			return true
		}
	}
	return false
}

// readProbeSet reads and verifies the probe set of an extracted bundle.
func readProbeSet(dir string, key ed25519.PublicKey) (firmware.ProbeSet, error) {
	raw, err := os.ReadFile(filepath.Join(dir, firmware.ProbeSetFile))
	if err != nil {
		return firmware.ProbeSet{}, err
	}
	return firmware.OpenProbeSet(raw, key)
}

// ProbeGates is the last probe gate of each kind, for the status: the
// hot-swapped kinds' from this process, the agent's from the trial boot
// that ran it (agentgate.go).
func (o *Updater) ProbeGates() map[string]fleetwire.ProbeGate {
	out := map[string]fleetwire.ProbeGate{}
	for kind, h := range o.hot {
		h.gateMu.Lock()
		if h.lastGate != nil {
			out[kind] = *h.lastGate
		}
		h.gateMu.Unlock()
	}
	if g := o.agentGate(); g != nil {
		out[firmware.KindAgent] = *g
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
