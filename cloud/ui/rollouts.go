package ui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// Rollout is one update going out to devices, as the rollouts page shows it.
// Today's fleet manager has no rollout object: an update is an "update"
// command sent to each device, so updatesAsRollouts groups those commands by
// bundle URL into one single-stage rollout each. A fleet manager with staged
// rollouts fills the same struct with its own stages (and its pause and
// abort actions) through Config.Rollouts.
type Rollout struct {
	ID string // the rollout id, or the bundle URL for command-based rollouts
	// Staged is true for the fleet manager's staged rollouts, which have a
	// state and take pause, resume and abort.
	Staged  bool
	What    string // kind and version of the artifact
	State   string
	Reason  string
	Actions []string // states an operator may move it to; none for a viewer
	CSRF    string   // the page's form token, for the actions' form
	Started time.Time
	Updated time.Time
	Stages  []RolloutStage
	// Failures are the devices whose update failed, with their errors.
	Failures []RolloutFailure
}

// RolloutStage is one wave of a rollout.
type RolloutStage struct {
	Name                  string
	Current               bool
	Devices, Done, Failed int
	// Bytes of the stage's downloads, from the devices' statuses: the
	// whole bundles, what the devices had to fetch (the chunks they held
	// nowhere), and what they fetched so far.
	Full, Planned, Transferred int64
}

// add counts a device's download of the rollout's bundle.
func (s *RolloutStage) add(u *fleetwire.UpdateStatus) {
	if u != nil {
		s.Full += u.FullBytes
		s.Planned += u.PlannedBytes
		s.Transferred += u.TransferredBytes
	}
}

// Pending is how many of the stage's devices have not answered yet.
func (s RolloutStage) Pending() int { return s.Devices - s.Done - s.Failed }

// Progress is the share of the stage's devices that answered.
func (s RolloutStage) Progress() float64 {
	if s.Devices == 0 {
		return 0
	}
	return float64(s.Done+s.Failed) / float64(s.Devices)
}

// RolloutFailure is one device's failed update.
type RolloutFailure struct {
	Device, Command, Error string
	At                     time.Time
}

// updatesAsRollouts groups the fleet's "update" commands by bundle URL.
func updatesAsRollouts(devs []*fleet.Device, detail func(id string) (*fleet.Device, error)) ([]Rollout, error) {
	byURL := map[string]*Rollout{}
	for _, d := range devs {
		full, err := detail(d.ID)
		if err != nil {
			return nil, err
		}
		seen := map[string]bool{} // a device counts once per rollout: its newest command
		for _, c := range full.Commands {
			if c.Name != "update" || seen[c.Args["url"]] {
				continue
			}
			u := c.Args["url"]
			seen[u] = true
			r := byURL[u]
			if r == nil {
				r = &Rollout{ID: u, Started: c.IssuedAt, Stages: []RolloutStage{{Name: "all devices (per-device commands)"}}}
				byURL[u] = r
			}
			if c.IssuedAt.Before(r.Started) {
				r.Started = c.IssuedAt
			}
			if c.UpdatedAt.After(r.Updated) {
				r.Updated = c.UpdatedAt
			}
			st := &r.Stages[0]
			st.Devices++
			st.add(full.Status.UpdateOf(u))
			switch c.State {
			case fleet.CommandDone:
				st.Done++
			case fleet.CommandFailed:
				st.Failed++
				f := RolloutFailure{Device: d.ID, Command: c.ID, At: c.UpdatedAt}
				if c.Result != nil {
					f.Error = c.Result.Error
				}
				r.Failures = append(r.Failures, f)
			}
		}
	}
	out := make([]Rollout, 0, len(byURL))
	for _, r := range byURL {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Started.After(out[j].Started) })
	return out, nil
}

// StagedRollouts is the fleet manager's rollout controller (*fleet.Manager
// implements it); the rollouts page lists its rollouts and sends their
// state changes.
type StagedRollouts interface {
	Rollouts() ([]*fleet.Rollout, error)
	SetRolloutState(ctx context.Context, id, state, reason string) (*fleet.Rollout, error)
}

var _ StagedRollouts = (*fleet.Manager)(nil)

// stagedView turns a controller's rollout into the page's.
func stagedView(r *fleet.Rollout) Rollout {
	v := Rollout{ID: r.ID, Staged: true, What: r.Kind + " " + r.Version, State: r.State, Reason: r.Reason, Started: r.Created, Updated: r.Updated}
	prev := 0.0
	for i, share := range r.Spec.Stages {
		v.Stages = append(v.Stages, RolloutStage{Name: fmt.Sprintf("%d: %.0f%% → %.0f%% of the selected devices", i+1, prev*100, share*100), Current: i == r.Stage})
		prev = share
	}
	ids := make([]string, 0, len(r.Devices))
	for id := range r.Devices {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		d := r.Devices[id]
		if d.Stage < 0 || d.Stage >= len(v.Stages) {
			continue
		}
		st := &v.Stages[d.Stage]
		st.Devices++
		st.Full += d.FullBytes
		st.Planned += d.PlannedBytes
		st.Transferred += d.TransferredBytes
		switch d.State {
		case fleet.DeviceSucceeded:
			st.Done++
		case fleet.DeviceFailed:
			st.Failed++
			v.Failures = append(v.Failures, RolloutFailure{Device: id, Command: d.Command, Error: d.Error, At: d.UpdatedAt})
		}
	}
	switch r.State {
	case fleet.RolloutRunning:
		v.Actions = []string{fleet.RolloutPaused, fleet.RolloutAborted}
	case fleet.RolloutPaused, fleet.RolloutHalted:
		v.Actions = []string{fleet.RolloutRunning, fleet.RolloutAborted}
	}
	return v
}

func (s *Server) rollouts(w http.ResponseWriter, r *http.Request) {
	devs, ok := s.fleetDevices(w, r)
	if !ok {
		return
	}
	var staged []Rollout
	if sr, ok := s.cfg.Fleet.(StagedRollouts); ok {
		list, err := sr.Rollouts()
		if err != nil {
			s.fail(w, r, http.StatusInternalServerError, err)
			return
		}
		sess, _ := r.Context().Value(sessionKey{}).(session)
		for _, ro := range list {
			v := stagedView(ro)
			if v.CSRF = sess.token; !sess.CanAct() {
				v.Actions = nil
			}
			staged = append(staged, v)
		}
		sort.Slice(staged, func(i, j int) bool { return staged[i].Started.After(staged[j].Started) })
	}
	rs, err := updatesAsRollouts(devs, s.cfg.Fleet.Device)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	s.render(w, r, http.StatusOK, "rollouts", map[string]any{"Staged": staged, "Rollouts": rs, "Error": r.URL.Query().Get("error"), "Done": r.URL.Query().Get("done")})
}

// setRolloutState takes the pause, resume and abort buttons.
func (s *Server) setRolloutState(w http.ResponseWriter, r *http.Request) {
	sr, ok := s.cfg.Fleet.(StagedRollouts)
	if !ok {
		s.fail(w, r, http.StatusNotFound, errors.New("this fleet manager has no staged rollouts"))
		return
	}
	id, state := r.PathValue("id"), r.PostFormValue("state")
	if _, err := sr.SetRolloutState(r.Context(), id, state, "dashboard"); err != nil {
		failAction(w, r, "/ui/rollouts?", err)
		return
	}
	http.Redirect(w, r, "/ui/rollouts?done="+url.QueryEscape(id+" → "+state), http.StatusSeeOther)
}
