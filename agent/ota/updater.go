package ota

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/internal/backoff"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/internal/origin"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// Config is what Open needs from the agent's configuration.
type Config struct {
	DataDir string // the A/B slots live in DataDir/ota, hot-swapped artifacts in DataDir/artifacts/KIND
	Board   string // board profile bundles must be built for
	// OTAPub is the fleet's trusted ed25519 key file; "" refuses every
	// update. Named as the agent's Config names it, so the FieldError Open
	// returns for it names the --ota-pub flag.
	OTAPub string
	// Origins are where update bundles may be fetched from: the cloud's
	// artifact endpoint, as scheme://host[:port] (http://cloud:8080). An
	// update URL on any other origin is refused before anything is fetched;
	// none refuses every update.
	Origins []string
	// Slot is the slot this process was started from, as the supervisor
	// said in firmware.EnvSlot; "" when no supervisor started it.
	Slot string
	// Restart asks the agent to exit so the supervisor starts the slot just
	// installed; nil does not restart.
	Restart func()
	// Changed republishes the device status after a hot swap or a failed
	// one; nil without a fleet.
	Changed func()
	Log     *slog.Logger // nil discards
	// Link is the update link policy at start (update-bandwidth,
	// update-on-metered, --metered); SetLink changes it.
	Link LinkPolicy
	// ChunkStoreMax bounds the chunk store (DATA_DIR/ota/chunks) in bytes;
	// 0 means 1 GiB. An update that needs more is refused before download.
	ChunkStoreMax int64
	// Clock paces and schedules downloads; nil is the system clock.
	Clock backoff.Clock
	// ProbeMargin is the fleet's probe-margin setting, read at each probe
	// gate (probes.go); nil or 0 keeps each probe set's own margin.
	ProbeMargin func() float64
	// ProbeSet is the fleet's probe-set setting, read at each update: a
	// signed probe set (inline, or a file's path) that gates updates whose
	// bundle carries none; nil or "" for none.
	ProbeSet func() string
}

// Updater applies signed updates sent as fleet commands: "update url=U"
// downloads a bundle from an allowed origin, verifies it against the fleet's
// trusted key (--ota-pub), this board and the running version, installs it
// into the inactive A/B slot on trial and restarts into it. The boot
// supervisor (`phaseless-agent supervise`, firmware.Supervisor) starts the
// slot's binary and commits it only once it answers /readyz; "ota-commit" is
// accepted only from a process that runs the trial slot, and "ota-rollback"
// abandons a trial. An agent that no supervisor started refuses updates: an
// installed slot would never run. Bundles of the kinds the running agent
// swaps in place go to OpenArtifacts' stores instead (hotswap.go).
type Updater struct {
	slots  *firmware.Slots
	key    ed25519.PublicKey // nil: no trusted key, updates refused
	board  string
	client *http.Client
	// running is the slot this process was started from; "" when no
	// supervisor started it.
	running string
	restart func()   // nil in tests
	origins []string // scheme://host:port update URLs may name
	dataDir string   // for OpenArtifacts
	changed func()   // handed to each hot-swapped kind
	log     *slog.Logger
	// hot installs the kinds the running agent swaps in place (router
	// model, edge model: hotswap.go), by firmware kind.
	hot map[string]*hotArtifact
	// dl is the update download and its link policy (download.go).
	dl downloads
	// ownBinary offers the running executable's chunks to agent updates.
	ownBinary bool
	exeOnce   sync.Once
	exeIndex  localIndex // the running binary's chunks, once exeOnce ran
	// probeMargin is Config.ProbeMargin.
	probeMargin func() float64
	// probes finds each update's probe set (probes.go).
	probes probeSource
	// trial is the probe gate of the trial build this process runs;
	// nil when it runs none (agentgate.go).
	trial *trialGate
}

// restartDelay lets the update command's result reach the fleet queue
// before the agent exits.
const restartDelay = 500 * time.Millisecond

