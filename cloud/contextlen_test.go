package cloud

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/llm"
)

// TestContextLengthBeforeBudget: a prompt longer than the built-in model's
// context is a 400 context_length_exceeded on both APIs, streamed or not,
// and over phaseless/1, even when it also exceeds the key's budget: it
// used to be charged first and answered 429 rate_limit_error, which SDKs
// retry (issue 28's fourth engine bug). A prompt that fits still meets the
// budget.
func TestContextLengthBeforeBudget(t *testing.T) {
	c := startCloud(t, func(cfg *Config) { cfg.Budget = 300; cfg.BuiltinWorkers = 1; cfg.QUIC = "127.0.0.1:0" })
	long := strings.Repeat("tell me more about the weather ", 20) // 620 bytes, the cloud model's context is 256
	base := "http://" + c.HTTPAddr()
	for _, tc := range []struct{ name, path, body string }{
		{"openai", "/v1/chat/completions", `{"max_tokens":8,"messages":[{"role":"user","content":"` + long + `"}]}`},
		{"openai stream", "/v1/chat/completions", `{"max_tokens":8,"stream":true,"messages":[{"role":"user","content":"` + long + `"}]}`},
		{"anthropic", "/v1/messages", `{"model":"auto","max_tokens":8,"messages":[{"role":"user","content":"` + long + `"}]}`},
		{"anthropic stream", "/v1/messages", `{"model":"auto","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"` + long + `"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(base+tc.path, "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %s", resp.StatusCode, b)
			}
			var e struct {
				Error struct{ Type, Code, Message string }
			}
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("%v: %s", err, b)
			}
			if e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, "does not fit the context of 256") ||
				strings.HasPrefix(tc.name, "openai") && e.Error.Code != "context_length_exceeded" {
				t.Fatalf("error %s", b)
			}
		})
	}
	ctx, cl := dialDevice(t, c, "car-9")
	_, err := cl.Generate(ctx, &llm.Request{ID: "q", Model: "auto", MaxTokens: 8, Messages: []llm.Message{{Role: "user", Content: long}}}, func(llm.Token) error { return nil })
	if llm.CodeOf(err) != llm.CodeContextLength {
		t.Fatalf("over phaseless/1: %v, want context_length_exceeded", err)
	}
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"max_tokens":400,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a fitting prompt over the budget: %d, want 429", resp.StatusCode)
	}
}
