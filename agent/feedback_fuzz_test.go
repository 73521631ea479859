package agent

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// FuzzFeedbackBody: POST /v1/feedback bodies come from apps; anything is
// either recorded (202), refused with 400, or, for a request id the agent
// did not answer, with 404, in the API's error shape.
func FuzzFeedbackBody(f *testing.F) {
	f.Add([]byte(`{"request_id":"abc","rating":"good"}`))
	f.Add([]byte(`{"request_id":"abc","rating":"bad","note":"wrong station"}`))
	f.Add([]byte(`{"request_id":"","rating":"bad"}`))
	f.Add([]byte(`{"request_id":"a","rating":"good"} {}`))
	f.Add([]byte(`[`))
	cfg := testConfig(f)
	a, err := New(cfg, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { a.Close() })
	a.rec.remember("abc") // as if it had answered request abc
	h := a.Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/v1/feedback", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusAccepted:
		case http.StatusBadRequest, http.StatusNotFound:
			var e struct {
				Error struct{ Message, Type string }
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Message == "" {
				t.Fatalf("%d not in the error shape: %s", rec.Code, rec.Body)
			}
		default:
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
	})
}
