package ctl

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet"
	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/cloud/fleetapi/trainset"
	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/models/predictor"
	"github.com/phaseless/phaseless/models/predictor/onnxpb"
	"github.com/phaseless/phaseless/models/textfeat"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// gateTexts are requests whose shipped-router probabilities spread on both
// sides of its threshold, so routers that differ only in threshold route
// some of them differently.
var gateTexts = []string{
	"turn the volume up", "play some jazz", "next song please", "how much gas do I have", "check the tire pressure",
	"navigate to the nearest charging station", "is there traffic on the way home", "set a timer for ten minutes", "call mom", "text John I am late",
	"what is the capital of Australia", "explain the theory of general relativity", "who wrote the Brothers Karamazov", "what is my credit score", "how do I freeze my bank account",
	"summarise the causes of the first world war", "translate good morning into Japanese", "what's the interest rate on my savings", "write a poem about autumn rain", "what is 17 times 23",
	"open the window", "turn on the air conditioning", "what song is this", "share my location with Maria", "how far is Berlin",
	"describe how photosynthesis works in detail", "which element has the symbol Fe", "give me a recipe for lasagna", "what are the symptoms of diabetes", "compare python and go for web servers",
}

// TestEvaluateAgainstFleetRouter checks that model evaluate and model
// publish, given a cloud, judge a candidate against the router most
// devices in scope run, fetched from the cloud and verified, not against
// the shipped one. Three routers share the shipped network and differ in
// threshold only, and the held-out fleet slice is labelled so that their
// order is known exactly: the fleet's 1.1 is best, the candidate second,
// the shipped router last. So the candidate passes against the shipped
// router and is refused against the fleet's.
func TestEvaluateAgainstFleetRouter(t *testing.T) {
	dir := t.TempDir()
	pub, priv, _ := ed25519.GenerateKey(nil)
	keyPath, pubPath := filepath.Join(dir, "ota-key.pem"), filepath.Join(dir, "ota-pub.pem")
	os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: firmware.PrivateKeyPEMType, Bytes: priv.Seed()}), 0o600)
	os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: firmware.PublicKeyPEMType, Bytes: pub}), 0o644)

	shipped, err := predictor.Default()
	if err != nil {
		t.Fatal(err)
	}
	t0, _ := shipped.Threshold()
	feats := make([][]float32, len(gateTexts))
	var above []float64 // probabilities at or above the shipped threshold
	ps := make([]float64, len(gateTexts))
	for i, s := range gateTexts {
		feats[i] = textfeat.Extract(s)
		if ps[i], err = shipped.Predict(feats[i]); err != nil {
			t.Fatal(err)
		}
		if ps[i] >= t0 {
			above = append(above, ps[i])
		}
	}
	slices.Sort(above)
	if len(above) < 8 {
		t.Fatalf("only %d requests above the shipped threshold %g: %v", len(above), t0, above)
	}
	// The candidate sends [t2, 1] to the cloud, the fleet's router [t1, 1];
	// the requests at or above t1 are the ones the cloud must answer.
	t2, t1 := (above[1]+above[2])/2, (above[4]+above[5])/2
	withThreshold := func(name string, th float64) string {
		pb, err := onnxpb.Unmarshal(predictor.Shipped())
		if err != nil {
			t.Fatal(err)
		}
		pb.Metadata = []onnxpb.Property{{Key: predictor.MetaThreshold, Value: strconv.FormatFloat(th, 'g', -1, 64)}}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, onnxpb.Marshal(pb), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	candidate, fleetRouter := withThreshold("candidate.onnx", t2), withThreshold("fleet-1.1.onnx", t1)

	// The held-out slice: each request answered locally and rated by the
	// app, bad where the cloud must answer.
	var lines []string
	add := func(kind string, v any) {
		data, _ := json.Marshal(v)
		line, _ := json.Marshal(map[string]any{"device_id": "car-1", "kind": kind, "data": json.RawMessage(data)})
		lines = append(lines, string(line))
	}
	for i, n := 0, 0; n < 3*len(gateTexts); i++ {
		id := fmt.Sprintf("req-%d", i)
		if !trainset.InHeldOut(id) {
			continue
		}
		k := n % len(gateTexts)
		n++
		add(fleetwire.KindRequest, fleetwire.RequestRecord{TraceID: id, Features: feats[k], FeatureVersion: textfeat.Version, Decision: "local", Path: "local", Outcome: "ok"})
		add(fleetwire.KindFeedback, fleetwire.FeedbackRecord{TraceID: id, Rating: map[bool]string{true: "bad", false: "good"}[ps[k] >= t1]})
	}
	export := filepath.Join(dir, "fleet.jsonl")
	if err := os.WriteFile(export, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}

	// A cloud whose devices run: 1.1 on two rpi4s, 1.0 on one, none on
	// another (the router it started with); in region eu, a 0.9 whose
	// bundle another key signed (the cloud has no --ota-pub to refuse it);
	// in region us, a 3.0 the cloud holds no bundle of.
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	defer srv.Close()
	b, m := startFleet(t, fleet.Config{PublicURL: srv.URL})
	mux.Handle(fleet.APIPrefix, m.Handler())
	mux.Handle("GET "+fleet.ArtifactPrefix, m.ArtifactHandler())
	_, otherKey, _ := ed25519.GenerateKey(nil)
	store := func(key ed25519.PrivateKey, version, onnxPath string) {
		onnx, err := os.ReadFile(onnxPath)
		if err != nil {
			t.Fatal(err)
		}
		var bundle bytes.Buffer
		if err := firmware.WriteKind(&bundle, key, firmware.KindPredictor, version, "rpi4", map[string][]byte{"predictor.onnx": onnx}, []string{"predictor.onnx"}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.PutArtifact(&bundle); err != nil {
			t.Fatal(err)
		}
	}
	store(priv, "1.1", fleetRouter)
	store(priv, "1.0", candidate)
	store(otherKey, "0.9", fleetRouter)
	reportRouters(t, b, m, map[string]string{"car-1": "1.1", "car-2": "1.1", "car-3": "1.0", "car-4": "", "car-eu": "0.9", "car-us": "3.0"})
	eu := "eu"
	if _, err := m.SetLabels("car-eu", map[string]*string{"region": &eu}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.SetLabels("car-4", map[string]*string{"cohort": &eu}); err != nil {
		t.Fatal(err)
	}
	us := "us"
	if _, err := m.SetLabels("car-us", map[string]*string{"region": &us}); err != nil {
		t.Fatal(err)
	}

	eval := func(args ...string) (string, error) {
		return runCtl(t, append([]string{"model", "evaluate", "--candidate", candidate, "--telemetry", export}, args...)...)
	}
	// Against the shipped router (explicitly, or with no cloud) the
	// candidate is better.
	for _, args := range [][]string{{"--current", "shipped", "--cloud", srv.URL}, nil} {
		if out, err := eval(args...); err != nil || !strings.Contains(out, "fleet's shipped") {
			t.Fatalf("evaluate %v against the shipped router: %v\n%s", args, err, out)
		}
	}
	// The flags that choose the fleet's router mean nothing without it.
	for _, args := range [][]string{{"--select", "region=eu"}, {"--ota-pub", pubPath}, {"--api-key", "sk-1"}} {
		if out, err := eval(args...); err == nil || !strings.Contains(err.Error(), "needs --cloud") {
			t.Fatalf("evaluate %v without --cloud: %v\n%s", args, err, out)
		}
	}
	// With the cloud it is judged against 1.1, which most devices run.
	out, err := eval("--cloud", srv.URL, "--ota-pub", pubPath)
	if !errors.Is(err, ErrWorseRouter) || !strings.Contains(out, "fleet's router: 1.1, run by 2 of 6 devices (scope: every device;") {
		t.Fatalf("evaluate against the fleet: %v\n%s", err, out)
	}
	t.Logf("evaluate against the fleet:\n%s", out)
	// And against the fleet's router file itself, the same verdict.
	if _, err := eval("--current", fleetRouter); !errors.Is(err, ErrWorseRouter) {
		t.Fatalf("evaluate against the fleet's file: %v", err)
	}
	// The fleet's bundle must verify before it is used.
	if out, err := eval("--cloud", srv.URL); err == nil || !strings.Contains(err.Error(), "ota-pub") {
		t.Fatalf("evaluate without the OTA key: %v\n%s", err, out)
	}
	if out, err := eval("--cloud", srv.URL, "--ota-pub", pubPath, "--select", "region=eu"); err == nil || !strings.Contains(err.Error(), "signature") {
		t.Fatalf("a router bundle signed by another key was used: %v\n%s", err, out)
	}
	// A version the cloud holds no bundle of cannot be compared with.
	if out, err := eval("--cloud", srv.URL, "--ota-pub", pubPath, "--select", "region=us"); err == nil || !strings.Contains(err.Error(), "holds no bundle") {
		t.Fatalf("evaluate against a router the cloud has no bundle of: %v\n%s", err, out)
	}
	// A scope whose devices report no rolled-out router runs the shipped one.
	if out, err := eval("--cloud", srv.URL, "--ota-pub", pubPath, "--select", "cohort=eu"); err != nil || !strings.Contains(out, "comparing with the shipped router") {
		t.Fatalf("evaluate in a scope without a rolled-out router: %v\n%s", err, out)
	}

	// model publish runs the same gate against the fleet's router (the
	// devices of its board), verified with the signing key's public half,
	// and starts no rollout when it fails.
	out, err = runCtl(t, "model", "publish", "--model", candidate, "--version", "1.2", "--board", "rpi4", "--key", keyPath,
		"--telemetry", export, "--cloud", srv.URL, "--stages", "100%", "--soak", "0s")
	if !errors.Is(err, ErrWorseRouter) || !strings.Contains(out, "fleet's router: 1.1, run by 2 of 6 devices (scope: board=rpi4;") {
		t.Fatalf("publish of a router worse than the fleet's: %v\n%s", err, out)
	}
	if rs, _ := m.Rollouts(); len(rs) != 0 {
		t.Fatalf("a refused router was rolled out: %+v", rs[0])
	}
	// The fleet's router itself passes (a tie) and rolls out.
	out, err = runCtl(t, "model", "publish", "--model", fleetRouter, "--version", "1.2", "--board", "rpi4", "--key", keyPath,
		"--telemetry", export, "--cloud", srv.URL, "--stages", "100%", "--soak", "0s")
	if err != nil || !strings.Contains(out, "rollout ") {
		t.Fatalf("publish of a router as good as the fleet's: %v\n%s", err, out)
	}
}

// TestRunningArtifactAPI checks the count behind the gate: devices by the
// version they report, the majority (ties to the newer version), and the
// bundle named for it.
func TestRunningArtifactAPI(t *testing.T) {
	b, m := startFleet(t, fleet.Config{})
	_, priv, _ := ed25519.GenerateKey(nil)
	var ids = map[string]string{}
	for _, v := range []string{"1.1", "1.2"} {
		var bundle bytes.Buffer
		if err := firmware.WriteKind(&bundle, priv, firmware.KindPredictor, v, "rpi4", map[string][]byte{"predictor.onnx": predictor.Shipped()}, []string{"predictor.onnx"}); err != nil {
			t.Fatal(err)
		}
		info, err := m.PutArtifact(&bundle)
		if err != nil {
			t.Fatal(err)
		}
		ids[v] = info.ID
	}
	reportRouters(t, b, m, map[string]string{"a": "1.1", "b": "1.2", "c": "", "d": "1.1", "e": "1.2"})
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	get := func(q string) fleet.RunningArtifact {
		resp, err := http.Get(srv.URL + "/v1/fleet/running/" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var ra fleet.RunningArtifact
		if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&ra) != nil {
			t.Fatalf("%s: %s", q, resp.Status)
		}
		return ra
	}
	// Two each of 1.1 and 1.2: the newer wins the tie.
	ra := get("predictor")
	if ra.Devices != 5 || ra.Versions["1.1"] != 2 || ra.Versions[""] != 1 || ra.Version != "1.2" || ra.Artifact == nil || ra.Artifact.ID != ids["1.2"] {
		t.Fatalf("running: %+v", ra)
	}
	// A selector narrows the count (version selects by the reported one).
	if ra := get("predictor?select=version=1.1"); ra.Devices != 2 || ra.Version != "1.1" || ra.Artifact.ID != ids["1.1"] {
		t.Fatalf("running, version=1.1: %+v", ra)
	}
	if ra := get("predictor?select=board=rk3588"); ra.Devices != 0 || ra.Version != "" || ra.Artifact != nil {
		t.Fatalf("running, another board: %+v", ra)
	}
	// Nobody runs a fleet-installed edge model: the version is "".
	if ra := get("model"); ra.Devices != 5 || ra.Version != "" || ra.Versions[""] != 5 {
		t.Fatalf("running models: %+v", ra)
	}
	if resp, _ := http.Get(srv.URL + "/v1/fleet/running/firmware"); resp.StatusCode != 400 {
		t.Fatalf("unknown kind: %s", resp.Status)
	}
}

// startFleet runs a fleet Manager on an embedded broker for the test.
func startFleet(t *testing.T, cfg fleet.Config) (*broker.Broker, *fleet.Manager) {
	t.Helper()
	b, err := broker.Start(broker.Config{TCPAddr: "127.0.0.1:0", DevAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	cfg.DataDir, cfg.Broker = t.TempDir(), b
	m, err := fleet.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return b, m
}

// reportRouters publishes each device's retained status, on board rpi4,
// running the given router version ("" for none), and waits until the
// Manager has them all.
func reportRouters(t *testing.T, b *broker.Broker, m *fleet.Manager, versions map[string]string) {
	t.Helper()
	tp := fleetwire.Topics{}
	for id, v := range versions {
		st := fleetwire.Status{DeviceID: id, State: "online", Version: "2.0.0", Board: "rpi4", Time: time.Now()}
		if v != "" {
			st.Artifacts = map[string]string{firmware.KindPredictor: v}
		}
		payload, _ := json.Marshal(st)
		if err := b.Publish(tp.Device(id, fleetwire.SuffixStatus), payload, true); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if ds, _ := m.Devices(); len(ds) == len(versions) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("device statuses not registered")
		}
	}
}
