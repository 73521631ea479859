package ota

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/phaseless/phaseless/agent/probegate"
	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// An agent update is a new build, and with it may come a new embedded edge
// model, so a probe set gates it too (the bundle's, or the fleet's
// probe-set). Its gate spans the
// two processes of the update: the agent that installs the bundle scores
// the engine it serves on the set before it restarts (the baseline, kept
// in DATA_DIR/ota/probe-baseline.json), and the new build, booted on trial,
// scores its own engine on the same set before it calls itself ready.
// /readyz, which the boot supervisor's health check reads, fails until
// then; a build that scores below baseline − margin abandons its trial and
// exits, so the supervisor boots the committed slot again, and the outcome
// stays in DATA_DIR/ota/probe-gate.json for the status of whichever agent
// runs next.
const (
	probeBaselineFile = "probe-baseline.json"
	probeGateFile     = "probe-gate.json"
)

// probeBaseline is what the installing agent measured.
type probeBaseline struct {
	Slot    string          `json:"slot"`
	Version string          `json:"version"`
	Score   probegate.Score `json:"score"`
}

// trialGate is the probe gate of the agent slot this process runs on
// trial.
type trialGate struct {
	mu   sync.Mutex // guards done, err
	done bool
	err  error
}

// errGateRunning is /readyz's answer while the trial's probe gate runs.
var errGateRunning = errors.New("the probe gate of this trial build is running")

func (o *Updater) otaDir() string { return filepath.Join(o.dataDir, "ota") }

// scoreBaseline measures the engine this agent serves on the probe set of
// the agent bundle just installed into slot. It is a no-op for a bundle
// without one, and for an agent without a built-in engine (an external
// --local-url server keeps its own model across agent builds).
func (o *Updater) scoreBaseline(ctx context.Context, slot string, m firmware.Manifest) error {
	// A baseline of an earlier install never judges this one.
	if err := os.Remove(filepath.Join(o.otaDir(), probeBaselineFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	h := o.hot[firmware.KindModel]
	if h == nil {
		return nil
	}
	set, ok, err := o.probes.forBundle(o.slots.Path(slot), m)
	if !ok || err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, probeGateTimeout)
	defer cancel()
	score, err := probegate.Measure(ctx, set, h.gate.installed(set.Tokens()))
	if err != nil {
		return fmt.Errorf("score the engine in service on the probe set: %w", err)
	}
	raw, _ := json.Marshal(probeBaseline{Slot: slot, Version: m.Version, Score: score})
	return firmware.WriteAtomic(o.otaDir(), probeBaselineFile, raw)
}

// openTrialGate arms the gate when this process runs a trial slot whose
// bundle carries a probe set: until TrialGate has run, TrialReady fails.
func (o *Updater) openTrialGate() {
	if !o.OnTrial() {
		return
	}
	m, err := firmware.VerifyInstalled(o.slots.Path(o.running))
	if err != nil {
		// The supervisor checked the binary before it started this
		// process; a damaged manifest leaves the trial to /readyz alone,
		// as for a bundle without a probe set.
		o.log.Warn("trial slot's manifest does not verify: no probe gate", "slot", o.running, "err", err)
		return
	}
	if _, ok, _ := o.probes.forBundle(o.slots.Path(o.running), m); ok {
		o.trial = &trialGate{} // a probe set that does not verify fails the gate when it runs
	}
}

// TrialReady is the probe gate's part of /readyz: nil unless this process
// runs a trial build whose gate is running or failed.
func (o *Updater) TrialReady() error {
	if o.trial == nil {
		return nil
	}
	o.trial.mu.Lock()
	defer o.trial.mu.Unlock()
	if !o.trial.done {
		return errGateRunning
	}
	return o.trial.err
}

// TrialGate runs the probe gate of the trial build this process is (see
// the comment at the top of this file) and returns when it is done or ctx
// ends; at once when there is none. A failed gate abandons the trial and
// asks the agent to exit.
func (o *Updater) TrialGate(ctx context.Context) {
	if o.trial == nil {
		return
	}
	g, err := o.runTrialGate(ctx)
	if ctx.Err() != nil {
		return // stopped: the next boot of the trial runs it again
	}
	if g != nil {
		raw, _ := json.Marshal(g)
		if werr := firmware.WriteAtomic(o.otaDir(), probeGateFile, raw); werr != nil {
			o.log.Error("keep the probe gate's outcome", "err", werr)
		}
	}
	o.trial.mu.Lock()
	o.trial.done, o.trial.err = true, err
	o.trial.mu.Unlock()
	if err == nil {
		if g != nil {
			o.log.Info("trial build passed its probe gate", "result", g.Result)
		}
		return
	}
	o.log.Error("trial build failed its probe gate: abandoning the trial", "err", err)
	if rerr := o.slots.Rollback(); rerr != nil && !errors.Is(rerr, firmware.ErrNoTrial) {
		o.log.Error("abandon the trial", "err", rerr)
	}
	if o.restart != nil {
		o.restart()
	}
}

func (o *Updater) runTrialGate(ctx context.Context) (*fleetwire.ProbeGate, error) {
	dir := o.slots.Path(o.running)
	m, err := firmware.VerifyInstalled(dir)
	if err != nil {
		return nil, err
	}
	h := o.hot[firmware.KindModel]
	if h == nil {
		return nil, nil // no built-in engine: no embedded model to judge
	}
	set, ok, err := o.probes.forBundle(dir, m)
	if err != nil {
		return nil, fmt.Errorf("probe gate: %w", err)
	}
	if !ok {
		return nil, nil // the fleet's probe-set was cleared since the install
	}
	var base probeBaseline
	raw, err := os.ReadFile(filepath.Join(o.otaDir(), probeBaselineFile))
	if err == nil {
		err = json.Unmarshal(raw, &base)
	}
	if err != nil || base.Slot != o.running || base.Version != m.Version {
		// The installing agent died before it measured: nothing to
		// compare with, so the gate fails closed; the fleet resends.
		return nil, fmt.Errorf("probe gate: no baseline score for %s in slot %s (%v)", m.Version, o.running, err)
	}
	ctx, cancel := context.WithTimeout(ctx, probeGateTimeout)
	defer cancel()
	score, err := probegate.Measure(ctx, set, h.gate.installed(set.Tokens()))
	if err != nil {
		return nil, fmt.Errorf("probe gate: %w", err)
	}
	var override float64
	if o.probeMargin != nil {
		override = o.probeMargin()
	}
	res := probegate.Compare(set, probegate.Margin(set, override), score, base.Score)
	return gateStatus(m.Version, res), res.Err()
}

// agentGate is the outcome of the last agent build's probe gate, nil
// when none ran.
func (o *Updater) agentGate() *fleetwire.ProbeGate {
	raw, err := os.ReadFile(filepath.Join(o.otaDir(), probeGateFile))
	if err != nil {
		return nil
	}
	var g fleetwire.ProbeGate
	if json.Unmarshal(raw, &g) != nil {
		return nil
	}
	return &g
}
