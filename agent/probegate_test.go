package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet"
	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/models/edgemodel"
)

// TestProbeGateRollout rolls edge models carrying a signed probe set out
// to three real agents (on the shipped edge model) through a real fleet
// manager and embedded broker. An earlier training checkpoint of the
// shipped model (testdata/edge-step600.gguf) passes its health check —
// it loads and answers — but fails the probe gate on both devices of the
// first stage, which keep serving the shipped model and report it rolled
// back; the rollout halts with both scores in its reason and the third
// device is never sent it. The shipped model re-signed as a newer version
// scores the same and commits everywhere.
func TestProbeGateRollout(t *testing.T) {
	if raceEnabled {
		t.Skip("two real models answer the probe set on every device: minutes under -race; make test runs it without")
	}
	shop := newBundleShop(t)
	m, b, srv := startFleetCloud(t, shop.pub)
	ids := []string{"car-g1", "car-g2", "car-g3"}
	agents := map[string]*Agent{}
	for _, id := range ids {
		cfg := testConfig(t)
		cfg.Board, cfg.OTAPub, cfg.OTAOrigins = "rpi4", shop.pubPath, cli.StringList{srv.URL}
		cfg.MQTT, cfg.DeviceID = "mqtt://"+b.TCPAddr(), id
		agents[id], _ = startAgent(t, cfg)
	}
	for _, id := range ids {
		waitUntil(t, id+" online", func() bool { d, err := m.Device(id); return err == nil && d.State() == "online" })
	}

	set := firmware.ProbeSet{Name: "incar", Margin: 0.1}
	f, err := os.Open("testdata/probes-incar.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var p firmware.Probe
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			t.Fatal(err)
		}
		set.Probes = append(set.Probes, p)
	}
	f.Close()
	probes, err := firmware.SignProbeSet(shop.priv, set)
	if err != nil {
		t.Fatal(err)
	}
	rollout := func(version string, gguf []byte) *fleet.Rollout {
		t.Helper()
		var bb bytes.Buffer
		files := map[string][]byte{"edge.gguf": gguf, firmware.ProbeSetFile: probes}
		if err := firmware.WriteKind(&bb, shop.priv, firmware.KindModel, version, "rpi4", files, []string{"edge.gguf", firmware.ProbeSetFile}); err != nil {
			t.Fatal(err)
		}
		art, err := m.PutArtifact(&bb)
		if err != nil {
			t.Fatal(err)
		}
		r, err := m.CreateRollout(context.Background(), fleet.RolloutSpec{Artifact: art.ID, Stages: []float64{0.5, 1}, MaxFailures: new(0.0), UpdateTimeout: fleet.Duration(2 * time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		var cur *fleet.Rollout
		waitUntil(t, "rollout "+version+" settles", func() bool {
			cur, _ = m.Rollout(r.ID)
			return cur.State == fleet.RolloutDone || cur.State == fleet.RolloutHalted
		})
		return cur
	}

	early, err := os.ReadFile("testdata/edge-step600.gguf")
	if err != nil {
		t.Fatal(err)
	}
	r := rollout("2.0", early)
	if r.State != fleet.RolloutHalted || len(r.Devices) != 2 || r.Progress().Failed != 2 {
		t.Fatalf("worse model: rollout %s on %d devices, %+v (%s)", r.State, len(r.Devices), r.Progress(), r.Reason)
	}
	t.Logf("halt reason: %s", r.Reason)
	for _, want := range []string{"stage 1: 2 of 2 devices failed", "probe gate failed: candidate 0.", "installed 1.000 (10/10 right)", "margin 0.100"} {
		if !strings.Contains(r.Reason, want) {
			t.Errorf("halt reason lacks %q", want)
		}
	}
	for id, rd := range r.Devices {
		if !strings.Contains(rd.Error, "probe gate failed") || !strings.Contains(rd.Error, "installed 1.000") {
			t.Errorf("%s failed with %q, want the probe gate's scores", id, rd.Error)
		}
		waitUntil(t, id+" reports the rollback", func() bool {
			d, _ := m.Device(id)
			return d.Status.RolledBack[firmware.KindModel] == "2.0"
		})
	}
	for id, a := range agents {
		if running, _ := a.ota.Artifacts(); running[firmware.KindModel] != "" {
			t.Fatalf("%s runs edge model %q after the halted rollout, want the agent's own", id, running[firmware.KindModel])
		}
		if _, probe := a.engine.swap.Current(); probe == nil {
			t.Fatalf("%s swapped its engine although the update was rolled back", id)
		}
	}

	r = rollout("2.1", edgemodel.GGUF())
	if r.State != fleet.RolloutDone || r.Progress().Succeeded != 3 {
		t.Fatalf("equal model: rollout %s (%s): %+v", r.State, r.Reason, r.Progress())
	}
	for id, a := range agents {
		if running, _ := a.ota.Artifacts(); running[firmware.KindModel] != "2.1" {
			t.Fatalf("%s runs edge model %q, want 2.1", id, running[firmware.KindModel])
		}
		d, _ := m.Device(id)
		passed := false
		for _, c := range d.Commands {
			passed = passed || c.Result != nil && strings.Contains(c.Result.Output, "probe gate passed: candidate 1.000 (10/10 right), installed 1.000")
		}
		if !passed {
			t.Errorf("%s: no update result reports the passing scores: %+v", id, d.Commands)
		}
	}
}
