package agent

import (
	"encoding/json"
	"testing"

	"github.com/phaseless/phaseless/transport/fleetwire"
)

// TestFeedbackIsKeptWithTelemetry posts an app's verdict on an answer and
// finds it in the telemetry store beside the request's record, with the
// request's id; malformed verdicts are refused in the API's error shape.
func TestFeedbackIsKeptWithTelemetry(t *testing.T) {
	a, url := startAgent(t, testConfig(t))
	resp := post(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"turn on the radio"}],"max_tokens":3}`)
	resp.Body.Close()
	id := resp.Header.Get("x-request-id")
	if id == "" {
		t.Fatal("no x-request-id")
	}
	fb := post(t, url+"/v1/feedback", `{"request_id":"`+id+`","rating":"bad","note":"it played the wrong station"}`)
	if fb.StatusCode != 202 {
		t.Fatalf("feedback: %d", fb.StatusCode)
	}
	fb.Body.Close()
	// An id no answer of this agent had is refused, in the API's error
	// shape, and nothing is stored.
	unknown := post(t, url+"/v1/feedback", `{"request_id":"chatcmpl-never-served","rating":"good"}`)
	var nf struct {
		Error struct{ Message, Type, Code string }
	}
	if err := json.NewDecoder(unknown.Body).Decode(&nf); unknown.StatusCode != 404 || err != nil || nf.Error.Code != "not_found" || nf.Error.Type != "invalid_request_error" {
		t.Errorf("feedback on an unknown id: %d %+v %v", unknown.StatusCode, nf, err)
	}
	unknown.Body.Close()
	for _, bad := range []string{
		`{"request_id":"","rating":"bad"}`,
		`{"request_id":"x","rating":"meh"}`,
		`{"request_id":"x","rating":"good","stars":5}`,
		`not json`,
	} {
		r := post(t, url+"/v1/feedback", bad)
		var e struct {
			Error struct{ Message, Type string }
		}
		if err := json.NewDecoder(r.Body).Decode(&e); r.StatusCode != 400 || err != nil || e.Error.Type != "invalid_request_error" {
			t.Errorf("%s: %d %+v %v", bad, r.StatusCode, e, err)
		}
		r.Body.Close()
	}
	pendingRecords(t, a, 2)
	recs, err := a.Telemetry().Pending(100)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, r := range recs {
		kinds[r.Kind]++
		if r.Kind == fleetwire.KindFeedback {
			var f fleetwire.FeedbackRecord
			if err := json.Unmarshal(r.Data, &f); err != nil || f.TraceID != id || f.Rating != "bad" {
				t.Fatalf("feedback record %s: %v", r.Data, err)
			}
		}
	}
	if kinds[fleetwire.KindRequest] != 1 || kinds[fleetwire.KindFeedback] != 1 {
		t.Fatalf("records by kind %v", kinds)
	}
}
