package firmware

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// Environment a supervised child is started with. The agent reads
// EnvSlot to know which slot it runs from: only a process started from the
// trial slot may commit it.
const (
	EnvSlot        = "PHASELESS_SLOT"
	EnvSlotVersion = "PHASELESS_SLOT_VERSION"
)

// ExitRestart is the exit code a supervised child uses to ask for an
// immediate restart (after installing an update, say) instead of the
// crash-loop delay. 75 is sysexits' EX_TEMPFAIL.
const ExitRestart = 75

// manifestFile is where Install keeps a slot's manifest, so the supervisor
// can check the slot's binary against it before every start.
const manifestFile = ".manifest.json"

// Supervisor is the device's boot supervisor: it starts the binary of the
// slot the A/B state names, counts trial boots, commits a trial only after
// its process has started and passed the health check, and rolls back a
// trial that fails to start, exits, or stays unhealthy. The committed slot
// is restarted with a growing delay when it exits.
//
// Commit happens here, not in the updated agent, so that "committed" always
// means "booted and healthy": an update that never started cannot become the
// active slot.
type Supervisor struct {
	Slots *Slots
	// Binary is the executable's path inside a slot (default
	// "phaseless-agent", the name `phaselessctl ota sign` gives it).
	Binary string
	// Factory runs for a slot that holds no Binary: the factory install
	// (slot a before any update). Usually the supervisor's own executable.
	Factory string
	Args    []string // passed to the child
	Env     []string // added to the supervisor's environment for the child
	// Healthy probes the running child (e.g. GET /readyz). Required.
	Healthy func(ctx context.Context) error
	// TrialTimeout is how long a trial has to become healthy (default 2m).
	TrialTimeout time.Duration
	// ProbeEvery is the health-probe interval during a trial (default 1s).
	ProbeEvery time.Duration
	// RestartDelay is the first delay before restarting a committed slot
	// that exited; it doubles to MaxRestartDelay while it keeps crashing
	// (defaults 1s and 1m). A run that stayed up for MaxRestartDelay resets it.
	RestartDelay, MaxRestartDelay time.Duration
	// StopGrace is how long a child has to exit after SIGTERM (default 15s).
	StopGrace time.Duration
	Log       *slog.Logger
}

func (s *Supervisor) setDefaults() {
	if s.Binary == "" {
		s.Binary = "phaseless-agent"
	}
	if s.TrialTimeout <= 0 {
		s.TrialTimeout = 2 * time.Minute
	}
	if s.ProbeEvery <= 0 {
		s.ProbeEvery = time.Second
	}
	if s.RestartDelay <= 0 {
		s.RestartDelay = time.Second
	}
	if s.MaxRestartDelay <= 0 {
		s.MaxRestartDelay = time.Minute
	}
	if s.StopGrace <= 0 {
		s.StopGrace = 15 * time.Second
	}
	if s.Log == nil {
		s.Log = slog.New(slog.DiscardHandler)
	}
}

// Run supervises until ctx ends, then stops the child (SIGTERM, then
// SIGKILL after StopGrace) and returns nil. It returns an error only when
// the state cannot be read or written, or the committed slot cannot start at
// all: a device with no runnable slot needs a person.
func (s *Supervisor) Run(ctx context.Context) error {
	if s.Slots == nil || s.Healthy == nil {
		return errors.New("supervisor: Slots and Healthy are required")
	}
	s.setDefaults()
	delay := s.RestartDelay
	for ctx.Err() == nil {
		slot, rolledBack, err := s.Slots.Boot()
		if err != nil {
			return fmt.Errorf("supervisor: %w", err)
		}
		if rolledBack {
			s.Log.Warn("trial slot booted too often without becoming healthy: rolled back", "slot", slot)
		}
		st := s.Slots.State()
		trial := st.Trial == slot
		started := time.Now()
		child, err := s.start(slot, st.Versions[slot], trial)
		if err != nil {
			if !trial {
				return fmt.Errorf("supervisor: committed slot %s cannot start: %w", slot, err)
			}
			s.Log.Error("trial slot does not start: rolling back", "slot", slot, "err", err)
			if err := s.Slots.Rollback(); err != nil && !errors.Is(err, ErrNoTrial) {
				return fmt.Errorf("supervisor: %w", err)
			}
			continue
		}
		if trial {
			if err := s.awaitHealthy(ctx, child); err != nil {
				s.Log.Error("trial slot failed its health check: rolling back", "slot", slot, "version", st.Versions[slot], "err", err)
				child.stop(s.StopGrace)
				if ctx.Err() != nil {
					return nil // stopped mid-trial: the next boot counts another try
				}
				if err := s.Slots.Rollback(); err != nil && !errors.Is(err, ErrNoTrial) {
					return fmt.Errorf("supervisor: %w", err)
				}
				continue
			}
			// The child may have committed itself (ota-commit from inside
			// the slot) while the probe ran.
			if err := s.Slots.Commit(); err != nil && !errors.Is(err, ErrNoTrial) {
				child.stop(s.StopGrace)
				return fmt.Errorf("supervisor: commit slot %s: %w", slot, err)
			}
			s.Log.Info("trial slot booted and is healthy: committed", "slot", slot, "version", st.Versions[slot])
		}
		select {
		case <-ctx.Done():
			child.stop(s.StopGrace)
			return nil
		case <-child.done:
		}
		code := child.exitCode()
		s.Log.Warn("child exited", "slot", slot, "code", code)
		if code == ExitRestart {
			delay = s.RestartDelay
			continue
		}
		if time.Since(started) >= s.MaxRestartDelay {
			delay = s.RestartDelay
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay = min(2*delay, s.MaxRestartDelay)
	}
	return nil
}

// awaitHealthy probes the child until Healthy passes, the child exits, the
// trial times out or ctx ends.
func (s *Supervisor) awaitHealthy(ctx context.Context, c *child) error {
	deadline := time.NewTimer(s.TrialTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(s.ProbeEvery)
	defer tick.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, s.ProbeEvery)
		err := s.Healthy(pctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.done:
			return fmt.Errorf("exited with code %d before it was healthy (last probe: %v)", c.exitCode(), err)
		case <-deadline.C:
			return fmt.Errorf("not healthy after %s: %w", s.TrialTimeout, err)
		case <-tick.C:
		}
	}
}

