package agent

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"time"

	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// ota applies signed updates sent as fleet commands: "update url=U
// [rollback=true]" downloads a bundle, verifies it against the fleet's
// trusted key (--ota-pub), this board and the running version, installs it
// into the inactive A/B slot on trial and restarts into it. The boot
// supervisor (`phaseless-agent supervise`, firmware.Supervisor) starts the
// slot's binary and commits it only once it answers /readyz; "ota-commit" is
// accepted only from a process that runs the trial slot, and "ota-rollback"
// abandons a trial. An agent that no supervisor started refuses updates: an
// installed slot would never run.
type ota struct {
	slots  *firmware.Slots
	key    ed25519.PublicKey // nil: no trusted key, updates refused
	board  string
	client *http.Client
	// running is the slot this process was started from, as the supervisor
	// said in firmware.EnvSlot; "" when no supervisor started it.
	running string
	// restart asks the agent to exit so the supervisor starts the slot just
	// installed; nil in tests.
	restart func()
	// hot installs the kinds the running agent swaps in place (router
	// model, edge model: hotswap.go), by firmware kind.
	hot map[string]*hotArtifact
}

// restartDelay lets the update command's result reach the fleet queue
// before the agent exits.
const restartDelay = 500 * time.Millisecond

// openOTA opens the slots under the data directory. Boots are counted by the
// supervisor that started this process, never here.
func openOTA(cfg Config, getenv func(string) string) (*ota, error) {
	o := &ota{board: cfg.Board, client: &http.Client{}, running: getenv(firmware.EnvSlot)}
	if cfg.OTAPub != "" {
		key, err := firmware.ReadPublicKey(cfg.OTAPub)
		if err != nil {
			return nil, &cli.FieldError{Field: "OTAPub", Err: err}
		}
		o.key = key
	}
	slots, err := firmware.OpenSlots(filepath.Join(cfg.DataDir, "ota"), cli.Version)
	if err != nil {
		return nil, err
	}
	o.slots = slots
	return o, nil
}

// slot is the slot this process runs, for the fleet status: the one the
// supervisor started, or the committed one when no supervisor runs.
func (o *ota) slot() string {
	if o.running != "" {
		return o.running
	}
	return o.slots.State().Active
}

// artifacts is what the status reports: the agent version this slot holds
// (its bundle's, or the build's for the factory install) and an update
// that was installed and then rolled back — the other slot holds a version
// newer than this one and no trial is pending — so a rollout counts it.
func (o *ota) artifacts() (running, rolledBack map[string]string) {
	st := o.slots.State()
	slot := o.slot()
	v := st.Versions[slot]
	if v == "" {
		v = cli.Version
	}
	running = map[string]string{firmware.KindAgent: v}
	other := "a"
	if slot == "a" {
		other = "b"
	}
	if ov := st.Versions[other]; st.Trial == "" && ov != "" {
		if newer, err := firmware.Newer(ov, v); err == nil && newer {
			rolledBack = map[string]string{firmware.KindAgent: ov}
		}
	}
	for kind, h := range o.hot {
		st := h.store.State()
		if st.Current != "" {
			running[kind] = st.Current
		}
		if st.Failed != "" {
			if rolledBack == nil {
				rolledBack = map[string]string{}
			}
			rolledBack[kind] = st.Failed
		}
	}
	return running, rolledBack
}

// onTrial reports whether this process runs the slot on trial.
func (o *ota) onTrial() bool {
	return o.running != "" && o.slots.State().Trial == o.running
}

// commitPoll is how often a trial agent looks whether its supervisor has
// committed it yet.
const commitPoll = time.Second

// watchCommit republishes the status once the supervisor commits the trial
// slot this process runs, so the fleet (and a rollout) sees it committed.
func (o *ota) watchCommit(ctx context.Context, publish func(context.Context) error) {
	if !o.onTrial() {
		return
	}
	t := time.NewTicker(commitPoll)
	defer t.Stop()
	for o.onTrial() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
	for ctx.Err() == nil { // the connection may be down for a while
		if err := publish(ctx); err == nil {
			return
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}

// maxBundleBytes bounds a download; the bundle's manifest bounds each file.
const maxBundleBytes = 1 << 30

func (o *ota) update(ctx context.Context, cmd fleetwire.Command) (string, error) {
	if o.key == nil {
		return "", errors.New("no trusted OTA key on this device (--ota-pub): updates are refused")
	}
	u, err := url.Parse(cmd.Args["url"])
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf(`argument "url" must be the bundle's http(s) URL, got %q`, cmd.Args["url"])
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", err
	}
	resp, err := o.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("download bundle: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("download bundle: %s", resp.Status)
	}
	// Every kind goes through the same signed manifest: its signature is
	// checked first, then the kind says which version it must be newer
	// than and where it goes.
	m, bundle, err := firmware.Peek(http.MaxBytesReader(nil, resp.Body, maxBundleBytes), o.key)
	if err != nil {
		return "", err
	}
	policy := firmware.Policy{TrustedKey: o.key, Board: o.board, AllowRollback: cmd.Args["rollback"] == "true"}
	kind := m.ArtifactKind()
	if kind != firmware.KindAgent {
		h := o.hot[kind]
		if h == nil {
			return "", fmt.Errorf("bundle is a %s artifact, which this agent cannot swap in (%s)", kind, o.hotKinds())
		}
		policy.RunningVersion = h.version()
		v, err := firmware.Open(bundle, policy)
		if err != nil {
			return "", err
		}
		return h.install(ctx, v)
	}
	if o.running == "" {
		return "", errors.New("this agent was not started by its boot supervisor (phaseless-agent supervise): an installed slot would never run, so agent updates are refused")
	}
	policy.RunningVersion = o.slots.State().Versions[o.slot()]
	v, err := firmware.Open(bundle, policy)
	if err != nil {
		return "", err
	}
	slot, err := o.slots.Install(v)
	if err != nil {
		return "", err
	}
	if o.restart != nil {
		time.AfterFunc(restartDelay, o.restart)
	}
	return fmt.Sprintf("installed %s into slot %s on trial; restarting into it (the supervisor commits it once it is ready)", v.Manifest.Version, slot), nil
}

// commit keeps the trial slot early, but only from inside it: a slot that
// never booted cannot become the committed one.
func (o *ota) commit(context.Context, fleetwire.Command) (string, error) {
	st := o.slots.State()
	if st.Trial == "" {
		return "", firmware.ErrNoTrial
	}
	if o.running != st.Trial {
		runs := "was not started by the boot supervisor"
		if o.running != "" {
			runs = fmt.Sprintf("runs slot %s (%s)", o.running, st.Versions[o.running])
		}
		return "", fmt.Errorf("slot %s (%s) is on trial but has not booted: this process %s; the supervisor commits the trial once it starts and is ready", st.Trial, st.Versions[st.Trial], runs)
	}
	if err := o.slots.Commit(); err != nil {
		return "", err
	}
	slot, version := o.slots.Running()
	return fmt.Sprintf("slot %s (%s) is now the active slot", slot, version), nil
}

func (o *ota) rollback(context.Context, fleetwire.Command) (string, error) {
	if err := o.slots.Rollback(); err != nil {
		return "", err
	}
	slot, version := o.slots.Running()
	return fmt.Sprintf("trial abandoned; slot %s (%s) runs at the next start", slot, version), nil
}
