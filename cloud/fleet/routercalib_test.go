package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/cloud/fleetapi"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// TestRouterCalibration feeds a device scored shadow grades as the graders
// store them: below riskcontrol's minimum the device keeps the fleet's
// threshold; with enough, its own calibrated threshold becomes its desired
// route-threshold (source "calibrated", with the router-alpha it bounds),
// moves with the fleet's router-alpha, and an operator's override on the
// device wins. Grades without a score (older agents) or without a verdict
// change nothing, and a predictor rollout starts the window again.
func TestRouterCalibration(t *testing.T) {
	b := startBroker(t, broker.Config{DevAuth: true})
	m := openManager(t, Config{DataDir: t.TempDir(), Broker: b})
	ctx := context.Background()
	s := func(v string) *string { return &v }
	if _, err := m.SetConfigLayer(ctx, "fleet", ConfigUpdate{Merge: true, Values: map[string]*string{"route-threshold": s("0.6")}}); err != nil {
		t.Fatal(err)
	}
	for _, kv := range [][2]string{{"router-alpha", "1.5"}, {"router-delta", "0"}, {"router-delta", "x"}} {
		if _, err := m.SetConfigLayer(ctx, "fleet", ConfigUpdate{Merge: true, Values: map[string]*string{kv[0]: s(kv[1])}}); err == nil {
			t.Fatalf("%s %s accepted", kv[0], kv[1])
		}
	}
	rng := rand.New(rand.NewPCG(35, 2))
	n := 0
	feed := func(k int, g fleetwire.ShadowGrade) *Device {
		t.Helper()
		var dev *Device
		for range k {
			n++
			g := g
			if g.CloudProb == nil && g.Error == "" && g.TraceID == "" {
				p := rng.Float64()
				g.CloudProb, g.OK, g.Path = &p, rng.Float64() >= p*p, "local"
			}
			g.TraceID = fmt.Sprintf("t%d", n)
			d, _, _, err := m.st.storeShadowGrade("car-1", commandKey("car-1", g.TraceID), g, m.now())
			if err != nil {
				t.Fatal(err)
			}
			dev = d
		}
		return dev
	}
	threshold := func(d *Device) (float64, string) {
		v, _ := strconv.ParseFloat(d.Desired.Values["route-threshold"], 64)
		return v, d.ConfigSources["route-threshold"]
	}
	d := feed(3, fleetwire.ShadowGrade{TraceID: "unscored", OK: true})
	if d.Router != nil {
		t.Fatalf("unscored grades calibrated: %+v", d.Router)
	}
	d = feed(50, fleetwire.ShadowGrade{})
	if r := d.Router; r == nil || r.Certified || r.Outcomes != 50 || r.Alpha != fleetapi.DefaultRouterAlpha {
		t.Fatalf("50 outcomes: %+v", r)
	}
	if th, src := threshold(d); th != 0.6 || src != "fleet" {
		t.Fatalf("too few outcomes: threshold %g from %s, want the fleet's 0.6", th, src)
	}
	d = feed(350, fleetwire.ShadowGrade{})
	th, src := threshold(d)
	// Wrong with probability score², so the risk at t is t³/3: the best
	// threshold at α = 0.05 is 0.53; the bound's margin at 400 lies below it.
	if !d.Router.Certified || src != fleetapi.SourceCalibrated || th < 0.35 || th > 0.531 || d.Desired.Values["router-alpha"] != "0.05" {
		t.Fatalf("400 outcomes: threshold %g from %s, %+v, values %v", th, src, d.Router, d.Desired.Values)
	}
	if d.Router.Realised > 0.4 || d.Router.Realised < 0.27 {
		t.Errorf("realised %g: every outcome ran locally, so about a third of them are wrong (E[score²])", d.Router.Realised)
	}
	if _, err := m.SetConfigLayer(ctx, "fleet", ConfigUpdate{Merge: true, Values: map[string]*string{"router-alpha": s("0.1")}}); err != nil {
		t.Fatal(err)
	}
	d = feed(1, fleetwire.ShadowGrade{})
	if th2, _ := threshold(d); th2 <= th || d.Router.Alpha != 0.1 || d.Router.Outcomes != 401 {
		t.Fatalf("α 0.1: threshold %g (was %g), %+v", th2, th, d.Router)
	}
	before := d.Desired.Version
	d = feed(1, fleetwire.ShadowGrade{TraceID: "err", Error: "cloud down"})
	if d.Router.Outcomes != 401 || d.Desired.Version != before {
		t.Fatalf("a grade without a verdict changed the calibration: %+v v%d", d.Router, d.Desired.Version)
	}
	// A larger δ (less confidence) certifies a threshold at least as high
	// on the same outcomes, and the device is told the δ it runs under.
	thA, _ := threshold(d)
	if _, err := m.SetConfigLayer(ctx, "fleet", ConfigUpdate{Merge: true, Values: map[string]*string{"router-delta": s("0.3")}}); err != nil {
		t.Fatal(err)
	}
	d = feed(1, fleetwire.ShadowGrade{})
	th3, _ := threshold(d)
	if d.Router.Delta != 0.3 || d.Desired.Values["router-delta"] != "0.3" || th3 <= thA {
		t.Fatalf("δ 0.3: %+v, threshold %g (δ 0.05: %g)", d.Router, th3, thA)
	}
	if d.Router.Router != fleetwire.RouterBuiltin {
		t.Fatalf("calibrated for router %q, want the built-in one (no status yet)", d.Router.Router)
	}
	// A new router model on the device (its status reports the predictor
	// rollout) drops the calibrated threshold at once, before any grade:
	// back to the fleet's.
	st, _ := json.Marshal(fleetwire.Status{DeviceID: "car-1", State: "online", Artifacts: map[string]string{"predictor": "v6"}})
	m.handleStatus("car-1", st)
	d, _ = m.Device("car-1")
	if th, src := threshold(d); d.Router.Router != "v6" || d.Router.Certified || d.Router.Outcomes != 0 || th != 0.6 || src != "fleet" {
		t.Fatalf("after a predictor rollout: %+v, threshold %g from %s", d.Router, th, src)
	}
	// A last will built before the rollout names the old router: it is
	// not taken for a rollback.
	will, _ := json.Marshal(fleetwire.Status{DeviceID: "car-1", State: "offline"})
	m.handleStatus("car-1", will)
	// A grade of a sample the old router scored, arriving now, is left
	// out; the new router's start a new window.
	d = feed(5, fleetwire.ShadowGrade{Router: fleetwire.RouterBuiltin})
	if d.Router.Outcomes != 0 || d.Router.Router != "v6" {
		t.Fatalf("grades of the old router calibrated the new: %+v", d.Router)
	}
	d = feed(1, fleetwire.ShadowGrade{Router: "v6"})
	if th, src := threshold(d); d.Router.Outcomes != 1 || d.Router.Certified || th != 0.6 || src != "fleet" {
		t.Fatalf("the new router's first grade: %+v, threshold %g from %s", d.Router, th, src)
	}
	if _, err := m.SetConfig(ctx, "car-1", ConfigUpdate{Merge: true, Values: map[string]*string{"route-threshold": s("0.3")}}); err != nil {
		t.Fatal(err)
	}
	d = feed(1, fleetwire.ShadowGrade{})
	if th, src := threshold(d); th != 0.3 || src != fleetapi.SourceDevice {
		t.Fatalf("the operator's override: threshold %g from %s", th, src)
	}
}

