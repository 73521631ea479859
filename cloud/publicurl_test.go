package cloud

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/cloud/fleetapi"
	"github.com/phaseless/phaseless/firmware"
)

// TestRolloutURLNamesBoundPort: without --public-url, the download URL a
// rollout sends devices is the HTTP listener's bound address, port
// included, when --http asked for any free port (":0").
func TestRolloutURLNamesBoundPort(t *testing.T) {
	c := startCloud(t, func(cfg *Config) { cfg.MQTT, cfg.MQTTTLS, cfg.BuiltinWorkers = "127.0.0.1:0", "", 1 })
	_, key, _ := ed25519.GenerateKey(nil)
	var bundle bytes.Buffer
	if err := firmware.WriteKind(&bundle, key, firmware.KindAgent, "2.1", "rpi4", map[string][]byte{"phaseless-agent": []byte("agent")}, []string{"phaseless-agent"}); err != nil {
		t.Fatal(err)
	}
	api, err := fleetapi.NewClient("http://"+c.HTTPAddr(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	art, err := api.UploadArtifact(context.Background(), &bundle)
	if err != nil {
		t.Fatal(err)
	}
	r, err := api.CreateRollout(context.Background(), fleetapi.RolloutSpec{Artifact: art.ID, Stages: []float64{1}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "http://" + c.HTTPAddr() + "/v1/fleet/artifacts/"; !strings.HasPrefix(r.URL, want) {
		t.Errorf("rollout URL %s, want it under %s", r.URL, want)
	}
}
