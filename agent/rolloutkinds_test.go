package agent

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet"
	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/predictor"
)

// TestRouterRolloutReachesFleet rolls a router-model bundle out in stages
// to three real agents through a real fleet manager and broker: every
// agent swaps it in without a restart and the rollout completes; then a
// broken router halts its rollout at the first stage, the device that got
// it reports it rolled back and keeps serving the previous one, and the
// rest are not sent it. Last, an edge-model bundle reaches all three.
func TestRouterRolloutReachesFleet(t *testing.T) {
	shop := newBundleShop(t)
	m, b, srv := startFleetCloud(t, shop.pub)

	ids := []string{"car-r1", "car-r2", "car-r3"}
	agents := map[string]*Agent{}
	for _, id := range ids {
		cfg := testConfig(t)
		cfg.Predictor, cfg.Board, cfg.OTAPub, cfg.OTAOrigins = "", "rpi4", shop.pubPath, cli.StringList{srv.URL}
		cfg.MQTT, cfg.DeviceID = "mqtt://"+b.TCPAddr(), id
		agents[id], _ = startAgent(t, cfg)
	}
	for _, id := range ids {
		waitUntil(t, id+" online", func() bool { d, err := m.Device(id); return err == nil && d.State() == "online" })
	}
	rolloutKind := func(kind, version, file string, payload []byte) *fleet.Rollout {
		t.Helper()
		var bb bytes.Buffer
		if err := firmware.WriteKind(&bb, shop.priv, kind, version, "rpi4", map[string][]byte{file: payload}, []string{file}); err != nil {
			t.Fatal(err)
		}
		art, err := m.PutArtifact(&bb)
		if err != nil {
			t.Fatal(err)
		}
		r, err := m.CreateRollout(context.Background(), fleet.RolloutSpec{Artifact: art.ID, Stages: []float64{0.3, 1}, MaxFailures: new(0.0), UpdateTimeout: fleet.Duration(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		if r.Kind != kind {
			t.Fatalf("rollout kind %q", r.Kind)
		}
		var cur *fleet.Rollout
		waitUntil(t, "rollout "+version+" settles", func() bool {
			cur, _ = m.Rollout(r.ID)
			return cur.State == fleet.RolloutDone || cur.State == fleet.RolloutHalted
		})
		return cur
	}
	rollout := func(version string, onnx []byte) *fleet.Rollout {
		return rolloutKind(firmware.KindPredictor, version, "router.onnx", onnx)
	}
	before := map[string]predictor.Predictor{}
	for id, a := range agents {
		before[id] = a.pred.Current()
	}
	if r := rollout("1.1", predictor.Shipped()); r.State != fleet.RolloutDone || r.Progress().Succeeded != 3 {
		t.Fatalf("router 1.1 rollout %s (%s): %+v", r.State, r.Reason, r.Progress())
	}
	for id, a := range agents {
		if running, _ := a.ota.Artifacts(); a.pred.Current() == before[id] || running[firmware.KindPredictor] != "1.1" {
			t.Fatalf("%s does not serve router 1.1", id)
		}
	}

	r := rollout("1.2", []byte("not a model"))
	if r.State != fleet.RolloutHalted {
		t.Fatalf("broken router rollout %s: %+v", r.State, r.Progress())
	}
	if p := r.Progress(); p.Failed != 1 || len(r.Devices) != 1 {
		t.Fatalf("broken router reached %d devices, %d failed; want the first stage's one", len(r.Devices), p.Failed)
	}
	for id, rd := range r.Devices {
		if !strings.Contains(rd.Error, "health check") {
			t.Errorf("%s failed with %q, want the health check's refusal", id, rd.Error)
		}
		waitUntil(t, id+" reports the rollback", func() bool {
			d, _ := m.Device(id)
			return d.Status.RolledBack[firmware.KindPredictor] == "1.2"
		})
	}
	for id, a := range agents {
		if running, _ := a.ota.Artifacts(); running[firmware.KindPredictor] != "1.1" {
			t.Fatalf("%s serves router %q after the halted rollout, want 1.1", id, running[firmware.KindPredictor])
		}
	}

	// The edge language model takes the same path.
	if r := rolloutKind(firmware.KindModel, "2.0", "edge.gguf", tinyGGUF(t, 3)); r.State != fleet.RolloutDone || r.Progress().Succeeded != 3 {
		t.Fatalf("edge model rollout %s (%s): %+v", r.State, r.Reason, r.Progress())
	}
	for id, a := range agents {
		running, _ := a.ota.Artifacts()
		if _, probe := a.engine.swap.Current(); running[firmware.KindModel] != "2.0" || probe != nil {
			t.Fatalf("%s runs edge model %q", id, running[firmware.KindModel])
		}
		if _, err := a.engine.gen.Generate(context.Background(), &llm.Request{ID: "after", MaxTokens: 2, Messages: []llm.Message{{Role: "user", Content: "hello"}}}, func(llm.Token) error { return nil }); err != nil {
			t.Fatalf("%s: the new edge model does not answer: %v", id, err)
		}
	}
}

// startFleetCloud runs what a cloud runs for the fleet: an embedded broker,
// a fleet manager trusting pub, and its admin API and artifact downloads
// on an HTTP server, all until the test ends.
func startFleetCloud(t *testing.T, pub ed25519.PublicKey) (*fleet.Manager, *broker.Broker, *httptest.Server) {
	t.Helper()
	return startFleetCloudWith(t, fleet.Config{OTAPub: pub})
}

// startFleetCloudWith is startFleetCloud with cfg's other settings (a
// shadow grader, a broker): the data directory, public URL and rollout
// interval are filled in, and a broker on loopback TCP with development
// authentication when cfg has none.
func startFleetCloudWith(t *testing.T, cfg fleet.Config) (*fleet.Manager, *broker.Broker, *httptest.Server) {
	t.Helper()
	b := cfg.Broker
	if b == nil {
		var err error
		if b, err = broker.Start(broker.Config{TCPAddr: "127.0.0.1:0", DevAuth: true}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
	}
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	cfg.DataDir, cfg.Broker, cfg.PublicURL, cfg.RolloutInterval = t.TempDir(), b, srv.URL, 100*time.Millisecond
	m, err := fleet.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	mux.Handle(fleet.APIPrefix, m.Handler())
	mux.Handle("GET "+fleet.ArtifactPrefix, m.ArtifactHandler())
	return m, b, srv
}
