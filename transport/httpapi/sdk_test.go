package httpapi

import (
	"context"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/httpapi/sdktest"
)

// sdkGen answers every request with the same three tokens, except for the
// magic prompts the SDK script uses to provoke errors.
type sdkGen struct{}

func (sdkGen) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	st := llm.NewStream(emit)
	st.Meta.Route = llm.RouteLocal
	emit = st.Emit
	prompt := req.Prompt
	if !req.Raw {
		prompt = req.Messages[len(req.Messages)-1].Content
	}
	if prompt == "OVERLOADED" {
		return llm.Final{}, llm.Errorf(llm.CodeOverloaded, "local queue is full")
	}
	for i, t := range []string{"Hello", " from", " Phaseless"} {
		if prompt == "FAIL-MIDSTREAM" && i == 2 {
			return llm.Final{}, llm.Errorf(llm.CodeUnavailable, "cloud link lost after 2 tokens")
		}
		if err := emit(llm.Token{Text: t, ID: int32(i)}); err != nil {
			return llm.Final{}, err
		}
	}
	return llm.Final{PromptTokens: 5, CompletionTokens: 3, FinishReason: "stop"}, nil
}

// TestOfficialSDKs runs the official OpenAI and Anthropic Node SDKs, unchanged,
// against a real handler on loopback: non-streaming, streaming, validation
// errors, an overloaded engine and a failure in the middle of a stream.
func TestOfficialSDKs(t *testing.T) {
	dir := sdktest.Install(t)
	url := serve(t, sdkGen{}, Options{})
	results := map[string]map[string]any{}
	for _, r := range sdktest.Run[map[string]any](t, dir, "sdk.mjs", url) {
		check, _ := r["check"].(string)
		results[check] = r
	}
	get := func(check, path string) any {
		var v any = results[check]
		for _, k := range strings.Split(path, ".") {
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		}
		return v
	}
	want := []struct {
		check, path string
		want        any
	}{
		{"openai.create", "text", "Hello from Phaseless"},
		{"openai.create", "finish", "stop"},
		{"openai.create", "usage.total_tokens", 8.0},
		{"openai.create", "route", "local"},
		{"openai.stream", "text", "Hello from Phaseless"},
		{"openai.stream", "usage.completion_tokens", 3.0},
		{"openai.stream", "finish", "stop"},
		{"anthropic.create", "text", "Hello from Phaseless"},
		{"anthropic.create", "stop", "end_turn"},
		{"anthropic.create", "usage.output_tokens", 3.0},
		{"anthropic.stream", "text", "Hello from Phaseless"},
		{"anthropic.stream", "stop", "end_turn"},
		{"anthropic.stream", "usage.input_tokens", 5.0},
		{"openai.invalid", "name", "BadRequestError"},
		{"openai.invalid", "type", "invalid_request_error"},
		{"anthropic.invalid", "name", "BadRequestError"},
		{"anthropic.invalid", "type", "invalid_request_error"},
		{"openai.overloaded", "status", 503.0},
		{"openai.midstream", "threw", true},
		{"openai.midstream", "text", "Hello from"},
		{"anthropic.midstream", "threw", true},
		{"anthropic.midstream", "text", "Hello from"},
		{"anthropic.midstream", "type", "api_error"},
	}
	for _, w := range want {
		if got := get(w.check, w.path); got != w.want {
			t.Errorf("%s %s = %v, want %v", w.check, w.path, got, w.want)
		}
	}
	if msg, _ := get("openai.midstream", "message").(string); !strings.Contains(msg, "cloud link lost") {
		t.Errorf("openai mid-stream error message %q", msg)
	}
	events, _ := get("anthropic.stream", "events").([]any)
	var names []string
	for _, e := range events {
		names = append(names, e.(string))
	}
	if got := strings.Join(names, " "); got != "message_start content_block_start content_block_delta content_block_delta content_block_delta content_block_stop message_delta message_stop" {
		t.Errorf("anthropic stream events: %s", got)
	}
}
