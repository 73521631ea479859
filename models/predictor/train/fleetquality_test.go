package train

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/models/textfeat"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// TestLoadFleetTelemetryJoinsQuality checks the labels of local answers
// with and without quality signals, the app's verdict winning over a shadow
// grade, and that the held-out and training slices split the requests.
func TestLoadFleetTelemetryJoinsQuality(t *testing.T) {
	var lines []string
	add := func(kind string, v any) {
		data, _ := json.Marshal(v)
		line, _ := json.Marshal(map[string]any{"device_id": "car-1", "kind": kind, "data": json.RawMessage(data)})
		lines = append(lines, string(line))
	}
	feat := textfeat.Extract("check my balance")
	req := func(id, path, outcome string) {
		add(fleetwire.KindRequest, fleetwire.RequestRecord{TraceID: id, Features: feat, FeatureVersion: textfeat.Version, Decision: path, Path: path, Outcome: outcome})
	}
	req("plain", "local", "ok")
	req("bad-app", "local", "ok")
	add(fleetwire.KindFeedback, fleetwire.FeedbackRecord{TraceID: "bad-app", Rating: "bad"})
	req("bad-shadow", "local", "ok")
	add(fleetwire.KindShadowGrade, fleetwire.ShadowGrade{TraceID: "bad-shadow", OK: false})
	req("app-wins", "local", "ok")
	add(fleetwire.KindShadowGrade, fleetwire.ShadowGrade{TraceID: "app-wins", OK: false})
	add(fleetwire.KindFeedback, fleetwire.FeedbackRecord{TraceID: "app-wins", Rating: "good"})
	req("cloud-error", "local", "ok")
	add(fleetwire.KindShadowGrade, fleetwire.ShadowGrade{TraceID: "cloud-error", Error: "unavailable"})
	req("ran-in-cloud", "cloud", "ok")

	ex, st, err := LoadFleetTelemetry(strings.NewReader(strings.Join(lines, "\n")), FleetAll)
	if err != nil {
		t.Fatal(err)
	}
	var labels []float32
	for _, e := range ex {
		labels = append(labels, e.Label)
	}
	// plain 0, bad-app 1, bad-shadow 1, app-wins 0, cloud-error 0 (no
	// verdict: the outcome rule), ran-in-cloud skipped.
	if fmt.Sprint(labels) != "[0 1 1 0 0]" || st.BadLocal != 2 || st.GoodLocal != 1 || st.SkippedUnknown != 1 || st.Feedback != 2 || st.ShadowGrades != 2 {
		t.Fatalf("labels %v, stats %+v", labels, st)
	}

	// The two slices partition the requests, by trace id.
	lines = nil
	for i := range 200 {
		req(fmt.Sprintf("r%d", i), "local", "ok")
	}
	in := strings.Join(lines, "\n")
	tr, _, _ := LoadFleetTelemetry(strings.NewReader(in), FleetTrain)
	ho, _, _ := LoadFleetTelemetry(strings.NewReader(in), FleetHeldOut)
	if len(tr)+len(ho) != 200 || len(ho) < 20 || len(ho) > 60 {
		t.Fatalf("train %d + held out %d of 200 (held-out share %g)", len(tr), len(ho), HeldOutShare)
	}
}

// FuzzLoadFleetTelemetry: an export file is outside bytes; whatever it
// holds, the loader returns an error or examples of the feature width
// with labels 0 or 1, never a panic.
func FuzzLoadFleetTelemetry(f *testing.F) {
	f.Add([]byte(`{"kind":"feedback","data":{"trace_id":"a","rating":"bad"}}`), false)
	f.Add([]byte(`{"kind":"shadow-grade","data":{"trace_id":"a","ok":true}}`+"\n"+`{"trace_id":"a","path":"local","outcome":"ok"}`), true)
	f.Add([]byte(`{"kind":"request","data":{"trace_id":"x","features":[1,2],"feature_version":3}}`), false)
	f.Add([]byte(`{"kind":"feedback","data":{"rating":"meh"}}`), true)
	f.Add([]byte("\n\n{"), false)
	f.Fuzz(func(t *testing.T, in []byte, heldOut bool) {
		part := FleetTrain
		if heldOut {
			part = FleetHeldOut
		}
		ex, _, err := LoadFleetTelemetry(strings.NewReader(string(in)), part)
		if err != nil {
			return
		}
		for _, e := range ex {
			if len(e.Features) != textfeat.Dim || (e.Label != 0 && e.Label != 1) {
				t.Fatalf("example %+v", e)
			}
		}
	})
}
