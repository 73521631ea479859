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
	"strings"
	"sync"
	"time"

	"github.com/phaseless/phaseless/transport/fleetwire"
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

// ErrUnknownRollout is returned for a rollout id the store does not hold.
var (
	ErrUnknownRollout = errors.New("unknown rollout")
	errUnknownAction  = errors.New("unknown rollout action: want pause, resume or abort")
)

// SetLabels merges labels into a device's (a nil value removes one). The
// device need not have connected yet.
func (m *Manager) SetLabels(id string, labels map[string]*string) (*Device, error) {
	if err := fleetwire.ValidateDeviceID(id); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	for k := range labels {
		if k == "" || k == "board" || k == "version" {
			return nil, fmt.Errorf("%w: label name %q is empty or reserved (board and version come from the device)", ErrBadRequest, k)
		}
	}
	// Labels pick config groups too: the merged config follows them, so
	// only the fleet's writer changes them.
	if err := m.fence(context.Background()); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotWriter, err)
	}
	dev, changed, err := m.st.updateDeviceConfig(id, m.now(), true, func(d *Device) error {
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
	if err == nil && changed {
		m.sendDesired(dev) // fenced above
	}
	return dev, err
}

// CreateRollout starts a rollout of a stored artifact.
func (m *Manager) CreateRollout(ctx context.Context, spec RolloutSpec) (*Rollout, error) {
	spec.FillDefaults()
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if err := m.fence(ctx); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotWriter, err)
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
	if err := m.fence(ctx); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotWriter, err)
	}
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
	if err := m.fence(ctx); err != nil {
		m.log.Error("rollouts not stepped: this fleet manager is not the fleet's writer", "err", err)
		return
	}
	rs, err := m.st.rollouts()
	if err != nil {
		m.log.Error("rollouts: list", "err", err)
		return
	}
	for _, r := range rs {
		if !active(r) {
			continue
		}
		// The step runs on the rollout as claimed: with managers side by
		// side (PostgreSQL), one steps it while the others skip it, and
		// the registry is read after the claim, so it is as new as the
		// last step's sends.
		_, err := m.st.claimRollout(r.ID, func(r *Rollout) error {
			if !active(r) {
				return nil
			}
			devs, err := m.st.devicesWithCommands()
			if err != nil {
				return err
			}
			now := m.now()
			sends := planRollout(r, devs, now)
			m.sendUpdates(ctx, r, sends)
			if m.cfg.DB != "" { // one manager on bbolt loses nothing in a dead manager's hands
				m.resendStale(r, devs, now)
			}
			return nil
		})
		if err != nil {
			m.log.Error("rollouts: step", "rollout", r.ID, "err", err)
		}
	}
}

// resendAfter is how long a device may stay silent after its update
// command before the rollout sends that command again.
const resendAfter = 5 * time.Second

// resendStale publishes again the update command of each online device of
// r that has reported no status since it was issued (its result may have
// come, the status after it not): the command, or the device's answer,
// may have been in the hands of a manager that died (managers side by
// side split the messages). Devices handle a
// command id once and answer a repeat with the same result.
func (m *Manager) resendStale(r *Rollout, devs []*Device, now time.Time) {
	for _, d := range devs {
		rd := r.Devices[d.ID]
		if rd == nil || rd.State != DeviceUpdating || rd.Command == "" || d.State() != "online" {
			continue
		}
		for _, c := range d.Commands {
			if c.ID == rd.Command && c.State != CommandFailed && now.Sub(c.IssuedAt) > resendAfter &&
				(d.Status == nil || d.Status.Time.Before(c.IssuedAt)) {
				p, _ := json.Marshal(c.Command)
				m.bus.publishLater(m.topics.Device(d.ID, fleetwire.SuffixCmd), p, false)
			}
		}
	}
}

func active(r *Rollout) bool {
	return r.State == RolloutRunning || r.State == RolloutPaused || r.State == RolloutHalted
}

