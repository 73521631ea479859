package lm

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/httpapi"
)

// promptEcho answers every request with the prompt the engine would run for
// it (Engine.chatRequest, decoded), so a test can read what the model is
// shown after an API decoded the request.
type promptEcho struct{ e *Engine }

func (p promptEcho) Generate(_ context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	prompt, _, err := p.e.chatRequest(req)
	if err != nil {
		return llm.Final{}, err
	}
	if err := emit(llm.Token{Text: p.e.m.Tokenizer().Decode(prompt)}); err != nil {
		return llm.Final{}, err
	}
	return llm.Final{FinishReason: "stop"}, nil
}

// TestToolErrorReachesPrompt sends a failed tool result through each API
// to the engine: Anthropic's tool_result with is_error is shown to the
// model as failed; OpenAI's role "tool" message has no error flag, so an
// error there is the app's own text, shown as it is and not marked again.
func TestToolErrorReachesPrompt(t *testing.T) {
	m, _ := buildModel(t, tinyConfig(), F32, 4, false)
	h, err := httpapi.NewHandler(promptEcho{newEngine(t, m, EngineConfig{})}, httpapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	post := func(path, body string) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("anthropic-version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d: %s", path, resp.StatusCode, raw)
		}
		return string(raw)
	}
	const tool = `"name":"set_window","description":"window","input_schema":{"type":"object"}`
	for _, isErr := range []bool{true, false} {
		body := `{"model":"auto","max_tokens":20,"tools":[{` + tool + `}],"messages":[{"role":"user","content":"open the window"},
			{"role":"assistant","content":[{"type":"tool_use","id":"c1","name":"set_window","input":{}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":"window motor stuck","is_error":` + map[bool]string{true: "true", false: "false"}[isErr] + `}]}]}`
		var r struct{ Content []struct{ Text string } }
		if err := json.Unmarshal([]byte(post("/v1/messages", body)), &r); err != nil || len(r.Content) != 1 {
			t.Fatalf("anthropic reply %+v: %v", r, err)
		}
		want := "<|tool|>\nwindow motor stuck\n"
		if isErr {
			want = "<|tool|>\n" + llm.ToolFailed + "window motor stuck\n"
		}
		if !strings.Contains(r.Content[0].Text, want) {
			t.Errorf("anthropic is_error %v: prompt\n%q\nlacks %q", isErr, r.Content[0].Text, want)
		}
	}
	body := `{"model":"auto","tools":[{"type":"function","function":{"name":"set_window","parameters":{"type":"object"}}}],"messages":[{"role":"user","content":"open the window"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"set_window","arguments":"{}"}}]},
		{"role":"tool","tool_call_id":"c1","content":"Error: window motor stuck"}]}`
	var r struct {
		Choices []struct{ Message struct{ Content string } }
	}
	if err := json.Unmarshal([]byte(post("/v1/chat/completions", body)), &r); err != nil || len(r.Choices) != 1 {
		t.Fatalf("openai reply %+v: %v", r, err)
	}
	if p := r.Choices[0].Message.Content; !strings.Contains(p, "<|tool|>\nError: window motor stuck\n") || strings.Contains(p, llm.ToolFailed) {
		t.Errorf("openai tool error: prompt\n%q", p)
	}
}
