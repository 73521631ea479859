package agent

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet"
	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/models/edgemodel"
	"github.com/phaseless/phaseless/models/predictor"
	"github.com/phaseless/phaseless/transport/fleetwire"
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

	probes := signedProbes(t, shop.priv)
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

// withProbes signs a bundle of kind holding file and the probe set for
// board rpi4 and returns its URL.
func (s *bundleShop) withProbes(t *testing.T, kind, version, file string, data, probes []byte) string {
	t.Helper()
	var b bytes.Buffer
	files := map[string][]byte{file: data, firmware.ProbeSetFile: probes}
	if err := firmware.WriteKind(&b, s.priv, kind, version, "rpi4", files, []string{file, firmware.ProbeSetFile}); err != nil {
		t.Fatal(err)
	}
	name := "/" + kind + "-" + version
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bundles[name] = b.Bytes()
	return s.srv.URL + name
}

// signedProbes is testdata/probes-incar.jsonl as a probe set with margin
// 0.1, signed with key.
func signedProbes(t *testing.T, key ed25519.PrivateKey) []byte {
	t.Helper()
	set := firmware.ProbeSet{Name: "incar", Margin: 0.1}
	f, err := os.Open("testdata/probes-incar.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var p firmware.Probe
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			t.Fatal(err)
		}
		set.Probes = append(set.Probes, p)
	}
	probes, err := firmware.SignProbeSet(key, set)
	if err != nil {
		t.Fatal(err)
	}
	return probes
}

// TestAgentUpdateProbeGate is the probe gate of an agent update, whose new
// build may embed another edge model: the committed agent (slot a, the
// shipped model) installs an agent bundle carrying a probe set and scores
// its engine on it before it restarts; the build booted on trial is not
// ready (/readyz, the supervisor's health check) until it has scored its
// own engine, and one that scores worse abandons its trial and exits, so
// the slot that worked runs again and reports the rollback with both
// scores. A test cannot rebuild the agent binary around another embedded
// model, so the trial build's model is given by --model: the earlier
// checkpoint (testdata/edge-step600.gguf) for the failing trial, the
// shipped model for the passing one, which then commits.
func TestAgentUpdateProbeGate(t *testing.T) {
	if raceEnabled {
		t.Skip("two real models answer the probe set: minutes under -race; make test runs it without")
	}
	shop := newBundleShop(t)
	probes := signedProbes(t, shop.priv)
	publish := func(version string) string {
		return shop.withProbes(t, firmware.KindAgent, version, "phaseless-agent", []byte("agent build "+version), probes)
	}
	cfg := testConfig(t)
	cfg.Board, cfg.OTAPub, cfg.OTAOrigins = "rpi4", shop.pubPath, cli.StringList{shop.srv.URL}
	// boot starts an agent as its supervisor would, from slot, with model
	// ("" = the shipped one), and returns it and Run's outcome.
	boot := func(slot, model string) (*Agent, <-chan error) {
		t.Helper()
		t.Setenv(firmware.EnvSlot, slot)
		c := cfg
		c.Model = model
		a, err := New(c, nil)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go func() { done <- a.Run(ctx) }()
		return a, done
	}
	exits := func(what string, done <-chan error) {
		t.Helper()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: Run: %v", what, err)
			}
		case <-time.After(3 * time.Minute):
			t.Fatalf("%s did not exit", what)
		}
	}
	readyz := func(a *Agent) int {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/readyz", nil)
		req.Host = "127.0.0.1" // the local API's DNS-rebinding guard
		a.Handler().ServeHTTP(rec, req)
		return rec.Code
	}
	slots := func() firmware.SlotState {
		s, err := firmware.OpenSlots(filepath.Join(cfg.DataDir, "ota"), cli.Version)
		if err != nil {
			t.Fatal(err)
		}
		return s.State()
	}

	a, done := boot("a", "")
	out, err := update(a, publish("2.0"))
	if err != nil || !strings.Contains(out, "on trial") {
		t.Fatalf("install: %q, %v", out, err)
	}
	exits("the installing agent", done)

	a, done = boot("b", "testdata/edge-step600.gguf")
	if code := readyz(a); code != http.StatusServiceUnavailable {
		t.Fatalf("trial build /readyz %d before its probe gate ran", code)
	}
	exits("the worse trial build", done) // it gives up its trial and exits
	if err := a.ota.TrialReady(); err == nil || !strings.Contains(err.Error(), "probe gate failed") {
		t.Fatalf("worse trial build's readiness: %v", err)
	}
	if st := slots(); st.Trial != "" || st.Active != "a" {
		t.Fatalf("slots after the failed gate: %+v", st)
	}

	a, done = boot("a", "")
	if _, rolledBack := a.ota.Artifacts(); rolledBack[firmware.KindAgent] != "2.0" {
		t.Fatalf("the committed agent reports rolled back %v", rolledBack)
	}
	g := a.ota.ProbeGates()[firmware.KindAgent]
	t.Logf("agent 2.0: %s", g.Result)
	if g.Version != "2.0" || g.Pass || !strings.Contains(g.Result, "candidate 0.000 (0/10 right), installed 1.000 (10/10 right)") {
		t.Fatalf("status probe gate %+v", g)
	}

	out, err = update(a, publish("2.1"))
	if err != nil {
		t.Fatalf("install 2.1: %q, %v", out, err)
	}
	exits("the installing agent", done)
	a, done = boot("b", "")
	waitUntil(t, "the trial build's probe gate", func() bool { return a.ota.TrialReady() == nil })
	if code := readyz(a); code != http.StatusOK {
		t.Fatalf("passing trial build /readyz %d", code)
	}
	if g := a.ota.ProbeGates()[firmware.KindAgent]; g.Version != "2.1" || !g.Pass {
		t.Fatalf("status probe gate %+v", g)
	}
	if out, err := a.ota.Commit(context.Background(), fleetwire.Command{Name: "ota-commit"}); err != nil {
		t.Fatalf("commit from inside the passing trial: %q, %v", out, err)
	}
	if st := slots(); st.Trial != "" || st.Active != "b" {
		t.Fatalf("slots after the commit: %+v", st)
	}
	select {
	case err := <-done:
		t.Fatalf("the passing trial build exited: %v", err)
	default:
	}
}

