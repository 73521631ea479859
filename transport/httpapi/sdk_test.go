package httpapi

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/transport/llm"
)

// sdkGen answers every request with the same three tokens, except for the
// magic prompts the SDK script uses to provoke errors.
type sdkGen struct{}

func (sdkGen) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	llm.MetaFrom(ctx).SetRoute("local")
	prompt := req.Messages[len(req.Messages)-1].Content
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
	return llm.Final{PromptTokens: 5, CompletionTokens: 3, FinishReason: "stop", Route: "local"}, nil
}

// sdkDir returns examples/sdk-test with its node_modules installed, or skips
// (fails on CI) when Node or the packages are not available.
func sdkDir(t *testing.T) string {
	t.Helper()
	unavailable := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") != "" {
			t.Fatalf(format, args...)
		}
		t.Skipf(format, args...)
	}
	dir, err := filepath.Abs("../../examples/sdk-test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		unavailable("node not installed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json")); err == nil {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "@anthropic-ai", "sdk", "package.json")); err == nil {
			return dir
		}
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		unavailable("npm not installed: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		unavailable("npm ci in %s: %v\n%s", dir, err, out)
	}
	return dir
}

// TestOfficialSDKs runs the official OpenAI and Anthropic Node SDKs, unchanged,
// against a real handler on loopback: non-streaming, streaming, validation
// errors, an overloaded engine and a failure in the middle of a stream.
func TestOfficialSDKs(t *testing.T) {
	dir := sdkDir(t)
	url := serve(t, sdkGen{}, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "sdk.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PHASELESS_BASE_URL="+url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node sdk.mjs: %v\n%s", err, out)
	}
	results := map[string]map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("not a result line %q: %v\n%s", line, err, out)
		}
		results[r["check"].(string)] = r
	}
	t.Logf("%s", out)
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
