package docscheck

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/models/predictor"
)

// step is one command of the operator's walkthrough (docs/operator.md),
// and, for a command the operator repeats until it shows something, what
// its output must show.
type step struct {
	cmd   string
	until func(out string) bool
}

// walkthrough is docs/operator.md's commands, in order: TestDocsWalkthrough
// requires the doc's blocks marked <!-- docscheck: walkthrough --> to hold
// exactly these, and TestOperatorWalkthrough runs them.
var walkthrough = []step{
	{cmd: "phaselessctl pki init --dir pki"},
	{cmd: "phaselessctl pki device --dir pki --id car-1"},
	{cmd: "phaselessctl pki device --dir pki --id car-2"},
	{cmd: "phaselessctl ota keygen --dir ."},
	{cmd: `echo "sk-ops-walkthrough-01 ops role=operator" > api-keys`},
	{cmd: `phaseless-cloud --pki-dir pki --api-keys api-keys --ota-pub ota-pub.pem --data-dir cloud-data --http 127.0.0.1:8080 --quic 127.0.0.1:4433 --mqtt 127.0.0.1:1883 --mqtt-tls 127.0.0.1:8883 &`},
	{cmd: "phaseless-agent --device-id car-1 --pki-dir pki --cloud 127.0.0.1:4433 --mqtt tls://127.0.0.1:8883 --ota-pub ota-pub.pem --ota-origin http://127.0.0.1:8080 --listen 127.0.0.1:7070 --data-dir car-1 &"},
	{cmd: "phaseless-agent --device-id car-2 --pki-dir pki --cloud 127.0.0.1:4433 --mqtt tls://127.0.0.1:8883 --ota-pub ota-pub.pem --ota-origin http://127.0.0.1:8080 --listen 127.0.0.1:7071 --data-dir car-2 &"},
	{cmd: "export PHASELESS_CLOUD=http://127.0.0.1:8080"},
	{cmd: "export PHASELESS_API_KEY=sk-ops-walkthrough-01"},
	{cmd: "phaselessctl fleet devices", until: func(out string) bool { return strings.Count(out, " online ") == 2 }},
	{cmd: "phaselessctl ota sign --kind predictor --version 1.1 --key ota-key.pem --out router-1.1.plota router.onnx"},
	{cmd: "phaselessctl ota verify --pub ota-pub.pem router-1.1.plota"},
	{cmd: "phaselessctl fleet rollout create --artifact router-1.1.plota --stages 50%,100% --soak 2s"},
	{cmd: "phaselessctl fleet rollout list", until: func(out string) bool { return strings.Contains(out, " done ") }},
	{cmd: "phaselessctl fleet status car-1 --json", until: func(out string) bool { return strings.Contains(out, `"predictor": "1.1"`) }},
	{cmd: "phaselessctl fleet status car-2 --json", until: func(out string) bool { return strings.Contains(out, `"predictor": "1.1"`) }},
}

// TestOperatorWalkthrough runs docs/operator.md on loopback: a PKI, a cloud
// with API keys and the fleet's OTA key, two agents over QUIC and MQTT
// (TLS, device certificates), a signed router bundle and a staged rollout
// of it to both cars, to its end.
func TestOperatorWalkthrough(t *testing.T) {
	if raceEnabled {
		t.Skip("a cloud and two agents through a staged rollout: tens of seconds under -race; make test runs it without (RACE_FULL)")
	}
	r := newRunner(t)
	// The router the operator signs: a model train's output; here the
	// shipped model's bytes, so the test does not spend minutes training.
	if err := os.WriteFile("router.onnx", predictor.Shipped(), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, s := range walkthrough {
		deadline := time.Now().Add(60 * time.Second)
		for {
			out, err := r.run(ctx, s.cmd)
			if err != nil {
				t.Fatalf("%s: %v\n%s", s.cmd, err, out)
			}
			if s.until == nil || s.until(out) {
				t.Logf("$ %s\n%s", s.cmd, out)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never showed what the walkthrough waits for:\n%s", s.cmd, out)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
}

// TestDocsWalkthrough: docs/operator.md's walkthrough blocks hold the
// commands TestOperatorWalkthrough runs, in order, and nothing else.
func TestDocsWalkthrough(t *testing.T) {
	docs, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	var doc []string
	for _, d := range docs {
		for _, b := range d.Blocks() {
			if b.Marker == "walkthrough" {
				doc = append(doc, b.Commands()...)
			}
		}
	}
	var test []string
	for _, s := range walkthrough {
		test = append(test, s.cmd)
	}
	if !slices.Equal(doc, test) {
		t.Errorf("the walkthrough's commands in the docs:\n  %s\nthe commands TestOperatorWalkthrough runs:\n  %s",
			strings.Join(doc, "\n  "), strings.Join(test, "\n  "))
	}
}