// Open opens the slots under the data directory. Boots are counted by the
// supervisor that started this process, never here.
func Open(cfg Config) (*Updater, error) {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	o := &Updater{board: cfg.Board, client: &http.Client{CheckRedirect: sameOrigin}, running: cfg.Slot, restart: cfg.Restart, dataDir: cfg.DataDir, changed: cfg.Changed, log: log, probeMargin: cfg.ProbeMargin}
	for _, raw := range cfg.Origins {
		canon, err := parseOrigin(raw)
		if err != nil {
			return nil, &cli.FieldError{Field: "OTAOrigins", Err: err}
		}
		o.origins = append(o.origins, canon)
	}
	if cfg.OTAPub != "" {
		key, err := firmware.ReadPublicKey(cfg.OTAPub)
		if err != nil {
			return nil, &cli.FieldError{Field: "OTAPub", Err: err}
		}
		o.key = key
	}
	o.probes = probeSource{key: o.key, fleet: cfg.ProbeSet}
	slots, err := firmware.OpenSlots(filepath.Join(cfg.DataDir, "ota"), cli.Version)
	if err != nil {
		return nil, err
	}
	o.slots = slots
	o.ownBinary = cfg.Slot != ""
	if err := o.dl.open(filepath.Join(cfg.DataDir, "ota"), cfg.ChunkStoreMax, cfg.Link, cfg.Clock); err != nil {
		return nil, err
	}
	o.openTrialGate()
	// A trial the supervisor committed while no agent watched (the trial
	// process died after /readyz) is committed all the same.
	o.gcChunks()
	return o, nil
}

// Trusted reports whether the device holds the fleet's OTA key: such a
// fleet signs its router models, so nothing unsigned may replace one.
func (o *Updater) Trusted() bool { return o.key != nil }

// Slot is the slot this process runs, for the fleet status: the one the
// supervisor started, or the committed one when no supervisor runs.
func (o *Updater) Slot() string {
	if o.running != "" {
		return o.running
	}
	return o.slots.State().Active
}

