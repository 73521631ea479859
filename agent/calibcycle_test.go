package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/ctl"
	"github.com/phaseless/phaseless/cloud/fleet"
	"github.com/phaseless/phaseless/cloud/fleetapi"
	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/models/cloudmodel"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/predictor/train"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// TestCalibrationFollowsRetrainedRouter runs one full cycle of the
// router's two loops (docs/predictor.md, "Which moves when") with a real
// fleet manager, a real shadow grader (the shipped cloud model on a real
// engine) and real agents on a real broker:
//
//  1. both devices ask banking questions; their shadow samples are graded
//     and each device's threshold is calibrated on its own outcomes;
//  2. one device's traffic shifts to car commands: its threshold moves
//     (recalibrated on every grade), the other's traffic stays;
//  3. `model train --telemetry` retrains the router on the fleet's export
//     and `model publish` rolls it out;
//  4. as soon as a device reports the new router, its calibrated threshold
//     leaves its config (the fleet's serves), and the window starts again:
//     no outcome scored by the old router calibrates the new one;
//  5. the new router's own outcomes certify a new threshold, which the
//     device applies.
//
// α = δ = 0.2 so that eight outcomes certify a threshold: the point is
// the cycle, not the bound's tightness (the simulation,
// TestCalibratedFleetOnShiftedTraffic, measures that).
func TestCalibrationFollowsRetrainedRouter(t *testing.T) {
	if raceEnabled {
		t.Skip("trains a router with gorgonia: minutes under -race; make test runs it without")
	}
	dir := t.TempDir()
	pub, priv, _, pubPath := writeOTAKeys(t, dir)
	cm, err := cloudmodel.Open()
	if err != nil {
		t.Fatal(err)
	}
	grader, err := lm.NewEngine(cm, lm.EngineConfig{MaxBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { grader.Close() })
	m, b, srv := startFleetCloudWith(t, fleet.Config{OTAPub: pub, Shadow: grader})
	ctx := context.Background()
	s := func(v string) *string { return &v }
	if _, err := m.SetConfigLayer(ctx, "fleet", fleet.ConfigUpdate{Merge: true, Values: map[string]*string{
		"shadow-share": s("0.25"), "router-alpha": s("0.2"), "router-delta": s("0.2"), "route-threshold": s("0.5")}}); err != nil {
		t.Fatal(err)
	}

	data, err := train.LoadRouting(filepath.Join("..", ctl.DefaultRoutingData))
	if err != nil {
		t.Fatal(err)
	}
	byIntent := map[string][]string{}
	for _, u := range data.CLINC {
		byIntent[u.Intent] = append(byIntent[u.Intent], u.Text)
	}
	ids := []string{"car-s1", "car-s2"}
	agents := map[string]*Agent{}
	urls := map[string]string{}
	for _, id := range ids {
		cfg := testConfig(t)
		cfg.Predictor, cfg.Board, cfg.OTAPub, cfg.OTAOrigins = "", "rpi4", pubPath, cli.StringList{srv.URL}
		cfg.MQTT, cfg.DeviceID = "mqtt://"+b.TCPAddr(), id
		agents[id], urls[id] = startAgent(t, cfg)
		waitUntil(t, id+" online", func() bool { d, err := m.Device(id); return err == nil && d.State() == "online" })
	}
	device := func(id string) *fleet.Device {
		d, err := m.Device(id)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	sampled := func(id string) uint64 {
		const name = "phaseless_agent_shadow_sampled_total"
		var b bytes.Buffer
		agents[id].metrics.WriteText(&b)
		return uint64(metrics.Sums(b.Bytes(), map[string]bool{name: true})[name])
	}
	// ask sends id requests of class (each utterance once, in turn) until
	// want more of its samples are graded, and waits for the grades.
	next := map[string]int{}
	ask := func(id string, class []string, want uint64) {
		t.Helper()
		graded := func() uint64 {
			tl := device(id).Telemetry
			return tl.ShadowPassed + tl.ShadowFailed + tl.ShadowErrors
		}
		goal := graded() + want
		for start := sampled(id); sampled(id)-start < want; next[id]++ {
			if next[id] > 2000 {
				t.Fatalf("%s: 2000 requests and %d samples", id, sampled(id)-start)
			}
			intent := class[next[id]%len(class)]
			text := byIntent[intent][(next[id]/len(class))%len(byIntent[intent])]
			body, _ := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "user", "content": text}}, "max_tokens": 2})
			resp := post(t, urls[id]+"/v1/chat/completions", string(body))
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("%s: %s: %d", id, text, resp.StatusCode)
			}
			time.Sleep(time.Millisecond) // the tap counts a sample after the answer ends
		}
		waitUntil(t, id+"'s samples graded", func() bool { return graded() >= goal })
	}
	calibrated := func(id string) (th float64, src string, r fleetapi.RouterCalibration) {
		d := device(id)
		if d.Router == nil {
			t.Fatalf("%s: no calibration", id)
		}
		th, _ = strconv.ParseFloat(d.Desired.Values["route-threshold"], 64)
		return th, d.ConfigSources["route-threshold"], *d.Router
	}
	// applied waits until id runs its desired config and returns the
	// threshold it routes with.
	applied := func(id string) float64 {
		t.Helper()
		waitUntil(t, id+" applies its desired config", func() bool {
			d := device(id)
			return d.Desired != nil && d.Reported != nil && d.Reported.Version == d.Desired.Version && d.Reported.Applied
		})
		a := agents[id]
		a.cfgMu.Lock()
		defer a.cfgMu.Unlock()
		return a.running.RouteThreshold
	}

	// 1. Banking questions on both devices.
	for _, id := range ids {
		ask(id, bankingIntents, 16)
		th, src, r := calibrated(id)
		if !r.Certified || src != fleetapi.SourceCalibrated || r.Router != fleetwire.RouterBuiltin || r.Delta != 0.2 {
			t.Fatalf("%s after banking traffic: %+v, threshold %g from %s", id, r, th, src)
		}
		if got := applied(id); got != th {
			t.Fatalf("%s routes at %g, calibrated %g", id, got, th)
		}
		t.Logf("%s, banking: threshold %.3f over %d outcomes (realised %.1f%% wrong local)", id, th, r.Outcomes, 100*r.Realised)
	}
	before, _, _ := calibrated("car-s1")
	other, _, _ := calibrated("car-s2")

	// 2. car-s1's traffic shifts to car commands; car-s2's does not.
	ask("car-s1", carIntents, 24)
	ask("car-s2", bankingIntents, 4)
	shifted, src, r := calibrated("car-s1")
	if !r.Certified || src != fleetapi.SourceCalibrated || shifted == before {
		t.Fatalf("car-s1 after the shift: threshold %g (was %g) from %s, %+v", shifted, before, src, r)
	}
	if got := applied("car-s1"); got != shifted {
		t.Fatalf("car-s1 routes at %g, calibrated %g", got, shifted)
	}
	stay, _, _ := calibrated("car-s2")
	t.Logf("car-s1, car commands: threshold %.3f → %.3f over %d outcomes; car-s2 (banking still) %.3f → %.3f", before, shifted, r.Outcomes, other, stay)
	oldOutcomes := r.Outcomes

	// 3. Retrain on the fleet's telemetry (the shadow grades label the
	// local answers) and roll the new router out.
	export := filepath.Join(dir, "fleet.jsonl")
	f, err := os.Create(export)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Export(ctx, f, time.Time{}, ""); err != nil {
		t.Fatal(err)
	}
	f.Close()
	cand := filepath.Join(dir, "retrained.onnx")
	if out, err := runCtl("model", "train", "--data", filepath.Join("..", ctl.DefaultRoutingData), "--telemetry", export, "--telemetry-weight", "0.5", "--out", cand); err != nil {
		t.Fatalf("model train: %v\n%s", err, out)
	}
	// Signed and rolled out as `model publish` does, without its quality
	// gate: on a fleet slice this small (about 40 held-out requests) the
	// gate refused the retrained router in a run (balanced accuracy 0.45
	// against 0.60), which is the gate's business (TestLearningLoop), not
	// the calibration's.
	onnx, err := os.ReadFile(cand)
	if err != nil {
		t.Fatal(err)
	}
	var bundle bytes.Buffer
	if err := firmware.WriteKind(&bundle, priv, firmware.KindPredictor, "2.0", "rpi4", map[string][]byte{"router.onnx": onnx}, []string{"router.onnx"}); err != nil {
		t.Fatal(err)
	}
	art, err := m.PutArtifact(&bundle)
	if err != nil {
		t.Fatal(err)
	}
	ro, err := m.CreateRollout(ctx, fleet.RolloutSpec{Artifact: art.ID, Stages: []float64{1}, MaxFailures: new(0.0), UpdateTimeout: fleet.Duration(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the rollout reaches the fleet", func() bool {
		r, err := m.Rollout(ro.ID)
		if err == nil && r.State == fleet.RolloutHalted {
			t.Fatalf("rollout halted: %s", r.Reason)
		}
		return err == nil && r.State == fleet.RolloutDone
	})

	// 4. Each device's status names router 2.0: its calibration restarts
	// before any new grade, and the device routes at the fleet's 0.5.
	for _, id := range ids {
		waitUntil(t, id+" reports router 2.0", func() bool {
			d := device(id)
			return d.Status != nil && d.Status.Artifacts[firmware.KindPredictor] == "2.0"
		})
		th, src, r := calibrated(id)
		if r.Router != "2.0" || r.Certified || r.Outcomes != 0 || th != 0.5 || src != "fleet" {
			t.Fatalf("%s on router 2.0: %+v, threshold %g from %s", id, r, th, src)
		}
		if got := applied(id); got != 0.5 {
			t.Fatalf("%s routes at %g on the new router, want the fleet's 0.5", id, got)
		}
	}

	// 5. The new router's outcomes certify car-s1's threshold again, on
	// its own scores only: no more outcomes than samples since then.
	since := sampled("car-s1")
	ask("car-s1", carIntents, 12)
	th, src, r := calibrated("car-s1")
	if !r.Certified || src != fleetapi.SourceCalibrated || r.Router != "2.0" || uint64(r.Outcomes) > sampled("car-s1")-since {
		t.Fatalf("car-s1 on router 2.0: %+v, threshold %g from %s", r, th, src)
	}
	if got := applied("car-s1"); got != th {
		t.Fatalf("car-s1 routes at %g, calibrated %g", got, th)
	}
	t.Logf("car-s1, router 2.0: threshold %.3f over %d outcomes (router 1: %.3f over %d)", th, r.Outcomes, shifted, oldOutcomes)
}
