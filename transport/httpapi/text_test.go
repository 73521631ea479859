package httpapi

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestInvalidUTF8AndNULRefused: a body that is not UTF-8, or a message
// holding a NUL character, is a 400 invalid_request_error in the caller's
// API shape that says what is wrong, before any generation (it used to
// reach the model as U+FFFD or a NUL byte).
func TestInvalidUTF8AndNULRefused(t *testing.T) {
	g := &scriptGen{tokens: []string{"ok"}, failAt: -1}
	url := serve(t, g, Options{})
	for _, tc := range []struct {
		name, path, body, want string
	}{
		{"openai bad utf-8", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"caf\xe9\"}]}", "not valid UTF-8 (first bad byte at offset 42)"},
		{"anthropic bad utf-8", "/v1/messages", "{\"model\":\"auto\",\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}", "not valid UTF-8"},
		{"openai NUL", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a\u0000b"}]}`, "the user message (turn 0) contains a NUL character"},
		{"anthropic NUL in system", "/v1/messages", `{"model":"auto","max_tokens":8,"system":"x\u0000","messages":[{"role":"user","content":"hi"}]}`, "the system message (turn 0) contains a NUL character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, url+tc.path, tc.body, nil)
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			var e struct {
				Type  string
				Error struct{ Type, Message string }
			}
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatal(err)
			}
			if e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, tc.want) {
				t.Fatalf("error %s, want invalid_request_error saying %q", b, tc.want)
			}
			if strings.HasPrefix(tc.path, "/v1/messages") && e.Type != "error" {
				t.Fatalf("Anthropic shape wants type error: %s", b)
			}
		})
	}
	if g.request() != nil {
		t.Fatal("a refused request reached the generator")
	}
	// Text around them is fine: é and an escaped é, a tab, emoji.
	resp := post(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"café caf\u00e9\t👋"}]}`, nil)
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK || g.request().Messages[0].Content != "café café\t👋" {
		t.Fatalf("valid text: status %d", resp.StatusCode)
	}
}
