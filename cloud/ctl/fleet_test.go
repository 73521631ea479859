package ctl

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/phaseless/phaseless/cloud/fleet"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// TestFleetCommands runs the fleet verbs against a real Manager behind an
// HTTP server (with an API-key check like the cloud's), an embedded broker,
// and a device on a real MQTT client that answers commands.
func TestFleetCommands(t *testing.T) {
	b, m := startFleet(t, fleet.Config{})
	mux := http.NewServeMux()
	api := m.Handler()
	mux.Handle(fleet.APIPrefix, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k1" {
			http.Error(w, `{"error":{"message":"bad api key"}}`, http.StatusUnauthorized)
			return
		}
		api.ServeHTTP(w, r)
	}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	tp := fleetwire.Topics{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	u, _ := url.Parse("mqtt://" + b.TCPAddr())
	up := make(chan *autopaho.ConnectionManager, 1)
	// The device runs agent bundle 2.1 (installed by a rollout; the build
	// stamp says 1.2.3) and router 1.1.
	online, _ := json.Marshal(fleetwire.Status{State: "online", Version: "1.2.3", Slot: "b", Time: time.Now(),
		Artifacts: map[string]string{"agent": "2.1", "predictor": "1.1"}})
	cm, err := autopaho.NewConnection(ctx, autopaho.ClientConfig{
		ServerUrls: []*url.URL{u}, KeepAlive: 30, SessionExpiryInterval: 60,
		OnConnectionUp: func(cm *autopaho.ConnectionManager, _ *paho.Connack) { up <- cm },
		ClientConfig: paho.ClientConfig{ClientID: "car-9", OnPublishReceived: []func(paho.PublishReceived) (bool, error){
			func(pr paho.PublishReceived) (bool, error) {
				var c fleetwire.Command
				if json.Unmarshal(pr.Packet.Payload, &c) == nil && c.ID != "" {
					res, _ := json.Marshal(fleetwire.CommandResult{ID: c.ID, OK: c.Name != "explode", Output: "did " + c.Name + " " + c.Args["file"], Error: map[bool]string{true: "boom"}[c.Name == "explode"]})
					go pr.Client.Publish(ctx, &paho.Publish{QoS: 1, Topic: tp.Device("car-9", fleetwire.SuffixCmdResult), Payload: res})
				}
				return true, nil
			}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cm.Disconnect(context.Background()); <-cm.Done() }()
	<-up
	if _, err := cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: tp.Device("car-9", fleetwire.SuffixCmd), QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	batch, _ := json.Marshal(fleetwire.TelemetryBatch{DeviceID: "car-9", BatchID: "b1", Records: []fleetwire.Record{
		{Seq: 1, Kind: "request", Data: json.RawMessage(`{"trace_id":"a","decision":"local"}`)},
		{Seq: 2, Kind: "request", Data: json.RawMessage(`{"trace_id":"b","decision":"cloud"}`)},
	}})
	for _, p := range []*paho.Publish{
		{QoS: 1, Retain: true, Topic: tp.Device("car-9", fleetwire.SuffixStatus), Payload: online},
		{QoS: 1, Topic: tp.Device("car-9", fleetwire.SuffixTelemetry), Payload: batch},
	} {
		if _, err := cm.Publish(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, _ := m.Counts(); c.Stored == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("telemetry not stored")
		}
	}

	env := map[string]string{"PHASELESS_CLOUD": srv.URL, "PHASELESS_API_KEY": "k1"}
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		cio := cli.IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out, Getenv: func(k string) string { return env[k] }}
		err := Root().Dispatch(context.Background(), cio, args)
		return out.String(), err
	}
	must := func(want string, args ...string) string {
		t.Helper()
		out, err := run(args...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		if !strings.Contains(out, want) {
			t.Fatalf("%v: output lacks %q:\n%s", args, want, out)
		}
		return out
	}

	out := must("car-9", "fleet", "devices")
	for _, w := range []string{"online", " 2.1 ", "predictor 1.1", " b ", "-/-"} {
		if !strings.Contains(out, w) {
			t.Errorf("devices output lacks %q:\n%s", w, out)
		}
	}
	out = must("version:    2.1\nartifacts:  predictor 1.1\n", "fleet", "status", "car-9")
	if strings.Contains(out, "1.2.3") {
		t.Errorf("status shows the build stamp, not the installed agent:\n%s", out)
	}
	must("desired config version 1", "fleet", "config", "set", "car-9", "route=local", "max_tokens=128")
	must("desired config version 2", "fleet", "config", "unset", "car-9", "max_tokens")
	// A config the device could not apply: the devices table cuts its long
	// error to one short column; fleet status prints all of it.
	long := "route-threshold: " + strings.Repeat("a long reason the device gave ", 12) + "END"
	reported, _ := json.Marshal(fleetwire.ReportedConfig{Version: 2, Error: long})
	if _, err := cm.Publish(ctx, &paho.Publish{QoS: 1, Retain: true, Topic: tp.Device("car-9", fleetwire.SuffixConfigReported), Payload: reported}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if d, _ := m.Device("car-9"); d != nil && d.Reported != nil && d.Reported.Version == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("reported config not stored")
		}
	}
	out = must("2/2 (not applied: route-threshold: a long reason the devi…)", "fleet", "devices")
	for line := range strings.Lines(out) {
		if n := utf8.RuneCountInString(line); n > 160 {
			t.Errorf("a devices row of %d characters:\n%s", n, out)
		}
	}
	must(long+")", "fleet", "status", "car-9")
	out = must("route=local", "fleet", "status", "car-9")
	if strings.Contains(out, "max_tokens") {
		t.Errorf("unset key still shown:\n%s", out)
	}
	// Layers: fleet defaults and a label group under the device's override.
	must("fleet: layer version 1", "fleet", "config", "set", "--fleet", "route=cloud", "log-level=warn")
	must("car-9: labels region=eu\n", "fleet", "label", "car-9", "region=eu")
	must("car-9: labels cohort=beta region=eu\n", "fleet", "label", "car-9", "cohort=beta")
	must("car-9: labels region=eu\n", "fleet", "label", "car-9", "cohort=")
	must("region=eu: layer version 1", "fleet", "config", "set", "--group", "region=eu", "log-level=debug")
	out = must("log-level=debug (from region=eu)", "fleet", "status", "car-9")
	if !strings.Contains(out, "route=local (from device)") {
		t.Errorf("the device override does not win:\n%s", out)
	}
	out = must("region=eu", "fleet", "config", "show")
	if strings.Index(out, "fleet ") > strings.Index(out, "region=eu") {
		t.Errorf("layers not in precedence order:\n%s", out)
	}
	must("log-level  debug  region=eu", "fleet", "config", "show", "car-9")
	must("region=eu: layer version 2", "fleet", "config", "unset", "--group", "region=eu", "log-level")
	must("log-level=warn (from fleet)", "fleet", "status", "car-9")
	must("shadow:     off", "fleet", "status", "car-9")
	must("fleet: layer version 2", "fleet", "config", "set", "--fleet", "shadow-share=0.05")
	must("shadow:     5% of local answers (shadow-share from fleet, at most 25%); 0 graded", "fleet", "status", "car-9")
	if _, err := run("fleet", "config", "set", "--group", "version=1", "a=b"); err == nil {
		t.Error("a version group was accepted")
	}
	must("2 stored, 2 ingested, 0 duplicates", "fleet", "telemetry", "count")
	must("car-9: 2 stored", "fleet", "telemetry", "count", "--device", "car-9")
	must("done did reload-model p.onnx", "fleet", "cmd", "car-9", "reload-model", "file=p.onnx", "--wait", "20s")
	if out, err := run("fleet", "cmd", "car-9", "explode", "--wait", "20s"); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("failing command: %v\n%s", err, out)
	}

	out = must(`"seq":2`, "fleet", "telemetry", "export", "--device", "car-9")
	lines := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var r fleet.ExportedRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || r.DeviceID != "car-9" {
			t.Fatalf("export line %q: %v", sc.Text(), err)
		}
		var rr fleetwire.RequestRecord
		if err := json.Unmarshal(r.Data, &rr); err != nil || rr.TraceID == "" {
			t.Fatalf("export data %s: %v", r.Data, err)
		}
		lines++
	}
	if lines != 2 {
		t.Fatalf("export: %d lines", lines)
	}
	file := filepath.Join(t.TempDir(), "t.jsonl")
	must("wrote", "fleet", "telemetry", "export", "-o", file)

	// Errors: unknown device, bad key, bad arguments, no cloud.
	if _, err := run("fleet", "status", "nope"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("unknown device: %v", err)
	}
	env["PHASELESS_API_KEY"] = "wrong"
	if _, err := run("fleet", "devices"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("bad key: %v", err)
	}
	if _, err := run("fleet", "devices", "--api-key", "k1"); err != nil {
		t.Errorf("--api-key overrides the environment: %v", err)
	}
	for _, bad := range [][]string{{"fleet", "status"}, {"fleet", "config", "set", "car-9", "novalue"}, {"fleet", "cmd", "car-9"}, {"fleet", "devices", "extra"}} {
		if _, err := run(bad...); err == nil {
			t.Errorf("%v succeeded", bad)
		}
	}
	if _, err := run("fleet", "devices", "--cloud", "http://127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "reach the cloud") {
		t.Errorf("no cloud: %v", err)
	}
}
