package agent

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/agent/route"
	"github.com/phaseless/phaseless/cloud/ctl"
	"github.com/phaseless/phaseless/cloud/fleet"
	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/predictor"
	"github.com/phaseless/phaseless/models/predictor/train"
)

// The class of request the devices' local model fails in the learning-loop
// test: banking questions (CLINC150's banking intents), which the shipped
// edge model, trained for the car, cannot answer (the shipped router sends
// most of them to the cloud already; the loop takes the rest). In-car
// commands are the class it answers.
var (
	bankingIntents = []string{"balance", "transfer", "bill_balance", "pay_bill", "freeze_account", "transactions", "spending_history", "credit_score", "credit_limit", "pin_change", "report_fraud", "interest_rate", "min_payment", "routing", "account_blocked", "bill_due"}
	carIntents     = []string{"play_music", "change_volume", "next_song", "gas", "tire_pressure", "directions", "traffic", "weather", "timer", "text", "make_call", "share_location", "current_location", "distance", "update_playlist", "what_song"}
)

// TestLearningLoop runs the fleet's learning loop end to end: three agents
// on a real broker answer banking and in-car requests locally; the app
// rates its answers (POST /v1/feedback: banking answers bad, car answers
// good); the fleet's telemetry export carries requests and verdicts;
// `phaselessctl model train --telemetry` retrains the router with those
// labels; `model evaluate --cloud` finds it not worse than the router the
// fleet runs (the shipped one: no rollout yet) on the held-out slice, and
// refuses a worse router; `model publish` signs it and starts a staged
// rollout that reaches every agent, whose router then sends held-out
// banking requests to the cloud and keeps car commands on the device. A
// second candidate is then judged against that router, 1.1, fetched from
// the cloud and verified: a worse one is refused, by evaluate and by
// publish.
//
// The shipped router (version 4) already sends 92-99% of these banking
// questions to the cloud, so the loop has little to add on this class and
// the gate may find a tie; the classes it keeps local are those the edge
// corpus covers, and there fleet feedback barely moves the retrained
// router (a work-and-calendar class went 61% -> 66-68%): the familiarity
// features outweigh a few hundred feedback labels. That is the loop's
// limit today (docs/fleet-cloud.md).
func TestLearningLoop(t *testing.T) {
	if raceEnabled {
		t.Skip("trains a router with gorgonia: minutes under -race; make test runs it without")
	}
	dir := t.TempDir()
	pub, _, keyPath, pubPath := writeOTAKeys(t, dir)

	m, b, srv := startFleetCloud(t, pub)

	data, err := train.LoadRouting(filepath.Join("..", ctl.DefaultRoutingData))
	if err != nil {
		t.Fatal(err)
	}
	byIntent := map[string][]string{}
	for _, u := range data.CLINC {
		byIntent[u.Intent] = append(byIntent[u.Intent], u.Text)
	}
	// Each agent asks a different part of each class.
	ids := []string{"car-l1", "car-l2", "car-l3"}
	const perIntent = 2 // per agent: 16 intents × 2 of each class
	agents := map[string]*Agent{}
	urls := map[string]string{}
	for _, id := range ids {
		cfg := testConfig(t)
		cfg.Predictor, cfg.Board, cfg.OTAPub, cfg.OTAOrigins = "", "rpi4", pubPath, cli.StringList{srv.URL}
		cfg.MQTT, cfg.DeviceID = "mqtt://"+b.TCPAddr(), id
		agents[id], urls[id] = startAgent(t, cfg)
	}
	asked := 0
	for i, id := range ids {
		for _, class := range [][]string{bankingIntents, carIntents} {
			bad := class[0] == bankingIntents[0]
			for _, intent := range class {
				for j := range perIntent {
					text := byIntent[intent][(i*perIntent+j)%len(byIntent[intent])]
					body, _ := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "user", "content": text}}, "max_tokens": 2})
					resp := post(t, urls[id]+"/v1/chat/completions", string(body))
					resp.Body.Close()
					if resp.StatusCode != 200 || resp.Header.Get("x-phaseless-route") != "local" {
						t.Fatalf("%s: %d, route %q", text, resp.StatusCode, resp.Header.Get("x-phaseless-route"))
					}
					rating := "good"
					if bad {
						rating = "bad"
					}
					fb := post(t, urls[id]+"/v1/feedback", fmt.Sprintf(`{"request_id":%q,"rating":%q}`, resp.Header.Get("x-request-id"), rating))
					fb.Body.Close()
					if fb.StatusCode != 202 {
						t.Fatalf("feedback: %d", fb.StatusCode)
					}
					asked++
				}
			}
		}
	}
	waitUntil(t, "every request and verdict stored in the cloud", func() bool {
		c, err := m.Counts()
		return err == nil && c.Ingested == uint64(2*asked)
	})
	export := filepath.Join(dir, "fleet.jsonl")
	f, err := os.Create(export)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Export(context.Background(), f, time.Time{}, ""); err != nil {
		t.Fatal(err)
	}
	f.Close()

	run := runCtl
	cand := filepath.Join(dir, "candidate.onnx")
	if out, err := run("model", "train", "--data", filepath.Join("..", ctl.DefaultRoutingData), "--telemetry", export, "--telemetry-weight", "0.5", "--out", cand); err != nil {
		t.Fatalf("model train: %v\n%s", err, out)
	} else if !strings.Contains(out, "relabelled cloud") {
		t.Logf("model train:\n%s", out)
	}
	// Evaluated against the router the fleet runs: no rollout has reached
	// it yet, so that is the shipped one, and the output says so.
	fleetGate := []string{"--telemetry", export, "--cloud", srv.URL, "--ota-pub", pubPath}
	out, err := run(append([]string{"model", "evaluate", "--candidate", cand}, fleetGate...)...)
	if err != nil {
		t.Fatalf("model evaluate refused the retrained router: %v\n%s", err, out)
	}
	if !strings.Contains(out, "comparing with the shipped router") {
		t.Fatalf("before any rollout the fleet's router is not the shipped one:\n%s", out)
	}
	t.Logf("model evaluate:\n%s", out)
	// The gate works the other way too: a worse router is refused. The
	// shipped router may tie the candidate on this slice (it already sends
	// nearly every banking question to the cloud: 1.000 against 1.000 in a
	// CI run), so the worse one is the first router (intent labels), which
	// keeps most of them local.
	shipped := filepath.Join(dir, "shipped.onnx")
	if err := os.WriteFile(shipped, predictor.Shipped(), 0o644); err != nil {
		t.Fatal(err)
	}
	worse := filepath.Join("..", "models", "predictor", "testdata", "predictor-edge-v1.onnx")
	if out, err := run("model", "evaluate", "--candidate", worse, "--current", cand, "--telemetry", export); !errors.Is(err, ctl.ErrWorseRouter) {
		t.Fatalf("the first router passed against the new: %v\n%s", err, out)
	}
	out, err = run("model", "publish", "--model", cand, "--version", "1.1", "--board", "rpi4", "--key", keyPath,
		"--telemetry", export, "--cloud", srv.URL, "--stages", "34%,100%", "--max-failures", "0", "--soak", "0s")
	if err != nil {
		t.Fatalf("model publish: %v\n%s", err, out)
	}
	var rid string
	if _, err := fmt.Sscanf(out[strings.Index(out, "rollout "):], "rollout %s", &rid); err != nil {
		t.Fatalf("no rollout id in %q", out)
	}
	rid = strings.TrimSuffix(rid, ":")
	waitUntil(t, "the rollout reaches the fleet", func() bool {
		r, err := m.Rollout(rid)
		if err == nil && r.State == fleet.RolloutHalted {
			t.Fatalf("rollout halted: %s", r.Reason)
		}
		return err == nil && r.State == fleet.RolloutDone
	})

	// Every agent routes with the new router: held-out banking requests
	// (utterances none of them asked) go to the cloud, car commands stay.
	share := func(p route.Predictor, class []string) float64 {
		r, err := route.NewRouter(route.Config{}, p)
		if err != nil {
			t.Fatal(err)
		}
		n, cloud := 0, 0
		for _, intent := range class {
			for _, text := range byIntent[intent][len(byIntent[intent])-5:] {
				d := r.Decide(&llm.Request{Messages: []llm.Message{{Role: "user", Content: text}}}, route.Link{Configured: true, Connected: true}, route.Load{})
				n++
				if d.Path == route.PathCloud {
					cloud++
				}
			}
		}
		return float64(cloud) / float64(n)
	}
	old, err := predictor.Default()
	if err != nil {
		t.Fatal(err)
	}
	evaluated, err := predictor.Load(cand)
	if err != nil {
		t.Fatal(err)
	}
	oldBank, candBank, candCar := share(old, bankingIntents), share(evaluated, bankingIntents), share(evaluated, carIntents)
	// Which requests fall in the held-out slice changes from run to run,
	// so the retrained router's share of these 80 utterances moves by a
	// few points either side of the shipped one (75-99% against 82-96% over
	// CI and local runs): comparing the two here would test that noise.
	// What must hold is that every agent routes exactly as the router that
	// passed the gate, and that it keeps the failing class mostly in the
	// cloud and car commands on the device (at most the quarter of held-out
	// car commands TestShippedPredictorOnHeldOut allows the shipped one;
	// 10-14% measured).
	if candBank < 0.7 || candCar > 0.25 {
		t.Fatalf("the retrained router sends %.0f%% of banking (the shipped one %.0f%%) and %.0f%% of car requests to the cloud", 100*candBank, 100*oldBank, 100*candCar)
	}
	for id, a := range agents {
		if running, _ := a.ota.Artifacts(); running[firmware.KindPredictor] != "1.1" {
			t.Fatalf("%s runs router %q", id, running[firmware.KindPredictor])
		}
		bank, car := share(a.pred, bankingIntents), share(a.pred, carIntents)
		t.Logf("%s: held-out banking requests to the cloud %.0f%% (shipped router %.0f%%), car commands %.0f%%", id, 100*bank, 100*oldBank, 100*car)
		if bank != candBank || car != candCar {
			t.Fatalf("%s routes unlike the evaluated router: banking %.0f%% (evaluated %.0f%%), car %.0f%% (evaluated %.0f%%)", id, 100*bank, 100*candBank, 100*car, 100*candCar)
		}
	}

	// The next candidate is judged against 1.1, which the fleet now runs
	// (fetched from the cloud and verified), not against the shipped
	// router: the output names it, and a worse candidate is refused, by
	// evaluate and by publish, which then starts no rollout. (That only the
	// fleet's router can refuse a candidate between the shipped router and
	// the fleet's is cloud/ctl's TestEvaluateAgainstFleetRouter, whose
	// routers are built to order; here the margins are a trained router's.)
	waitUntil(t, "every device reports router 1.1", func() bool {
		ds, err := m.Devices()
		n := 0
		for _, d := range ds {
			if d.Status != nil && d.Status.Artifacts[firmware.KindPredictor] == "1.1" {
				n++
			}
		}
		return err == nil && n == len(ids)
	})
	if out, err := run(append([]string{"model", "evaluate", "--candidate", shipped, "--current", "shipped"}, fleetGate...)...); err != nil {
		t.Fatalf("the shipped router lost against itself: %v\n%s", err, out)
	}
	out, err = run(append([]string{"model", "evaluate", "--candidate", worse}, fleetGate...)...)
	if !errors.Is(err, ctl.ErrWorseRouter) || !strings.Contains(out, "fleet's router: 1.1, run by 3 of 3 devices") {
		t.Fatalf("a second candidate was not judged against the fleet's 1.1: %v\n%s", err, out)
	}
	t.Logf("second candidate against the fleet:\n%s", out)
	// publish runs that gate too and starts no rollout.
	out, err = run("model", "publish", "--model", worse, "--version", "1.2", "--board", "rpi4", "--key", keyPath,
		"--telemetry", export, "--cloud", srv.URL, "--stages", "100%", "--soak", "0s")
	if !errors.Is(err, ctl.ErrWorseRouter) || !strings.Contains(out, "fleet's router: 1.1") {
		t.Fatalf("publish of a router worse than the fleet's: %v\n%s", err, out)
	}
	if rs, _ := m.Rollouts(); len(rs) != 1 {
		t.Fatalf("%d rollouts after a refused publish, want 1", len(rs))
	}
}

// writeOTAKeys writes a fresh OTA signing key pair into dir.
func writeOTAKeys(t *testing.T, dir string) (pub ed25519.PublicKey, priv ed25519.PrivateKey, keyPath, pubPath string) {
	t.Helper()
	pub, priv, _ = ed25519.GenerateKey(nil)
	keyPath, pubPath = filepath.Join(dir, "ota-key.pem"), filepath.Join(dir, "ota-pub.pem")
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: firmware.PrivateKeyPEMType, Bytes: priv.Seed()}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: firmware.PublicKeyPEMType, Bytes: pub}), 0o644); err != nil {
		t.Fatal(err)
	}
	return pub, priv, keyPath, pubPath
}

// runCtl runs phaselessctl with args in this process.
func runCtl(args ...string) (string, error) {
	var out bytes.Buffer
	err := ctl.Root().Dispatch(context.Background(), cli.IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }}, args)
	return out.String(), err
}