// Artifacts is what the status reports: the agent version this slot holds
// (its bundle's, or the build's for the factory install) and an update
// that was installed and then rolled back — the other slot holds a version
// newer than this one and no trial is pending — so a rollout counts it;
// likewise for each hot-swapped kind, the version in force and the last
// one that failed its health check.
func (o *Updater) Artifacts() (running, rolledBack map[string]string) {
	st := o.slots.State()
	slot := o.Slot()
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

// OnTrial reports whether this process runs the slot on trial.
func (o *Updater) OnTrial() bool {
	return o.running != "" && o.slots.State().Trial == o.running
}

// commitPoll is how often a trial agent looks whether its supervisor has
// committed it yet.
const commitPoll = time.Second

// WatchCommit republishes the status once the supervisor commits the trial
// slot this process runs, so the fleet (and a rollout) sees it committed.
// It returns at once when this process runs no trial, else when that
// status went out or ctx ends.
func (o *Updater) WatchCommit(ctx context.Context, publish func(context.Context) error) {
	if !o.OnTrial() {
		return
	}
	t := time.NewTicker(commitPoll)
	defer t.Stop()
	for o.OnTrial() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
	// Committed, or rolled back (which keeps the chunks).
	o.gcChunks()
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

// Update is the fleet's "update" command: it installs the bundle at
// argument url, an agent build into the inactive slot (then restarts into
// it) or a hot-swapped kind in place. The URL must be on one of the
// configured origins (the cloud's artifact endpoint), and the bundle newer
// than what runs unless its signed manifest says it is a rollback from
// exactly that version (firmware.Manifest.RollbackFrom): whoever can send
// commands cannot pick where a device fetches from or lower its floor.
func (o *Updater) Update(ctx context.Context, cmd fleetwire.Command) (string, error) {
	if o.key == nil {
		return "", errors.New("no trusted OTA key on this device (--ota-pub): updates are refused")
	}
	if _, ok := cmd.Args["rollback"]; ok {
		return "", errors.New(`"rollback" is not an update argument: a device never installs an older version on a command's word; sign a rollback bundle (phaselessctl ota sign --rollback-from VERSION)`)
	}
	u, err := url.Parse(cmd.Args["url"])
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf(`argument "url" must be the bundle's http(s) URL, got %q`, cmd.Args["url"])
	}
	if !o.allowed(u) {
		return "", fmt.Errorf("update URL %s is not on an allowed origin (--ota-origin %v): refused before fetching", u.Redacted(), o.origins)
	}
	return o.download(ctx, u)
}

// target is where a bundle of m's kind goes: the policy it must pass
// (this board, newer than the version of that kind in force) and how it
// is installed.
func (o *Updater) target(m firmware.Manifest) (firmware.Policy, func(context.Context, *firmware.Verified) (string, error), error) {
	policy := firmware.Policy{TrustedKey: o.key, Board: o.board}
	kind := m.ArtifactKind()
	if kind != firmware.KindAgent {
		h := o.hot[kind]
		if h == nil {
			return policy, nil, fmt.Errorf("bundle is a %s artifact, which this agent cannot swap in (%s)", kind, o.hotKinds())
		}
		policy.RunningVersion = h.version()
		return policy, h.install, nil
	}
	if o.running == "" {
		return policy, nil, errors.New("this agent was not started by its boot supervisor (phaseless-agent supervise): an installed slot would never run, so agent updates are refused")
	}
	policy.RunningVersion = o.slots.State().Versions[o.Slot()]
	return policy, o.installSlot, nil
}

// installSlot installs an agent build into the inactive slot on trial and
// restarts into it.
func (o *Updater) installSlot(ctx context.Context, v *firmware.Verified) (string, error) {
	slot, err := o.slots.Install(v)
	if err != nil {
		return "", err
	}
	if err := o.scoreBaseline(ctx, slot, v.Manifest); err != nil {
		if rerr := o.slots.Rollback(); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return "", fmt.Errorf("installed %s, then abandoned it: %w", v.Manifest.Version, err)
	}
	if o.restart != nil {
		time.AfterFunc(restartDelay, o.restart)
	}
	return fmt.Sprintf("installed %s into slot %s on trial; restarting into it (the supervisor commits it once it is ready)", v.Manifest.Version, slot), nil
}

// parseOrigin reads an --ota-origin entry: scheme://host[:port], nothing
// more.
func parseOrigin(raw string) (string, error) {
	u, ok := origin.Parse(raw)
	if !ok {
		return "", fmt.Errorf("update origin %q: want scheme://host[:port], e.g. https://cloud.example:8080", raw)
	}
	return origin.Of(u), nil
}

func (o *Updater) allowed(u *url.URL) bool {
	if u.User != nil {
		return false
	}
	return slices.Contains(o.origins, origin.Of(u))
}

// errOffOrigin is a redirect away from the allowed origin; no retry
// changes it.
var errOffOrigin = errors.New("update download redirected off its origin")

// sameOrigin keeps a download's redirects on the allowed origin it started
// from: the origin check must hold for every URL the device fetches.
func sameOrigin(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if origin.Of(req.URL) != origin.Of(via[0].URL) {
		return fmt.Errorf("%w to %s: refused", errOffOrigin, req.URL.Redacted())
	}
	return nil
}

// Commit is the fleet's "ota-commit" command: it keeps the trial slot
// early, but only from inside it: a slot that never booted cannot become
// the committed one.
func (o *Updater) Commit(context.Context, fleetwire.Command) (string, error) {
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
	if err := o.TrialReady(); err != nil {
		return "", err
	}
	if err := o.slots.Commit(); err != nil {
		return "", err
	}
	o.gcChunks()
	slot, version := o.slots.Running()
	return fmt.Sprintf("slot %s (%s) is now the active slot", slot, version), nil
}

// Rollback is the fleet's "ota-rollback" command: it abandons the trial,
// so the committed slot runs at the next start.
func (o *Updater) Rollback(context.Context, fleetwire.Command) (string, error) {
	if err := o.slots.Rollback(); err != nil {
		return "", err
	}
	slot, version := o.slots.Running()
	return fmt.Sprintf("trial abandoned; slot %s (%s) runs at the next start", slot, version), nil
}