// executable is the program to start for slot: the slot's binary, checked
// against the slot's manifest, or the factory binary for a slot that never
// received an update.
func (s *Supervisor) executable(slot string) (string, error) {
	p := filepath.Join(s.Slots.Path(slot), filepath.FromSlash(s.Binary))
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		if s.Factory == "" {
			return "", fmt.Errorf("slot %s holds no %s and no factory binary is set", slot, s.Binary)
		}
		return s.Factory, nil
	}
	if err := verifySlotFile(s.Slots.Path(slot), s.Binary); err != nil {
		return "", err
	}
	// Bundles carry no file modes; the binary was verified just now.
	if err := os.Chmod(p, 0o755); err != nil {
		return "", err
	}
	return p, nil
}

func (s *Supervisor) start(slot, version string, trial bool) (*child, error) {
	path, err := s.executable(slot)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, s.Args...)
	cmd.Env = append(append(os.Environ(), s.Env...), EnvSlot+"="+slot, EnvSlotVersion+"="+version)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s.Log.Info("started slot", "slot", slot, "version", version, "trial", trial, "path", path, "pid", cmd.Process.Pid)
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() { c.err = cmd.Wait(); close(c.done) }()
	return c, nil
}

// child is one started process; done closes when it has exited.
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // Wait's result, set before done closes
}

func (c *child) exitCode() int {
	<-c.done
	if c.cmd.ProcessState == nil {
		return -1
	}
	return c.cmd.ProcessState.ExitCode()
}

// stop asks the child to exit and kills it after grace.
func (c *child) stop(grace time.Duration) {
	select {
	case <-c.done:
		return
	default:
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(grace):
		c.cmd.Process.Kill()
		<-c.done
	}
}

// writeSlotManifest keeps m inside an installed slot's directory.
func writeSlotManifest(dir string, m Manifest) error {
	raw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	f := &syncFile{path: filepath.Join(dir, manifestFile)}
	if _, err := f.Write(raw); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// verifySlotFile checks name inside a slot directory against the manifest
// Install left there: a file damaged on disk after install is not started.
func verifySlotFile(dir, name string) error {
	raw, err := os.ReadFile(filepath.Join(dir, manifestFile))
	if err != nil {
		return fmt.Errorf("slot %s has no manifest: %w", filepath.Base(dir), err)
	}
	var m Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("slot %s manifest: %w", filepath.Base(dir), err)
	}
	for _, f := range m.Files {
		if f.Name != name {
			continue
		}
		fh, err := os.Open(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			return err
		}
		defer fh.Close()
		h := sha256.New()
		n, err := io.Copy(h, fh)
		if err != nil {
			return err
		}
		if n != f.Size || hex.EncodeToString(h.Sum(nil)) != f.SHA256 {
			return fmt.Errorf("slot %s: %s does not match its manifest: %w", filepath.Base(dir), name, ErrCorrupt)
		}
		return nil
	}
	return fmt.Errorf("slot %s: %s is not in its manifest", filepath.Base(dir), name)
}