// TestCalibrationWindowKeepsTheLatest: a device is calibrated on its last
// CalibrationWindow outcomes, oldest dropped first.
func TestCalibrationWindowKeepsTheLatest(t *testing.T) {
	b := startBroker(t, broker.Config{DevAuth: true})
	m := openManager(t, Config{DataDir: t.TempDir(), Broker: b})
	const n = CalibrationWindow + 5
	dev := &Device{ID: "w"}
	err := m.st.(*store).db.Update(func(tx *bolt.Tx) error {
		for i := range n {
			p := float64(i) / n
			if _, err := calibrateTx(tx, dev, fleetwire.ShadowGrade{CloudProb: &p, OK: true, Path: "local"}, m.now()); err != nil {
				return err
			}
		}
		var w calibWindow
		if err := json.Unmarshal(tx.Bucket(bucketRouterCalib).Get([]byte("w")), &w); err != nil {
			return err
		}
		if len(w.Scores) != CalibrationWindow || w.Scores[0] != 5.0/n || len(w.Wrong) != CalibrationWindow || len(w.Local) != CalibrationWindow {
			t.Errorf("window of %d, oldest %g", len(w.Scores), w.Scores[0])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if dev.Router.Outcomes != CalibrationWindow || !dev.Router.Certified || dev.Router.Realised != 0 {
		t.Errorf("%+v", dev.Router)
	}
}
