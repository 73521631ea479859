package trainset

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/models/textfeat"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// TestLoadJoinsQuality checks the labels of local answers
// with and without quality signals, the app's verdict winning over a shadow
// grade, and that the held-out and training slices split the requests.
func TestLoadJoinsQuality(t *testing.T) {
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

	ex, st, err := Load(strings.NewReader(strings.Join(lines, "\n")), All)
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
	tr, _, _ := Load(strings.NewReader(in), Train)
	ho, _, _ := Load(strings.NewReader(in), HeldOut)
	if len(tr)+len(ho) != 200 || len(ho) < 20 || len(ho) > 60 {
		t.Fatalf("train %d + held out %d of 200 (held-out share %g)", len(tr), len(ho), HeldOutShare)
	}
}

// FuzzLoad: an export file is outside bytes; whatever it
// holds, the loader returns an error or examples of the feature width
// with labels 0 or 1, never a panic.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(`{"kind":"feedback","data":{"trace_id":"a","rating":"bad"}}`), false)
	f.Add([]byte(`{"kind":"shadow-grade","data":{"trace_id":"a","ok":true}}`+"\n"+`{"trace_id":"a","path":"local","outcome":"ok"}`), true)
	f.Add([]byte(`{"kind":"request","data":{"trace_id":"x","features":[1,2],"feature_version":3}}`), false)
	f.Add([]byte(`{"kind":"feedback","data":{"rating":"meh"}}`), true)
	f.Add([]byte("\n\n{"), false)
	f.Fuzz(func(t *testing.T, in []byte, heldOut bool) {
		part := Train
		if heldOut {
			part = HeldOut
		}
		ex, _, err := Load(strings.NewReader(string(in)), part)
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

func record(path, decision, outcome string, version int) string {
	r := fleetwire.RequestRecord{TraceID: "t", Features: textfeat.Extract("open the sunroof"), FeatureVersion: version,
		Decision: decision, Path: path, Outcome: outcome}
	b, _ := json.Marshal(r)
	return string(b)
}

func TestLoadRequestsLabels(t *testing.T) {
	wrapped, _ := json.Marshal(fleetwire.Record{Seq: 1, Kind: "request", Data: json.RawMessage(record("local", "local", "error", textfeat.Version))})
	lines := []string{
		record("local", "local", "ok", textfeat.Version),                  // 0
		record("cloud", "local", "ok", textfeat.Version),                  // 1: fell back
		record("cloud/stream/builtin-2", "local", "ok", textfeat.Version), // 1: fell back, the cloud's route as the agent records it
		record("cloud", "cloud", "ok", textfeat.Version),                  // skipped: no counterfactual
		record("local", "local", "cancelled", textfeat.Version),           // skipped
		record("local", "local", "ok", textfeat.Version+1),                // skipped: other layout
		string(wrapped), // 1: local failure inside a fleetwire.Record
		"",
	}
	ex, st, err := LoadRequests(strings.NewReader(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	if len(ex) != 4 || ex[0].Label != 0 || ex[1].Label != 1 || ex[2].Label != 1 || ex[3].Label != 1 {
		t.Fatalf("examples %+v", ex)
	}
	if st.Records != 7 || st.SkippedVersion != 1 || st.SkippedUnknown != 2 || st.Local != 1 || st.Cloud != 3 {
		t.Fatalf("stats %+v", st)
	}
	if _, _, err := LoadRequests(strings.NewReader("{not json")); err == nil {
		t.Fatal("bad JSON accepted")
	}
}

func FuzzLoadRequests(f *testing.F) {
	f.Add([]byte(record("local", "local", "ok", textfeat.Version)))
	f.Add([]byte(`{"kind":"request","data":{"features":[1,2],"feature_version":1}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ex, _, err := LoadRequests(bytes.NewReader(b))
		if err != nil {
			return
		}
		for _, e := range ex {
			if len(e.Features) != textfeat.Dim || (e.Label != 0 && e.Label != 1) {
				t.Fatalf("bad example %+v", e)
			}
		}
	})
}

// TestLoadShadowGradesOnly: a training export whose only quality signals
// are shadow grades (no app feedback at all) relabels the two local answers
// the cloud graded, the failed one cloud and the passed one local, beside
// the outcome labels of the others; its held-out requests stay out.
func TestLoadShadowGradesOnly(t *testing.T) {
	lines := []string{
		record("local", "local", "ok", textfeat.Version),
		record("cloud", "local", "ok", textfeat.Version),
		record("cloud", "cloud", "ok", textfeat.Version),
	}
	var graded []string // trace ids of the training part, not held out
	for i := 0; len(graded) < 2; i++ {
		if id := fmt.Sprintf("shadowed-%d", i); !InHeldOut(id) {
			graded = append(graded, id)
		}
	}
	for i, id := range graded {
		r, _ := json.Marshal(fleetwire.RequestRecord{TraceID: id, Features: textfeat.Extract("what is the capital of Peru"), FeatureVersion: textfeat.Version, Decision: "local", Path: "local", Outcome: "ok"})
		g, _ := json.Marshal(fleetwire.ShadowGrade{TraceID: id, OK: i == 1})
		sg, _ := json.Marshal(map[string]any{"device_id": "car-1", "kind": fleetwire.KindShadowGrade, "data": json.RawMessage(g)})
		lines = append(lines, string(r), string(sg))
	}
	ex, st, err := Load(strings.NewReader(strings.Join(lines, "\n")), Train)
	if err != nil {
		t.Fatal(err)
	}
	var labels []float32
	for _, e := range ex {
		labels = append(labels, e.Label)
	}
	// local: the plain local answer and the one whose shadow grade passed;
	// cloud: the fallback and the local answer that failed its grade.
	if fmt.Sprint(labels) != "[0 1 1 0]" || st.Local != 2 || st.Cloud != 2 || st.SkippedUnknown != 1 ||
		st.Feedback != 0 || st.ShadowGrades != 2 || st.BadLocal != 1 || st.GoodLocal != 1 {
		t.Fatalf("labels %v, stats %+v", labels, st)
	}
}
