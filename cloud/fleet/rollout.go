package fleet

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/phaseless/phaseless/firmware"
	tfleet "github.com/phaseless/phaseless/transport/fleet"
)

// A rollout takes one signed artifact to the devices a selector picks, in
// stages: each stage is a cumulative share of those devices, chosen by a
// stable hash of (rollout, device) so the same devices go first however
// often the controller runs. A stage advances once each of its devices has
// succeeded or failed and the soak time has passed with the failure share
// at or under MaxFailures; otherwise the rollout halts by itself and waits
// for a person. Devices whose update fails roll back on their own (the boot
// supervisor never commits a trial that is not healthy).
//
// The controller (StepRollouts) is a pure function of the stored rollout,
// the registry and the clock, run on a timer and after device messages, so
// a cloud restart resumes where it stopped.

// Rollout states.
const (
	RolloutRunning = "running"
	RolloutPaused  = "paused"
	RolloutHalted  = "halted" // a stage failed too often: nothing more is sent
	RolloutAborted = "aborted"
	RolloutDone    = "done"
)

// States of one device in a rollout.
const (
	DeviceUpdating  = "updating"
	DeviceSucceeded = "succeeded"
	DeviceFailed    = "failed"
)

// RolloutSpec is what an operator asks for.
type RolloutSpec struct {
	// Artifact is the id PutArtifact returned (the bundle's sha256).
	Artifact string `json:"artifact"`
	// Stages are cumulative shares of the selected devices, ascending,
	// ending at 1 (e.g. 0.01, 0.1, 0.5, 1). Each stage has at least one
	// device.
	Stages []float64 `json:"stages"`
	// Select picks devices by label; every key must match. "board" and
	// "version" come from the device's status, others from its labels.
	Select map[string]string `json:"select,omitempty"`
	// MaxFailures is the share of a stage's devices that may fail before
	// the rollout halts (default 0.05).
	MaxFailures float64 `json:"max_failures"`
	// Soak is how long a settled stage is watched before the next starts.
	Soak Duration `json:"soak"`
	// UpdateTimeout fails a device that has neither succeeded nor failed
	// by then (default 30m), so an offline device cannot hold a stage.
	UpdateTimeout Duration `json:"update_timeout,omitzero"`
}

// Rollout is a rollout and where it stands.
type Rollout struct {
	ID   string      `json:"id"`
	Spec RolloutSpec `json:"spec"`
	// From the artifact's manifest.
	Kind    string `json:"kind"`
	Version string `json:"version"`
	Board   string `json:"board"`
	URL     string `json:"url"` // where devices download the artifact

	State  string `json:"state"`
	Reason string `json:"reason,omitempty"` // why it halted, or who paused/aborted it
	// Stage is the index into Spec.Stages being rolled out now.
	Stage          int       `json:"stage"`
	StageStartedAt time.Time `json:"stage_started_at"`
	// StageSettledAt is when every device of the stage had an outcome;
	// the soak counts from it. Zero while some are still updating.
	StageSettledAt time.Time `json:"stage_settled_at,omitzero"`
	// Selected is how many devices the selector matched at the last step.
	Selected int                       `json:"selected"`
	Devices  map[string]*RolloutDevice `json:"devices"`
	Created  time.Time                 `json:"created"`
	Updated  time.Time                 `json:"updated"`
}