// updateCommandID is the id of r's update command to dev: one per device
// and rollout, so a step that a manager died in the middle of, planned
// again by another, issues the same command (stored once, sent once)
// rather than a second one.
func updateCommandID(rolloutID, dev string) string {
	h := sha256.Sum256([]byte("update\x00" + rolloutID + "\x00" + dev))
	return hex.EncodeToString(h[:8])
}

// sendWorkers bounds the update commands sent at once. Sending in parallel
// lets the store's batched commits (db.Batch) share fsyncs, where one at a
// time would pay one fsync per device of the stage.
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
			cs, err := m.sendCommand(ctx, dev, updateCommandID(r.ID, dev), "update", map[string]string{"url": r.URL, "rollout": r.ID})
			mu.Lock()
			defer mu.Unlock()
			rd := r.Devices[dev]
			switch {
			case cs != nil:
				rd.Command = cs.ID // a failed publish is retried by reconcile
			case errors.Is(err, ErrNotWriter):
				delete(r.Devices, dev) // not sent: the fleet's writer sends it
			default:
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
		if matches(r, d) {
			selected = append(selected, d)
		}
	}
	r.Selected = len(selected)
	for id, rd := range r.Devices {
		judge(r, rd, byID[id], now)
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
			rd := &RolloutDevice{Stage: r.Stage, State: DeviceUpdating, From: d.Status.Running(r.Kind), IssuedAt: now, UpdatedAt: now}
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
		if p.StageDevices > 0 && float64(p.StageFailed)/float64(p.StageDevices) > r.Spec.FailureLimit() {
			r.State = RolloutHalted
			r.Reason = fmt.Sprintf("stage %d: %d of %d devices failed, above the %g%% bound", r.Stage+1, p.StageFailed, p.StageDevices, r.Spec.FailureLimit()*100) + firstFailure(r)
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

// maxReasonError bounds the device error a halt reason quotes.
const maxReasonError = 400

// firstFailure quotes the error of one failed device of r's stage (the
// first by id, so the reason does not change from step to step), so the
// halt reason says why without a look at every device: a probe gate's
// scores, a health check's refusal.
func firstFailure(r *Rollout) string {
	id := ""
	for d, rd := range r.Devices {
		if rd.Stage == r.Stage && rd.State == DeviceFailed && rd.Error != "" && (id == "" || d < id) {
			id = d
		}
	}
	if id == "" {
		return ""
	}
	msg := r.Devices[id].Error
	if len(msg) > maxReasonError {
		msg = strings.ToValidUTF8(msg[:maxReasonError], "") + "…"
	}
	return "; " + id + ": " + msg
}

// matches reports whether the selector picks d.
func matches(r *Rollout, d *Device) bool {
	if !selected(r.Spec.Select, d, r.Kind) {
		return false
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
func judge(r *Rollout, rd *RolloutDevice, d *Device, now time.Time) {
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
	if u := d.Status.UpdateOf(r.URL); u != nil {
		rd.FullBytes, rd.PlannedBytes, rd.TransferredBytes = u.FullBytes, u.PlannedBytes, u.TransferredBytes
	}
	running := d.Status.Running(r.Kind)
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
		if cmd != nil && cmd.State == CommandPending && now.Sub(rd.IssuedAt) <= time.Duration(r.Spec.UpdateTimeout) {
			// The status can arrive before the command's result, which
			// says why (a health check's refusal): wait for it, within
			// the update's timeout.
			return
		}
		why := fmt.Sprintf("installed, failed on trial and rolled back to %s", running)
		if g, ok := d.Status.ProbeGates[r.Kind]; ok && g.Version == r.Version && !g.Pass {
			why += ": " + g.Result // the trial build's own probe gate
		}
		fail(why)
	case now.Sub(rd.IssuedAt) > time.Duration(r.Spec.UpdateTimeout):
		fail(fmt.Sprintf("no outcome within %s", time.Duration(r.Spec.UpdateTimeout)))
	}
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
