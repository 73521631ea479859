package route

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/httpapi"
)

// TestCloudOnlyHints: x-prefetch-hint, x-batch-threshold and x-semantic-mode
// act in the cloud's coordinator. A request carrying one goes to the cloud
// even where the router would keep it on the device (a car request); one
// that cannot get there (forced local, route-mode local, no cloud, even
// when forced to the cloud) is
// refused naming the header instead of running with it ignored.
// x-prefetch-hint: none asks for nothing and runs anywhere. x-cache-ttl
// pins in the built-in engine, and is cloud-only where the local engine is
// an external server that keeps no lifetimes.
func TestCloudOnlyHints(t *testing.T) {
	r, _ := NewRouter(Config{}, nil)
	localMode, _ := NewRouter(Config{Mode: PathLocal}, nil)
	localServer, _ := NewRouter(Config{LocalNoPins: true}, nil)
	type setup struct {
		d            *Dispatcher
		local, cloud *engine
	}
	mk := func(r *Router, withCloud bool) setup {
		s := setup{local: &engine{tokens: []string{"l"}, failAt: -1}, cloud: &engine{tokens: []string{"c"}, failAt: -1}}
		cfg := DispatcherConfig{Router: r, Local: s.local}
		if withCloud {
			cfg.Cloud = s.cloud
		}
		s.d, _ = NewDispatcher(cfg)
		return s
	}
	for _, tc := range []struct {
		name    string
		s       setup
		hints   llm.Hints
		header  string // "" = runs
		inCloud bool
	}{
		{"prefetch forced local", mk(r, true), llm.Hints{Route: PathLocal, Prefetch: "high"}, "x-prefetch-hint", false},
		{"threshold without a cloud", mk(r, false), llm.Hints{BatchThreshold: 0.5}, "x-batch-threshold", false},
		{"mode without a cloud", mk(r, false), llm.Hints{SemanticMode: "intent"}, "x-semantic-mode", false},
		{"mode under route-mode local", mk(localMode, true), llm.Hints{SemanticMode: "topic"}, "x-semantic-mode", false},
		{"a car request with a threshold goes to the cloud", mk(r, true), llm.Hints{BatchThreshold: 0.6}, "", true},
		{"a car request with a prefetch hint goes to the cloud", mk(r, true), llm.Hints{Prefetch: "low"}, "", true},
		{"forced to the cloud", mk(r, true), llm.Hints{Route: PathCloud, Prefetch: "low"}, "", true},
		{"forced to the cloud without a cloud", mk(r, false), llm.Hints{Route: PathCloud, Prefetch: "high"}, "x-prefetch-hint", false},
		{"prefetch none stays local", mk(r, true), llm.Hints{Prefetch: "none"}, "", false},
		{"prefetch none forced local", mk(r, false), llm.Hints{Route: PathLocal, Prefetch: "none"}, "", false},
		{"none set, local", mk(r, false), llm.Hints{Route: PathLocal}, "", false},
		{"cache ttl pins in the built-in engine", mk(r, true), llm.Hints{CacheTTL: 10 * time.Minute}, "", false},
		{"cache ttl forced local on the built-in engine", mk(r, false), llm.Hints{Route: PathLocal, CacheTTL: 10 * time.Minute}, "", false},
		{"cache ttl with a local server goes to the cloud", mk(localServer, true), llm.Hints{CacheTTL: 10 * time.Minute}, "", true},
		{"cache ttl with a local server forced local", mk(localServer, true), llm.Hints{Route: PathLocal, CacheTTL: 10 * time.Minute}, "x-cache-ttl", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := userReq("turn on the heated seats") // the router keeps it on the device
			req.Hints = tc.hints
			_, err := tc.s.d.Generate(context.Background(), req, func(llm.Token) error { return nil })
			if tc.header != "" {
				if llm.CodeOf(err) != llm.CodeInvalid || !strings.Contains(err.Error(), tc.header) {
					t.Fatalf("err %v, want invalid naming %s", err, tc.header)
				}
				if tc.s.local.calls+tc.s.cloud.calls != 0 {
					t.Fatal("a refused request ran")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ran := tc.s.cloud.calls == 1; ran != tc.inCloud || tc.s.local.calls+tc.s.cloud.calls != 1 {
				t.Fatalf("cloud ran %d, local %d; want in the cloud: %v", tc.s.cloud.calls, tc.s.local.calls, tc.inCloud)
			}
		})
	}
}

// TestCloudOnlyHintsOverBothAPIs: the same through the agent's OpenAI and
// Anthropic endpoints: the header moves a request the router would answer
// locally to the cloud (x-phaseless-route says so), and forced local it is
// a 400 in each API's own error shape that names the header.
func TestCloudOnlyHintsOverBothAPIs(t *testing.T) {
	r, _ := NewRouter(Config{}, nil)
	d, _ := NewDispatcher(DispatcherConfig{Router: r, Local: &engine{tokens: []string{"l"}, failAt: -1}, Cloud: &engine{tokens: []string{"c"}, failAt: -1}})
	h, err := httpapi.NewHandler(d, httpapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	bodies := map[string]string{
		"/v1/chat/completions": `{"model":"auto","max_tokens":4,"messages":[{"role":"user","content":"turn on the heated seats"}]}`,
		"/v1/messages":         `{"model":"auto","max_tokens":4,"messages":[{"role":"user","content":"turn on the heated seats"}]}`,
	}
	for path, body := range bodies {
		for _, tc := range []struct {
			header, value string
			forced        bool
		}{
			{"x-batch-threshold", "0.5", false}, {"x-semantic-mode", "intent", false}, {"x-prefetch-hint", "high", false},
			{"x-batch-threshold", "0.5", true}, {"x-prefetch-hint", "medium", true},
		} {
			name := path + " " + tc.header
			if tc.forced {
				name += " forced local"
			}
			t.Run(name, func(t *testing.T) {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(tc.header, tc.value)
				if tc.forced {
					req.Header.Set("x-phaseless-route", "local")
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				if !tc.forced {
					if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("x-phaseless-route"), "cloud") {
						t.Fatalf("status %d, route %q: want 200 from the cloud", resp.StatusCode, resp.Header.Get("x-phaseless-route"))
					}
					return
				}
				var e struct {
					Type  string `json:"type"` // Anthropic's envelope
					Error struct {
						Type    string `json:"type"`
						Message string `json:"message"`
					} `json:"error"`
				}
				if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
					t.Fatal(err)
				}
				wantType := "invalid_request_error"
				if resp.StatusCode != 400 || e.Error.Type != wantType || !strings.Contains(e.Error.Message, tc.header) ||
					(path == "/v1/messages") != (e.Type == "error") {
					t.Fatalf("status %d, error %+v: want a 400 in the API's shape naming %s", resp.StatusCode, e, tc.header)
				}
			})
		}
	}
}
