package ui

import (
	"net/http"
	"sort"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet"
)

// Rollout is one update going out to devices, as the rollouts page shows it.
// Today's fleet manager has no rollout object: an update is an "update"
// command sent to each device, so updatesAsRollouts groups those commands by
// bundle URL into one single-stage rollout each. A fleet manager with staged
// rollouts fills the same struct with its own stages (and its pause and
// abort actions) through Config.Rollouts.
type Rollout struct {
	ID      string // the bundle URL for command-based rollouts
	Started time.Time
	Updated time.Time
	Stages  []RolloutStage
	// Failures are the devices whose update failed, with their errors.
	Failures []RolloutFailure
}

// RolloutStage is one wave of a rollout.
type RolloutStage struct {
	Name                  string
	Devices, Done, Failed int
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

func (s *Server) rollouts(w http.ResponseWriter, _ *http.Request) {
	devs, ok := s.fleetDevices(w)
	if !ok {
		return
	}
	rs, err := updatesAsRollouts(devs, s.cfg.Fleet.Device)
	if err != nil {
		s.fail(w, http.StatusInternalServerError, err)
		return
	}
	s.render(w, http.StatusOK, "rollouts", map[string]any{"Rollouts": rs})
}