// TestRouterProbeGate gates router updates on a device that runs the
// entropy rule. First the fleet config names a probe set (probe-set, the
// signed set inline) that expects every request to stay local: a bundle
// of the shipped router model without probes.json is judged by it, scores
// lower than the rule and never serves. Then bundles carry their own set
// of routes (in-car requests stay local, open questions go to the cloud),
// which wins over the fleet's: one signed by another key fails the
// update; the fleet's key's passes, and the shipped router is swapped in
// with both scores in the update's result.
func TestRouterProbeGate(t *testing.T) {
	shop := newBundleShop(t)
	cfg := testConfig(t) // the entropy rule routes
	cfg.Board, cfg.OTAPub, cfg.OTAOrigins = "rpi4", shop.pubPath, cli.StringList{shop.srv.URL}
	a, _ := startAgent(t, cfg)
	set := firmware.ProbeSet{Name: "routes", Probes: []firmware.Probe{
		{Prompt: "turn on the heated seats", Expect: "=local"},
		{Prompt: "navigate to Denver", Expect: "=local"},
		{Prompt: "what is the capital of France", Expect: "=cloud"},
		{Prompt: "explain quantum entanglement in detail with equations", Expect: "=cloud"},
		{Prompt: "summarize the history of the roman empire", Expect: "=cloud"},
		{Prompt: "prove that there are infinitely many primes", Expect: "=cloud"},
	}}
	publish := func(version string, key ed25519.PrivateKey) string {
		probes, err := firmware.SignProbeSet(key, set)
		if err != nil {
			t.Fatal(err)
		}
		return shop.withProbes(t, firmware.KindPredictor, version, "router.onnx", predictor.Shipped(), probes)
	}
	_, otherKey, _ := ed25519.GenerateKey(nil)
	before := a.pred.Current()

	allLocal := firmware.ProbeSet{Name: "all-local"}
	for _, p := range set.Probes {
		allLocal.Probes = append(allLocal.Probes, firmware.Probe{Prompt: p.Prompt, Expect: "=local"})
	}
	fleetSet, err := firmware.SignProbeSet(shop.priv, allLocal)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.applyDesired(context.Background(), fleetwire.DesiredConfig{Version: 1, Values: map[string]string{"probe-set": string(fleetSet)}}); err != nil {
		t.Fatal(err)
	}
	var plain bytes.Buffer
	if err := firmware.WriteKind(&plain, shop.priv, firmware.KindPredictor, "1.0", "rpi4", map[string][]byte{"router.onnx": predictor.Shipped()}, []string{"router.onnx"}); err != nil {
		t.Fatal(err)
	}
	shop.mu.Lock()
	shop.bundles["/router-1.0"] = plain.Bytes()
	shop.mu.Unlock()
	if out, err := update(a, shop.srv.URL+"/router-1.0"); err == nil || !strings.Contains(err.Error(), "candidate 0.333 (2/6 right), installed 1.000 (6/6 right), margin 0.000, set all-local") {
		t.Fatalf("router judged by the fleet's probe set: %q, %v", out, err)
	}
	if a.pred.Current() != before {
		t.Fatal("a router that failed the fleet's probe set serves")
	}
	if _, err := a.applyDesired(context.Background(), fleetwire.DesiredConfig{Version: 2, Values: map[string]string{"probe-set": "{not json"}}); err == nil || !strings.Contains(err.Error(), "probe-set") {
		t.Fatalf("a probe-set that is not JSON was applied: %v", err)
	}

	if out, err := update(a, publish("1.1", otherKey)); err == nil || !strings.Contains(err.Error(), "probe set is invalid") {
		t.Fatalf("probe set signed by another key: %q, %v", out, err)
	}
	if a.pred.Current() != before {
		t.Fatal("a router whose probe set did not verify serves")
	}
	out, err := update(a, publish("1.2", shop.priv))
	if err != nil || !strings.Contains(out, "probe gate passed: candidate 1.000 (6/6 right), installed 0.333 (2/6 right)") {
		t.Fatalf("better router: %q, %v", out, err)
	}
	if running, _ := a.ota.Artifacts(); running[firmware.KindPredictor] != "1.2" || a.pred.Current() == before {
		t.Fatalf("router 1.2 does not serve: %v", running)
	}
	if g := a.ota.ProbeGates()[firmware.KindPredictor]; g.Version != "1.2" || !g.Pass {
		t.Fatalf("status probe gate %+v", g)
	}
}
