package firmware

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/phaseless/phaseless/internal/atomicfile"
)

// Artifacts keeps the installed versions of one hot-swapped artifact kind
// (the router model, the edge language model) under one directory:
//
//	DIR/VERSION/...        one complete, verified install per version
//	DIR/VERSION.incoming/  an install in progress (removed when found)
//	DIR/state.json         {"current","previous","failed"}
//
// An install is extracted (every file fsync'd) into VERSION.incoming and
// renamed into place; state.json changes only by atomic rename after that.
// So a kill -9 at any moment leaves state.json naming versions whose
// directories are complete, and the running agent decides which one to load
// (Current, falling back to Previous when Current no longer loads). One
// process (the agent) writes it; unlike Slots there is no second process
// to lock against.
type Artifacts struct {
	dir   string
	state ArtifactState
	// Discarded says why OpenArtifacts set aside a state.json that did not
	// parse (kept as state.json.corrupt); nil normally.
	Discarded error
}

// ArtifactState is state.json.
type ArtifactState struct {
	// Current is the version in force; "" means none was installed (the
	// agent runs what it was started with).
	Current string `json:"current,omitempty"`
	// Previous is the one Current replaced: what a failed health check or
	// an unloadable Current falls back to ("" = the agent's own).
	Previous string `json:"previous,omitempty"`
	// Failed is the last version that was installed and then abandoned
	// because it failed its health check: the fleet counts it as rolled
	// back.
	Failed string `json:"failed,omitempty"`
}

// parse reads state.json: every version it names must be one that Install
// takes (ParseVersion: a leading "v" included), since they are directory
// names under the store.
func (st *ArtifactState) parse(raw []byte) error {
	var v ArtifactState
	if err := json.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("%w: state.json: %v", ErrCorrupt, err)
	}
	for _, s := range []string{v.Current, v.Previous, v.Failed} {
		if _, err := ParseVersion(s); s != "" && err != nil {
			return fmt.Errorf("%w: state.json names %q, not a version", ErrCorrupt, s)
		}
	}
	*st = v
	return nil
}

// OpenArtifacts opens (or creates) dir and removes installs a crash left
// half-done. A state.json that does not parse is set aside (Discarded).
func OpenArtifacts(dir string) (*Artifacts, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	a := &Artifacts{dir: dir}
	raw, err := os.ReadFile(filepath.Join(dir, "state.json"))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		if err := a.state.parse(raw); err != nil {
			// A damaged state must not keep the agent from starting: it
			// runs its own artifacts, and the fleet sends the update again.
			a.state, a.Discarded = ArtifactState{}, err
			if err := os.Rename(filepath.Join(dir, "state.json"), filepath.Join(dir, "state.json.corrupt")); err != nil {
				return nil, err
			}
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		if filepath.Ext(e.Name()) == ".incoming" || (strings.HasPrefix(e.Name(), "state.json.") && atomicfile.IsTemp(e.Name())) {
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
	return a, nil
}

// State is the current state.
func (a *Artifacts) State() ArtifactState { return a.state }

// Path is the directory of an installed version.
func (a *Artifacts) Path(version string) string { return filepath.Join(a.dir, version) }

// Install extracts a verified bundle as its version, replacing an earlier
// install of the same version; the state does not change (Activate does
// that once the new version passed its health check). It refuses to
// overwrite the version in force.
func (a *Artifacts) Install(v *Verified) (dir string, err error) {
	ver := v.Manifest.Version
	if ver == a.state.Current {
		return "", fmt.Errorf("version %s is already in force", ver)
	}
	if _, err := ParseVersion(ver); err != nil {
		return "", err
	}
	if ver == a.state.Previous {
		// Its directory is about to change: stop naming it first, so a
		// crash cannot leave the state pointing at a half-written one.
		a.state.Previous = ""
		if err := a.save(); err != nil {
			return "", err
		}
	}
	tmp := a.Path(ver) + ".incoming"
	if err := extractTo(tmp, v); err != nil {
		return "", fmt.Errorf("install %s %s: %w", v.Manifest.ArtifactKind(), ver, err)
	}
	if err := os.RemoveAll(a.Path(ver)); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, a.Path(ver)); err != nil {
		return "", err
	}
	return a.Path(ver), atomicfile.SyncDir(a.dir)
}

// Activate makes an installed version current; the one it replaces
// becomes Previous and every other install is removed.
func (a *Artifacts) Activate(version string) error {
	if _, err := os.Stat(a.Path(version)); err != nil {
		return fmt.Errorf("activate %s: %w", version, err)
	}
	if version == a.state.Current {
		return nil
	}
	a.state.Previous, a.state.Current = a.state.Current, version
	if a.state.Failed == version {
		a.state.Failed = ""
	}
	if err := a.save(); err != nil {
		return err
	}
	a.prune()
	return nil
}

// Fail records that version failed its health check. When it is Current
// (it stopped loading after it was activated), Previous becomes current
// again.
func (a *Artifacts) Fail(version string) error {
	a.state.Failed = version
	if a.state.Current == version {
		a.state.Current, a.state.Previous = a.state.Previous, ""
	}
	if err := a.save(); err != nil {
		return err
	}
	a.prune()
	return nil
}

// prune removes installs the state no longer names (best effort: a left
// directory only costs space and goes at the next prune).
func (a *Artifacts) prune() {
	ents, err := os.ReadDir(a.dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if n := e.Name(); e.IsDir() && n != a.state.Current && n != a.state.Previous {
			os.RemoveAll(filepath.Join(a.dir, n))
		}
	}
}

func (a *Artifacts) save() error {
	raw, err := json.Marshal(a.state)
	if err != nil {
		return err
	}
	return WriteAtomic(a.dir, "state.json", raw)
}

// extractTo writes v's payloads into dir (created afresh) with every file
// fsync'd, plus its manifest, so a later check can tell a damaged file.
func extractTo(dir string, v *Verified) error {
	os.RemoveAll(dir)
	err := v.Extract(func(name string) (io.WriteCloser, error) {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		return &syncFile{path: p}, nil
	})
	if err == nil {
		err = writeSlotManifest(dir, v.Manifest)
	}
	if err != nil {
		os.RemoveAll(dir)
	}
	return err
}

// WriteAtomic replaces dir/name with data, whole or not at all
// (internal/atomicfile: temp file, fsync, rename, fsync of the directory).
func WriteAtomic(dir, name string, data []byte) error {
	return atomicfile.WriteFile(filepath.Join(dir, name), data, 0o644)
}

// VerifyInstalled checks every file of an installed version (or slot)
// directory against the manifest kept beside it.
func VerifyInstalled(dir string) (Manifest, error) {
	m, err := InstalledManifest(dir)
	if err != nil {
		return Manifest{}, err
	}
	for _, f := range m.Files {
		if err := verifySlotFile(dir, f.Name); err != nil {
			return Manifest{}, err
		}
	}
	return m, nil
}

// InstalledManifest reads the manifest kept beside an installed version
// (or slot) without checking its files: a device uses its chunk lists to
// find chunks it may already hold, and hashes every chunk it copies.
func InstalledManifest(dir string) (Manifest, error) {
	raw, err := os.ReadFile(filepath.Join(dir, manifestFile))
	if err != nil {
		return Manifest{}, fmt.Errorf("%s has no manifest: %w", dir, err)
	}
	var m Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return Manifest{}, fmt.Errorf("%w: %s manifest: %v", ErrCorrupt, dir, err)
	}
	return m, nil
}
