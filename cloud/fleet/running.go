package fleet

import (
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/phaseless/phaseless/firmware"
)

// What the fleet runs: the learning loop's evaluate gate compares a
// candidate router with the one most devices in the scope run, which is
// whatever rollouts put there, not the model that shipped with the agent.

// Running counts the devices sel picks (board and version from their
// status, other keys from their labels, as a rollout's selector) by the
// version of kind they report, and names the bundle of the version most
// of them run.
func (m *Manager) Running(kind string, sel map[string]string) (*RunningArtifact, error) {
	if kind != firmware.KindAgent && kind != firmware.KindPredictor && kind != firmware.KindModel {
		return nil, fmt.Errorf("%w: unknown artifact kind %q", ErrBadRequest, kind)
	}
	devs, err := m.st.devices()
	if err != nil {
		return nil, err
	}
	out := &RunningArtifact{Kind: kind, Select: sel, Versions: map[string]int{}}
	boards := map[string]map[string]int{} // version → board → devices
	for _, d := range devs {
		if !selected(sel, d, kind) {
			continue
		}
		v := d.Status.Running(kind)
		out.Devices++
		out.Versions[v]++
		if boards[v] == nil {
			boards[v] = map[string]int{}
		}
		if d.Status != nil {
			boards[v][d.Status.Board]++
		}
	}
	first := true
	for v, n := range out.Versions {
		if first || n > out.Versions[out.Version] || n == out.Versions[out.Version] && newerVersion(v, out.Version) {
			out.Version, first = v, false
		}
	}
	if out.Version == "" {
		return out, nil
	}
	out.Artifact, err = m.bundleOf(kind, out.Version, boards[out.Version])
	return out, err
}

// newerVersion orders versions for ties: a version that parses beats one
// that does not (or none), then the newer wins.
func newerVersion(a, b string) bool {
	if b == "" {
		return a != ""
	}
	newer, err := firmware.Newer(a, b)
	if err != nil {
		return a > b
	}
	return newer
}

// bundleOf picks the stored bundle of kind at version: one a rollout
// published first (the fleet got it from there), then one for the board
// most of its devices report; nil when the cloud holds none.
func (m *Manager) bundleOf(kind, version string, boards map[string]int) (*ArtifactInfo, error) {
	all, err := m.st.artifacts()
	var found []*ArtifactInfo
	for _, a := range all {
		if a.Kind == kind && a.Version == version {
			found = append(found, a)
		}
	}
	if err != nil || len(found) == 0 {
		return nil, err
	}
	rolled := map[string]bool{}
	rs, err := m.st.rollouts()
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		rolled[r.Spec.Artifact] = true
	}
	rank := func(a *ArtifactInfo) (int, int) {
		r := 0
		if rolled[a.ID] {
			r = 1
		}
		return r, boards[a.Board]
	}
	sort.SliceStable(found, func(i, j int) bool {
		ri, bi := rank(found[i])
		rj, bj := rank(found[j])
		if ri != rj {
			return ri > rj
		}
		if bi != bj {
			return bi > bj
		}
		return found[i].ID < found[j].ID
	})
	return found[0], nil
}

// selected reports whether selector sel picks d, with a rollout's
// semantics for the keys (matches).
func selected(sel map[string]string, d *Device, kind string) bool {
	for k, v := range sel {
		var got string
		switch k {
		case "board":
			if d.Status != nil {
				got = d.Status.Board
			}
		case "version":
			got = d.Status.Running(kind)
		default:
			got = d.Labels[k]
		}
		if got != v {
			return false
		}
	}
	return true
}

// getRunning serves GET /v1/fleet/running/{kind}?select=k=v[,k=v]: the
// select parameter may repeat.
func (m *Manager) getRunning(w http.ResponseWriter, r *http.Request) {
	sel := map[string]string{}
	for _, s := range r.URL.Query()["select"] {
		for _, kv := range strings.Split(s, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				writeError(w, http.StatusBadRequest, fmt.Errorf("select %q: want key=value", kv))
				return
			}
			sel[k] = v
		}
	}
	if len(sel) == 0 {
		sel = nil
	}
	ra, err := m.Running(r.PathValue("kind"), sel)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, ra)
}
