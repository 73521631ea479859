package ui

import (
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet"
	tfleet "github.com/phaseless/phaseless/transport/fleetwire"
)

// update commands become one rollout per bundle URL; each device counts
// once per rollout (its newest command), failures carry the device's error,
// and other commands are not rollouts.
func TestUpdatesAsRollouts(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	cmd := func(id, name, url, state string, at time.Time, errText string) fleet.CommandState {
		c := fleet.CommandState{Command: tfleet.Command{ID: id, Name: name, Args: map[string]string{"url": url}, IssuedAt: at}, State: state, UpdatedAt: at.Add(time.Second)}
		if state != fleet.CommandPending {
			c.Result = &tfleet.CommandResult{ID: id, OK: state == fleet.CommandDone, Error: errText}
		}
		return c
	}
	devs := map[string]*fleet.Device{
		"car-1": {ID: "car-1", Commands: []fleet.CommandState{ // newest first, as the store returns them
			cmd("c3", "update", "https://u/2.0", fleet.CommandDone, t0.Add(2*time.Hour), ""),
			cmd("c2", "update", "https://u/1.0", fleet.CommandDone, t0.Add(time.Hour), ""),
			cmd("c1", "update", "https://u/1.0", fleet.CommandFailed, t0, "download failed"),
		}},
		"car-2": {ID: "car-2", Commands: []fleet.CommandState{
			cmd("c4", "update", "https://u/2.0", fleet.CommandFailed, t0.Add(3*time.Hour), "signature"),
			cmd("c5", "reload-predictor", "", fleet.CommandDone, t0, ""),
		}},
		"car-3": {ID: "car-3", Commands: []fleet.CommandState{cmd("c6", "update", "https://u/2.0", fleet.CommandPending, t0.Add(2*time.Hour), "")}},
	}
	list := []*fleet.Device{{ID: "car-1"}, {ID: "car-2"}, {ID: "car-3"}}
	rs, err := updatesAsRollouts(list, func(id string) (*fleet.Device, error) { return devs[id], nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].ID != "https://u/2.0" || rs[1].ID != "https://u/1.0" {
		t.Fatalf("rollouts %+v", rs)
	}
	st := rs[0].Stages[0]
	if st.Devices != 3 || st.Done != 1 || st.Failed != 1 || st.Pending() != 1 || st.Progress() != 2.0/3 {
		t.Errorf("2.0: %+v", st)
	}
	if len(rs[0].Failures) != 1 || rs[0].Failures[0].Device != "car-2" || rs[0].Failures[0].Error != "signature" {
		t.Errorf("2.0 failures %+v", rs[0].Failures)
	}
	if st := rs[1].Stages[0]; st.Devices != 1 || st.Done != 1 || len(rs[1].Failures) != 0 {
		t.Errorf("1.0 counts car-1's newest command only: %+v %+v", st, rs[1].Failures)
	}
	if !rs[0].Started.Equal(t0.Add(2 * time.Hour)) {
		t.Errorf("started %v", rs[0].Started)
	}
}
