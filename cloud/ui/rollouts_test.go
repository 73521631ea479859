package ui

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet"
	"github.com/phaseless/phaseless/cloud/ingress"
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

// rolloutFleet is a fleet with no devices and one staged rollout, recording
// the state changes the page sends.
type rolloutFleet struct {
	r   *fleet.Rollout
	set []string
}

func (f *rolloutFleet) Devices() ([]*fleet.Device, error)        { return nil, nil }
func (f *rolloutFleet) Device(string) (*fleet.Device, error)     { return nil, fleet.ErrUnknownDevice }
func (f *rolloutFleet) StatusHistory(string) []fleet.StatusEvent { return nil }
func (f *rolloutFleet) Rollouts() ([]*fleet.Rollout, error)      { return []*fleet.Rollout{f.r}, nil }
func (f *rolloutFleet) Export(context.Context, io.Writer, time.Time, string) (int, error) {
	return 0, nil
}
func (f *rolloutFleet) SendCommand(context.Context, string, string, map[string]string) (*fleet.CommandState, error) {
	return nil, errors.New("no devices")
}
func (f *rolloutFleet) SetRolloutState(_ context.Context, id, state, _ string) (*fleet.Rollout, error) {
	f.set = append(f.set, id+"="+state)
	f.r.State = state
	return f.r, nil
}

// A staged rollout shows its stages with the devices of each, its
// failures, and the buttons its state allows; a button's POST reaches the
// controller.
func TestStagedRolloutPage(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	r := &fleet.Rollout{ID: "r1", Kind: "agent", Version: "1.5.0", State: fleet.RolloutRunning, Stage: 1, Created: t0, Updated: t0,
		Spec: fleet.RolloutSpec{Stages: []float64{0.1, 1}},
		Devices: map[string]*fleet.RolloutDevice{
			"car-1": {Stage: 0, State: fleet.DeviceSucceeded, FullBytes: 3 << 20, PlannedBytes: 80 << 10, TransferredBytes: 80 << 10},
			"car-2": {Stage: 1, State: fleet.DeviceFailed, Error: "signature", Command: "c9", UpdatedAt: t0},
			"car-3": {Stage: 1, State: fleet.DeviceUpdating},
		}}
	v := stagedView(r)
	if len(v.Stages) != 2 || v.Stages[0].Done != 1 || v.Stages[1].Devices != 2 || v.Stages[1].Failed != 1 || !v.Stages[1].Current || v.Stages[1].Pending() != 1 {
		t.Fatalf("stages %+v", v.Stages)
	}
	if st := v.Stages[0]; st.Full != 3<<20 || st.Planned != 80<<10 || st.Transferred != 80<<10 {
		t.Fatalf("stage 1 bytes %+v", st)
	}
	if len(v.Failures) != 1 || v.Failures[0].Device != "car-2" || strings.Join(v.Actions, ",") != "paused,aborted" {
		t.Fatalf("failures %+v actions %v", v.Failures, v.Actions)
	}
	f := &rolloutFleet{r: r}
	s, err := New(Config{Fleet: f, Gate: ingress.NewGate(nil, nil, nil, nil)})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "/ui/rollouts", nil))
	if body := rec.Body.String(); rec.Code != 200 || !strings.Contains(body, "agent 1.5.0") || !strings.Contains(body, `value="paused"`) || !strings.Contains(body, "signature") || !strings.Contains(body, "80.0 KiB / 3.0 MiB") {
		t.Fatalf("page %d:\n%s", rec.Code, body)
	}
	session := rec.Result().Cookies()
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(rec.Body.String())
	if len(session) != 1 || m == nil {
		t.Fatalf("the page set cookies %v and form token %v", session, m)
	}
	pause := func(form string) int {
		req := httptest.NewRequest("POST", "/ui/rollouts/r1/state", strings.NewReader(form))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(session[0])
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		return rec.Code
	}
	// Even on an open (--dev) dashboard a form needs its session's token.
	if code := pause("state=paused"); code != http.StatusForbidden || len(f.set) != 0 {
		t.Fatalf("pause without the form token: %d %v", code, f.set)
	}
	if code := pause("state=paused&csrf=" + m[1]); code != http.StatusSeeOther || len(f.set) != 1 || f.set[0] != "r1=paused" {
		t.Fatalf("pause: %d %v", code, f.set)
	}
	if got := strings.Join(stagedView(r).Actions, ","); got != "running,aborted" {
		t.Errorf("paused rollout offers %s", got)
	}
}

// deviceFleet is rolloutFleet with one device.
type deviceFleet struct {
	rolloutFleet
	d *fleet.Device
}

func (f *deviceFleet) Devices() ([]*fleet.Device, error)    { return []*fleet.Device{f.d}, nil }
func (f *deviceFleet) Device(string) (*fleet.Device, error) { return f.d, nil }

// After a rollout installed agent 2.1 (the binary's build stamp still says
// 1.2.3) and router 1.1, the device list and the device page show what the
// device runs.
func TestDevicePagesShowInstalledVersions(t *testing.T) {
	d := &fleet.Device{ID: "car-1", Status: &tfleet.Status{State: "online", Version: "1.2.3", Board: "rk3588",
		Artifacts: map[string]string{"agent": "2.1", "predictor": "1.1"}}}
	s, err := New(Config{Fleet: &deviceFleet{rolloutFleet: rolloutFleet{r: &fleet.Rollout{ID: "r1"}}, d: d}, Gate: ingress.NewGate(nil, nil, nil, nil)})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/ui/", "/ui/devices/car-1"} {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		body := rec.Body.String()
		if rec.Code != 200 || !strings.Contains(body, "2.1") || !strings.Contains(body, "predictor 1.1") || strings.Contains(body, "1.2.3") {
			t.Errorf("%s: %d\n%s", path, rec.Code, body)
		}
	}
}
