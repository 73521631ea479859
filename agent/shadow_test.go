package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet"
	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/models/cloudmodel"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// TestShadowEvaluation turns shadow evaluation on with a fleet-wide config
// layer: the agent samples its share of local answers (and no more), the
// fleet manager re-runs each sample on a real engine with the shipped cloud
// model, grades the local answer against it, and keeps the grade with the
// device's telemetry, where the export carries it. A share above the bound
// is refused by the device.
func TestShadowEvaluation(t *testing.T) {
	b, err := broker.Start(broker.Config{TCPAddr: "127.0.0.1:0", DevAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cm, err := cloudmodel.Open()
	if err != nil {
		t.Fatal(err)
	}
	cloudEng, err := lm.NewEngine(cm, lm.EngineConfig{MaxBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer cloudEng.Close()
	m, err := fleet.Open(fleet.Config{DataDir: t.TempDir(), Broker: b, Shadow: cloudEng})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cfg := testConfig(t)
	cfg.MQTT, cfg.DeviceID = "mqtt://"+b.TCPAddr(), "car-sh"
	a, url := startAgent(t, cfg)
	waitUntil(t, "device online", func() bool { d, err := m.Device("car-sh"); return err == nil && d.State() == "online" })

	ask := func(n int) (ids []string) {
		for range n {
			resp := post(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"what is the capital of France?"}],"max_tokens":4}`)
			resp.Body.Close()
			ids = append(ids, resp.Header.Get("x-request-id"))
		}
		return ids
	}
	// The tap's own counter says which requests it sampled.
	sampled := func() float64 {
		const name = "phaseless_agent_shadow_sampled_total"
		var b bytes.Buffer
		a.metrics.WriteText(&b)
		return metrics.Sums(b.Bytes(), map[string]bool{name: true})[name]
	}
	ask(4) // off by default: nothing is sampled
	if got := sampled(); got != 0 {
		t.Fatalf("%v samples with shadow evaluation off", got)
	}
	s := func(v string) *string { return &v }
	reported := func() *fleetwire.ReportedConfig {
		var r *fleetwire.ReportedConfig
		waitUntil(t, "config reported", func() bool {
			d, _ := m.Device("car-sh")
			r = d.Reported
			return d.Desired != nil && r != nil && r.Version == d.Desired.Version
		})
		return r
	}
	if _, err := m.SetConfigLayer(context.Background(), "fleet", fleet.ConfigUpdate{Merge: true, Values: map[string]*string{"shadow-share": s("0.9")}}); err != nil {
		t.Fatal(err)
	}
	if r := reported(); r.Applied || !strings.Contains(r.Error, "shadow-share") {
		t.Fatalf("share 0.9 not refused: %+v", r)
	}
	if _, err := m.SetConfigLayer(context.Background(), "fleet", fleet.ConfigUpdate{Merge: true, Values: map[string]*string{"shadow-share": s("0.25")}}); err != nil {
		t.Fatal(err)
	}
	if r := reported(); !r.Applied {
		t.Fatalf("share 0.25 refused: %+v", r)
	}
	// Ask until a few requests fell in the share (about one in four does).
	var ids []string
	want := map[string]bool{}
	for len(want) < 3 {
		before := sampled()
		id := ask(1)[0]
		ids = append(ids, id)
		if sampled() > before {
			want[id] = true
		}
	}
	waitUntil(t, "the samples graded", func() bool {
		d, _ := m.Device("car-sh")
		tl := d.Telemetry
		return tl.ShadowPassed+tl.ShadowFailed+tl.ShadowErrors == uint64(len(want))
	})
	var out bytes.Buffer
	if _, err := m.Export(context.Background(), &out, time.Time{}, "car-sh"); err != nil {
		t.Fatal(err)
	}
	var shadows, grades int
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r fleet.ExportedRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		switch r.Kind {
		case fleetwire.KindShadow:
			var sr fleetwire.ShadowRecord
			json.Unmarshal(r.Data, &sr)
			if !want[sr.TraceID] || sr.Answer == "" || sr.Messages[0].Content != "what is the capital of France?" {
				t.Errorf("shadow record %s", r.Data)
			}
			shadows++
		case fleetwire.KindShadowGrade:
			var g fleetwire.ShadowGrade
			json.Unmarshal(r.Data, &g)
			if !want[g.TraceID] || (g.Error == "" && g.Cloud == "") || g.CloudProb == nil || g.Path != "local" {
				t.Errorf("grade %s", r.Data)
			}
			grades++
		}
	}
	if shadows != len(want) || grades != len(want) {
		t.Fatalf("%d shadow records and %d grades exported, want %d of each (%d requests at 25%%)", shadows, grades, len(want), len(ids))
	}
	// The scored grades are the device's calibration outcomes: too few to
	// certify a threshold, so the device keeps the fleet's.
	d, _ := m.Device("car-sh")
	if passed := d.Telemetry.ShadowPassed + d.Telemetry.ShadowFailed; passed > 0 && (d.Router == nil || d.Router.Outcomes != int(passed) || d.Router.Certified) {
		t.Errorf("router calibration after %d graded samples: %+v", passed, d.Router)
	}
	t.Logf("%d of %d local answers sampled and graded", shadows, len(ids))
}