// RolloutDevice is one device's part in a rollout.
type RolloutDevice struct {
	Stage     int       `json:"stage"`
	State     string    `json:"state"`
	From      string    `json:"from,omitempty"`    // the version it ran when the update was sent
	Command   string    `json:"command,omitempty"` // the update command's id
	Error     string    `json:"error,omitempty"`
	IssuedAt  time.Time `json:"issued_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Progress counts a rollout's devices by state, for its current stage and
// overall.
type Progress struct {
	StageDevices, StageSucceeded, StageFailed, StageUpdating int
	Succeeded, Failed, Updating                              int
}

// Progress summarises r.
func (r *Rollout) Progress() Progress {
	var p Progress
	for _, d := range r.Devices {
		cur := d.Stage == r.Stage
		if cur {
			p.StageDevices++
		}
		switch d.State {
		case DeviceSucceeded:
			p.Succeeded++
			if cur {
				p.StageSucceeded++
			}
		case DeviceFailed:
			p.Failed++
			if cur {
				p.StageFailed++
			}
		default:
			p.Updating++
			if cur {
				p.StageUpdating++
			}
		}
	}
	return p
}

// Duration is a time.Duration that reads and writes JSON as "10m".
type Duration time.Duration

// MarshalJSON writes d as Go duration text.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads Go duration text, or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var secs float64
		if err := json.Unmarshal(b, &secs); err != nil {
			return errors.New(`duration: want text like "10m" or seconds`)
		}
		*d = Duration(secs * float64(time.Second))
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// ParseStages reads "1%,10%,50%,100%" (or shares: "0.01,0.1,0.5,1").
func ParseStages(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		div := 1.0
		if strings.HasSuffix(f, "%") {
			f, div = strings.TrimSuffix(f, "%"), 100
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return nil, fmt.Errorf("stage %q: want a percentage like 10%% or a share like 0.1", f)
		}
		out = append(out, v/div)
	}
	return out, nil
}

func (s *RolloutSpec) fillDefaults() {
	if s.MaxFailures == 0 {
		s.MaxFailures = 0.05
	}
	if s.UpdateTimeout == 0 {
		s.UpdateTimeout = Duration(30 * time.Minute)
	}
}

// Validate names the first bad field.
func (s *RolloutSpec) Validate() error {
	switch {
	case s.Artifact == "":
		return errors.New("artifact is required")
	case len(s.Stages) == 0:
		return errors.New("stages: at least one is required")
	case s.MaxFailures < 0 || s.MaxFailures > 1:
		return fmt.Errorf("max_failures %g must be a share in [0,1]", s.MaxFailures)
	case s.Soak < 0:
		return errors.New("soak must not be negative")
	case s.UpdateTimeout <= 0:
		return errors.New("update_timeout must be positive")
	}
	prev := 0.0
	for i, v := range s.Stages {
		if !(v > prev) || v > 1 {
			return fmt.Errorf("stages: stage %d (%g) must be above the previous one and at most 1 (100%%)", i+1, v)
		}
		prev = v
	}
	if prev != 1 {
		return fmt.Errorf("stages: the last stage must be 100%%, got %g", prev*100)
	}
	for k := range s.Select {
		if k == "" {
			return errors.New("select: empty label name")
		}
	}
	return nil
}

// ErrUnknownRollout is returned for a rollout id the store does not hold.
var (
	ErrUnknownRollout = errors.New("unknown rollout")
	errUnknownAction  = errors.New("unknown rollout action: want pause, resume or abort")
)

// SetLabels merges labels into a device's (a nil value removes one). The
// device need not have connected yet.
func (m *Manager) SetLabels(id string, labels map[string]*string) (*Device, error) {
	if err := tfleet.ValidateDeviceID(id); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	for k := range labels {
		if k == "" || k == "board" || k == "version" {
			return nil, fmt.Errorf("%w: label name %q is empty or reserved (board and version come from the device)", ErrBadRequest, k)
		}
	}
	return m.st.updateDevice(id, m.now(), true, func(d *Device) error {
		if d.Labels == nil {
			d.Labels = map[string]string{}
		}
		for k, v := range labels {
			if v == nil {
				delete(d.Labels, k)
			} else {
				d.Labels[k] = *v
			}
		}
		return nil
	})
}

// CreateRollout starts a rollout of a stored artifact.
func (m *Manager) CreateRollout(ctx context.Context, spec RolloutSpec) (*Rollout, error) {
	spec.fillDefaults()
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	art, err := m.Artifact(spec.Artifact)
	if err != nil {
		return nil, err
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	now := m.now()
	r := &Rollout{
		ID: "r-" + hex.EncodeToString(rnd[:]), Spec: spec,
		Kind: art.Kind, Version: art.Version, Board: art.Board, URL: m.artifactURL(art.ID),
		State: RolloutRunning, StageStartedAt: now, Devices: map[string]*RolloutDevice{},
		Created: now, Updated: now,
	}
	if err := m.st.putRollout(r); err != nil {
		return nil, err
	}
	m.StepRollouts(ctx)
	return m.Rollout(r.ID)
}

// Rollouts lists every rollout, newest first.
func (m *Manager) Rollouts() ([]*Rollout, error) {
	rs, err := m.st.rollouts()
	sort.Slice(rs, func(i, j int) bool { return rs[i].Created.After(rs[j].Created) })
	return rs, err
}

// Rollout returns one rollout, or ErrUnknownRollout.
func (m *Manager) Rollout(id string) (*Rollout, error) {
	r, err := m.st.rollout(id)
	if err == nil && r == nil {
		err = ErrUnknownRollout
	}
	return r, err
}

// SetRolloutState pauses ("paused"), resumes ("running") or aborts
// ("aborted") a rollout. Resuming a halted rollout is how an operator
// overrides the failure bound: the halted stage is judged again from now.
func (m *Manager) SetRolloutState(ctx context.Context, id, state, reason string) (*Rollout, error) {
	m.rolloutMu.Lock() // a step in progress would write back the old state
	err := m.st.updateRollout(id, func(r *Rollout) error {
		switch {
		case r.State == RolloutDone || r.State == RolloutAborted:
			return fmt.Errorf("%w: rollout %s is %s", ErrBadRequest, id, r.State)
		case state == RolloutPaused || state == RolloutAborted:
		case state == RolloutRunning:
			if r.State == RolloutHalted {
				r.StageSettledAt = time.Time{}
			}
		default:
			return fmt.Errorf("%w: state %q: want running, paused or aborted", ErrBadRequest, state)
		}
		r.State, r.Reason, r.Updated = state, reason, m.now()
		return nil
	})
	m.rolloutMu.Unlock()
	if err != nil {
		return nil, err
	}
	m.StepRollouts(ctx)
	return m.Rollout(id)
}

// StepRollouts advances every active rollout once: it reads outcomes from
// the registry, sends the update to the devices of the current stage that
// have not had it, and moves to the next stage or halts. It is safe to call
// at any time and from several goroutines (the store serialises it).
func (m *Manager) StepRollouts(ctx context.Context) {
	m.rolloutMu.Lock()
	defer m.rolloutMu.Unlock()
	rs, err := m.st.rollouts()
	if err != nil {
		m.log.Error("rollouts: list", "err", err)
		return
	}
	var devs []*Device
	for _, r := range rs {
		if r.State != RolloutRunning && r.State != RolloutPaused && r.State != RolloutHalted {
			continue
		}
		if devs == nil {
			if devs, err = m.st.devicesWithCommands(); err != nil {
				m.log.Error("rollouts: list devices", "err", err)
				return
			}
		}
		sends := planRollout(r, devs, m.now())
		m.sendUpdates(ctx, r, sends)
		if err := m.st.putRollout(r); err != nil {
			m.log.Error("rollouts: store", "rollout", r.ID, "err", err)
		}
	}
}

// sendWorkers bounds the update commands sent at once. Sending in parallel
// lets the store's batched commits share fsyncs: one at a time, a 500-device
// stage took 5 s of commits alone (TestRolloutThousandDevices).
const sendWorkers = 32

// sendUpdates sends r's update command to each device and records the
// command ids in r.
func (m *Manager) sendUpdates(ctx context.Context, r *Rollout, devices []string) {
	var wg sync.WaitGroup
	var mu sync.Mutex // guards r.Devices' entries
	sem := make(chan struct{}, sendWorkers)
	for _, dev := range devices {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			cs, err := m.SendCommand(ctx, dev, "update", map[string]string{"url": r.URL, "rollout": r.ID})
			mu.Lock()
			defer mu.Unlock()
			rd := r.Devices[dev]
			if cs != nil {
				rd.Command = cs.ID // a failed publish is retried by reconcile
			} else {
				rd.State, rd.Error = DeviceFailed, "send update: "+err.Error()
			}
		})
	}
	wg.Wait()
}

// rolloutOrder is where a device comes in a rollout's stages: a stable
// hash of both ids (sha256, not FNV: FNV's last bytes barely reach its
// high bits, so devices whose ids share a suffix would sort together).
func rolloutOrder(rolloutID, deviceID string) uint64 {
	h := sha256.Sum256([]byte(rolloutID + "\x00" + deviceID))
	return binary.BigEndian.Uint64(h[:8])
}

// planRollout is one controller step on r, in place: it returns the devices
// to send the update to now (already entered in r.Devices as updating).
func planRollout(r *Rollout, devs []*Device, now time.Time) (send []string) {
	byID := make(map[string]*Device, len(devs))
	var selected []*Device
	for _, d := range devs {
		byID[d.ID] = d
		if r.matches(d) {
			selected = append(selected, d)
		}
	}
	r.Selected = len(selected)
	for id, rd := range r.Devices {
		r.judge(id, rd, byID[id], now)
	}
	if r.State != RolloutRunning {
		r.Updated = now
		return nil
	}
	sort.Slice(selected, func(i, j int) bool { return rolloutOrder(r.ID, selected[i].ID) < rolloutOrder(r.ID, selected[j].ID) })
	for {
		n := int(math.Ceil(r.Spec.Stages[r.Stage] * float64(len(selected))))
		for _, d := range selected[:min(n, len(selected))] {
			if _, ok := r.Devices[d.ID]; ok {
				continue
			}
			rd := &RolloutDevice{Stage: r.Stage, State: DeviceUpdating, From: d.artifactVersion(r.Kind), IssuedAt: now, UpdatedAt: now}
			r.Devices[d.ID] = rd
			if rd.From == r.Version {
				rd.State = DeviceSucceeded // already there: nothing to send
				continue
			}
			send = append(send, d.ID)
		}
		p := r.Progress()
		if p.StageUpdating > 0 || len(send) > 0 {
			r.StageSettledAt = time.Time{}
			break
		}
		if p.StageDevices > 0 && float64(p.StageFailed)/float64(p.StageDevices) > r.Spec.MaxFailures {
			r.State = RolloutHalted
			r.Reason = fmt.Sprintf("stage %d: %d of %d devices failed, above the %g%% bound", r.Stage+1, p.StageFailed, p.StageDevices, r.Spec.MaxFailures*100)
			break
		}
		if r.StageSettledAt.IsZero() {
			r.StageSettledAt = now
		}
		if now.Sub(r.StageSettledAt) < time.Duration(r.Spec.Soak) {
			break
		}
		if r.Stage == len(r.Spec.Stages)-1 {
			r.State = RolloutDone
			break
		}
		r.Stage++
		r.StageStartedAt, r.StageSettledAt = now, time.Time{}
	}
	r.Updated = now
	return send
}

// matches reports whether the selector picks d.
func (r *Rollout) matches(d *Device) bool {
	for k, v := range r.Spec.Select {
		var got string
		switch k {
		case "board":
			if d.Status != nil {
				got = d.Status.Board
			}
		case "version":
			got = d.artifactVersion(r.Kind)
		default:
			got = d.Labels[k]
		}
		if got != v {
			return false
		}
	}
	// A bundle for another board would be refused by the device anyway.
	return d.Status == nil || d.Status.Board == "" || r.Board == "" || d.Status.Board == r.Board
}

// judge updates one device's outcome from the registry. An update succeeds
// when the device reports running the new version, committed (not on
// trial), and fails when the
// command fails, when the device reports it rolled the new version back
// (Status.RolledBack: its supervisor never committed the trial), or when it
// times out. A
// success is watched until the rollout ends: a device that later reports
// another version has rolled back and counts as failed.
func (r *Rollout) judge(id string, rd *RolloutDevice, d *Device, now time.Time) {
	if d == nil || rd.State == DeviceFailed {
		return
	}
	var cmd *CommandState
	for i := range d.Commands {
		if d.Commands[i].ID == rd.Command {
			cmd = &d.Commands[i]
		}
	}
	fail := func(why string) { rd.State, rd.Error, rd.UpdatedAt = DeviceFailed, why, now }
	running := d.artifactVersion(r.Kind)
	switch {
	case rd.State == DeviceSucceeded:
		if d.State() == "online" && running != r.Version && rd.Command != "" {
			fail(fmt.Sprintf("rolled back to %s after the update", running))
		}
	case cmd != nil && cmd.State == CommandFailed:
		msg := "update failed"
		if cmd.Result != nil && cmd.Result.Error != "" {
			msg = cmd.Result.Error
		}
		fail(msg)
	case d.State() == "online" && running == r.Version && !d.Status.Trial:
		rd.State, rd.UpdatedAt = DeviceSucceeded, now
	case d.Status != nil && d.Status.RolledBack[r.Kind] == r.Version:
		fail(fmt.Sprintf("installed, failed on trial and rolled back to %s", running))
	case now.Sub(rd.IssuedAt) > time.Duration(r.Spec.UpdateTimeout):
		fail(fmt.Sprintf("no outcome within %s", time.Duration(r.Spec.UpdateTimeout)))
	}
}

// artifactVersion is the version of an artifact kind the device reported.
func (d *Device) artifactVersion(kind string) string {
	if d.Status == nil {
		return ""
	}
	if v, ok := d.Status.Artifacts[kind]; ok {
		return v
	}
	if kind == firmware.KindAgent {
		return d.Status.Version
	}
	return ""
}

// rolloutLoop runs StepRollouts every interval. A step reads the whole
// registry, so it runs on a timer rather than after every device message.
func (m *Manager) rolloutLoop(interval time.Duration) {
	defer m.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		m.StepRollouts(ctx)
	}
}
