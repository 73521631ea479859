package sim

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/llm"
)

// TestRemoteVLLMGetsNoBreakpoints: a simulated worker stands in for vLLM
// (its metrics, its OpenAI API): it has no per-request pin, so the remote
// client sends a request's cache breakpoints nowhere: the body is the plain
// chat request, no x-cache-ttl goes with it, and the final claims no cache
// writes. What the server's own prefix cache serves comes back as reads
// (prompt_tokens_details.cached_tokens) on the repeat.
func TestRemoteVLLMGetsNoBreakpoints(t *testing.T) {
	spec, err := ParseURL("sim://l4?model=qwen2.5-7b&n=1")
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDeployment(spec.GPU, spec.Model, spec.TP, EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(d)
	defer srv.Close()
	h, err := srv.Handler()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex // guards bodies, ttls
	var bodies, ttls []string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			bodies, ttls = append(bodies, string(b)), append(ttls, r.Header.Get("x-cache-ttl"))
			mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		h.ServeHTTP(w, r)
	}))
	defer hs.Close()
	r, err := worker.NewRemote(worker.RemoteConfig{URL: hs.URL, Model: "qwen2.5-7b"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	if _, err := r.Probe(ctx); err != nil { // what would tell a Phaseless server apart
		t.Fatal(err)
	}
	sys := strings.Repeat("You answer briefly about the car. ", 20)
	req := &llm.Request{Model: "auto", MaxTokens: 2,
		Messages:    []llm.Message{{Role: "system", Content: sys}, {Role: "user", Content: "how warm is it"}},
		ToolRequest: llm.ToolRequest{Tools: []llm.Tool{{Name: "set_fan_speed", Parameters: []byte(`{"type":"object"}`)}}},
		CacheRequest: llm.CacheRequest{CacheBreakpoints: []llm.CacheBreakpoint{
			{Tools: 1, TTL: time.Hour}, {Message: 0, Chars: len(sys), TTL: 10 * time.Minute}}},
	}
	var fins []llm.Final
	for range 2 {
		fin, err := r.Generate(ctx, req, func(llm.Token) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		fins = append(fins, fin)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, b := range bodies {
		if strings.Contains(b, "cache_control") || ttls[i] != "" || !strings.Contains(b, `"content":"You answer`) {
			t.Fatalf("request %d to a vLLM-like server carried cache marks (x-cache-ttl %q): %s", i, ttls[i], b)
		}
	}
	if fins[0].CacheWriteTokens != 0 || fins[1].CacheWriteTokens != 0 || fins[1].PrefixHitTokens == 0 {
		t.Fatalf("finals %+v: want no cache writes claimed and the repeat's prefix hits read", fins)
	}
}
