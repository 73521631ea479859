package agent

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestLocalOverloadSheds200Concurrent sends 200 concurrent requests pinned
// to the local engine, both APIs, streamed and not, to an agent whose
// local queue holds 16. Every request gets an answer: a 200, or a 503 with
// Retry-After in its own API's error shape. None hangs or times out, and
// the 503s are exactly the requests the queue bound refused.
func TestLocalOverloadSheds200Concurrent(t *testing.T) {
	cfg := testConfig(t)
	cfg.LocalConcurrency, cfg.LocalQueue = 2, 16
	a, url := startAgent(t, cfg)
	const n = 200
	type answer struct {
		anthropic bool
		status    int
		retry     string
		body      []byte
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			anthropic, stream := i%2 == 1, i%4 >= 2
			path := "/v1/chat/completions"
			body := `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2`
			if anthropic {
				path = "/v1/messages"
				body = `{"model":"auto","messages":[{"role":"user","content":"hi"}],"max_tokens":2`
			}
			if stream {
				body += `,"stream":true`
			}
			req, _ := http.NewRequest("POST", url+path, strings.NewReader(body+"}"))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("x-phaseless-route", "local")
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			answers[i] = answer{anthropic, resp.StatusCode, resp.Header.Get("Retry-After"), b}
		})
	}
	wg.Wait()
	ok, shed := 0, 0
	for i, ans := range answers {
		switch ans.status {
		case http.StatusOK:
			ok++
		case http.StatusServiceUnavailable:
			shed++
			if ans.retry != "1" {
				t.Errorf("request %d: 503 with Retry-After %q", i, ans.retry)
			}
			var e struct {
				Type  string `json:"type"`
				Error struct {
					Type string `json:"type"`
					Code string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(ans.body, &e); err != nil {
				t.Fatalf("request %d: 503 body %q: %v", i, ans.body, err)
			}
			if ans.anthropic && (e.Type != "error" || e.Error.Type != "overloaded_error") ||
				!ans.anthropic && (e.Error.Type != "server_error" || e.Error.Code != "overloaded") {
				t.Errorf("request %d (anthropic %v): 503 not in its API's shape: %s", i, ans.anthropic, ans.body)
			}
		default:
			t.Errorf("request %d: status %d: %s", i, ans.status, ans.body)
		}
	}
	// At least the running and queued requests of the first burst finish.
	if ok < cfg.LocalConcurrency || shed == 0 || ok+shed != n {
		t.Fatalf("%d ok, %d shed of %d", ok, shed, n)
	}
	if l := a.runner.Load(); l.Refused != uint64(shed) || l.Waiting != 0 || l.Running != 0 {
		t.Fatalf("runner %+v after %d shed", l, shed)
	}
	t.Logf("%d answered, %d shed with 503", ok, shed)
}
