package firmware

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// Slots keeps two install slots, a and b, under one directory. An update is
// extracted into the inactive slot and booted on trial; it becomes active only
// when Commit says the new version is healthy, and a trial that fails (or
// that crashes MaxTrialBoots times) rolls back to the slot that worked. The
// state file is replaced atomically, so a power cut at any moment leaves
// either the old or the new state, never a mix.
type Slots struct {
	dir string

	mu    sync.Mutex // guards state and the files under dir (with the file lock across processes)
	state SlotState  // as last read from state.json
}

// SlotState is persisted in dir/state.json.
type SlotState struct {
	Active   string            `json:"active"`          // slot that last proved healthy
	Trial    string            `json:"trial,omitempty"` // slot being tried, if any
	Boots    int               `json:"boots"`           // boots of the trial slot so far
	Versions map[string]string `json:"versions"`        // slot → version installed there
}

// MaxTrialBoots is how many times a trial slot may boot without Commit before
// Boot rolls back on its own (a crash loop ends in the old version).
const MaxTrialBoots = 3

// ErrNoTrial is returned by Commit and Rollback when no update is on trial.
var ErrNoTrial = errors.New("no update on trial")

// OpenSlots opens (or creates) the slot directory. A fresh device runs
// initialVersion from slot a.
//
// Two processes share the state: the boot supervisor (Boot, Commit,
// Rollback) and the agent it runs (Install, and Commit from inside a trial
// slot). Every call therefore reads state.json afresh, and every change
// holds an exclusive lock on the directory's lock file while it reads,
// changes and replaces the state.
func OpenSlots(dir, initialVersion string) (*Slots, error) {
	s := &Slots{dir: dir}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("open slots %s: %w", dir, err)
	}
	err := s.locked(func() error {
		err := s.load()
		if errors.Is(err, os.ErrNotExist) {
			s.state = SlotState{Active: "a", Versions: map[string]string{"a": initialVersion}}
			return s.save()
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// load reads state.json into s.state.
func (s *Slots) load() error {
	raw, err := os.ReadFile(filepath.Join(s.dir, "state.json"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return err
		}
		return fmt.Errorf("open slots %s: %w", s.dir, err)
	}
	var st SlotState
	if err := json.Unmarshal(raw, &st); err != nil || (st.Active != "a" && st.Active != "b") {
		return fmt.Errorf("open slots %s: corrupt state.json", s.dir)
	}
	if st.Versions == nil {
		st.Versions = map[string]string{}
	}
	// A trial that is not the other slot (FuzzSlotState: "../../etc", the
	// active slot itself) is dropped: the active slot is the one known to
	// work. Boots out of range ends the trial at the next Boot.
	if t := st.Trial; t != "" && (t == st.Active || (t != "a" && t != "b")) {
		st.Trial, st.Boots = "", 0
	}
	if st.Boots < 0 || st.Boots > MaxTrialBoots {
		st.Boots = MaxTrialBoots
	}
	s.state = st
	return nil
}

// locked runs fn holding s.mu and the directory's file lock: no other
// process changes the state meanwhile.
func (s *Slots) locked(fn func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	unlock, err := lockFile(filepath.Join(s.dir, "state.lock"))
	if err != nil {
		return fmt.Errorf("lock slots %s: %w", s.dir, err)
	}
	defer unlock()
	return fn()
}

// change reloads the state, applies fn and saves it, under the lock.
func (s *Slots) change(fn func() error) error {
	return s.locked(func() error {
		if err := s.load(); err != nil {
			return err
		}
		return fn()
	})
}

// State returns a copy of the current state as it is on disk.
func (s *Slots) State() SlotState {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.load() // on a read error the last state read stands
	st := s.state
	st.Versions = map[string]string{}
	for k, v := range s.state.Versions {
		st.Versions[k] = v
	}
	return st
}

// Running returns the slot and version the device should run now.
func (s *Slots) Running() (slot, version string) {
	st := s.State()
	slot = st.Active
	if st.Trial != "" {
		slot = st.Trial
	}
	return slot, st.Versions[slot]
}

// Path is the directory of a slot's files.
func (s *Slots) Path(slot string) string { return filepath.Join(s.dir, slot) }

// Install extracts a verified bundle into the inactive slot and puts it on
// trial. Nothing of the active slot is touched.
func (s *Slots) Install(v *Verified) (slot string, err error) {
	err = s.change(func() error {
		slot, err = s.install(v)
		return err
	})
	return slot, err
}

func (s *Slots) install(v *Verified) (string, error) {
	target := "b"
	if s.state.Active == "b" {
		target = "a"
	}
	// The state must stop naming the target before its files are touched:
	// a power cut while an update is reinstalled over the slot on trial
	// would otherwise leave the device booting a half-written slot.
	if _, named := s.state.Versions[target]; named || s.state.Trial == target {
		if s.state.Trial == target {
			s.state.Trial, s.state.Boots = "", 0
		}
		delete(s.state.Versions, target)
		if err := s.save(); err != nil {
			return "", err
		}
	}
	tmp := filepath.Join(s.dir, target+".incoming")
	if err := extractTo(tmp, v); err != nil {
		return "", fmt.Errorf("install into slot %s: %w", target, err)
	}
	if err := os.RemoveAll(s.Path(target)); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, s.Path(target)); err != nil {
		return "", err
	}
	s.state.Trial, s.state.Boots = target, 0
	s.state.Versions[target] = v.Manifest.Version
	return target, s.save()
}

// Boot is called once at start-up. It counts a boot of the trial slot and
// rolls back when the trial has booted MaxTrialBoots times without Commit.
func (s *Slots) Boot() (slot string, rolledBack bool, err error) {
	err = s.change(func() error {
		switch {
		case s.state.Trial == "":
			slot = s.state.Active
			return nil
		case s.state.Boots >= MaxTrialBoots:
			s.state.Trial, s.state.Boots = "", 0
			slot, rolledBack = s.state.Active, true
		default:
			s.state.Boots++
			slot = s.state.Trial
		}
		return s.save()
	})
	return slot, rolledBack, err
}

// Commit makes the trial slot the active one.
func (s *Slots) Commit() error {
	return s.change(func() error {
		if s.state.Trial == "" {
			return ErrNoTrial
		}
		s.state.Active, s.state.Trial, s.state.Boots = s.state.Trial, "", 0
		return s.save()
	})
}

// Rollback abandons the trial slot; the active slot runs again.
func (s *Slots) Rollback() error {
	return s.change(func() error {
		if s.state.Trial == "" {
			return ErrNoTrial
		}
		s.state.Trial, s.state.Boots = "", 0
		return s.save()
	})
}

// save writes state.json atomically: temp file, fsync, rename, fsync dir.
func (s *Slots) save() error {
	raw, err := json.Marshal(s.state)
	if err != nil {
		return err
	}
	return WriteAtomic(s.dir, "state.json", raw)
}

// syncFile is a file created on first write and fsync'd on Close, so a slot
// or state file is on disk before it is renamed into place.
type syncFile struct {
	path string
	f    *os.File
}

func (w *syncFile) Write(p []byte) (int, error) {
	if w.f == nil {
		f, err := os.OpenFile(w.path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
		if err != nil {
			return 0, err
		}
		w.f = f
	}
	return w.f.Write(p)
}

func (w *syncFile) Close() error {
	if w.f == nil {
		if _, err := w.Write(nil); err != nil { // an empty file still exists
			return err
		}
	}
	if err := w.f.Sync(); err != nil {
		w.f.Close()
		return err
	}
	return w.f.Close()
}
