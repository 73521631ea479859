package agent

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/models/cloudmodel"
	"github.com/phaseless/phaseless/models/lm/grammar/grammartest"
	"github.com/phaseless/phaseless/transport/pki"
)

// startAgentWithCloud runs an agent connected over phaseless/1 to a
// built-in engine running the shipped cloud model, so a test reaches both
// shipped models: the edge model pinned local, the cloud model pinned to
// the cloud.
func startAgentWithCloud(t *testing.T) string {
	t.Helper()
	_, url := startAgentWithCloudConfig(t, func(*Config) {})
	return url
}

// startAgentWithCloudConfig is startAgentWithCloud with the agent's
// configuration changed by set before it starts; it returns the agent too.
func startAgentWithCloudConfig(t *testing.T, set func(*Config)) (*Agent, string) {
	t.Helper()
	pkiDir := t.TempDir()
	if err := pki.EnsureDev(pkiDir, "car-1"); err != nil {
		t.Fatal(err)
	}
	m, err := cloudmodel.Open()
	if err != nil {
		t.Fatal(err)
	}
	cloudAddr := freeUDPAddr(t)
	cloud := startCloudModel(t, pkiDir, cloudAddr, &gatedEngine{}, m)
	cfg := testConfig(t)
	cfg.Cloud, cfg.DeviceID, cfg.PKIDir = cloudAddr, "car-1", pkiDir
	set(&cfg)
	a, url := startAgent(t, cfg)
	t.Cleanup(func() { cloud.stop(t) })
	waitUntil(t, "the agent to connect", func() bool { return a.cloud.Link().Connected })
	return a, url
}

// TestConstrainedRepliesThroughAgent: json_schema and json_object replies
// through the agent never end mid-document with finish_reason "stop",
// streamed or not, at temperature 0 and 1.0, on both shipped models: the
// edge model on the local engine, and the cloud model on a built-in engine
// behind phaseless/1 with the agent pinned to the cloud (issue 28's first
// engine bug).
func TestConstrainedRepliesThroughAgent(t *testing.T) {
	if raceEnabled {
		t.Skip("generates about 1,500 tokens with the shipped models (minutes under -race); make test runs it without -race")
	}
	url := startAgentWithCloud(t)
	for _, route := range []string{"local", "cloud"} {
		t.Run(route, func(t *testing.T) {
			finished, total := grammartest.CheckConstrainedReplies(t, url, http.Header{"X-Phaseless-Route": {route}})
			t.Logf("%d of %d replies finished and validated; the rest were cut at max_tokens", finished, total)
		})
	}
}

// TestLengthCutDropsMarker: a reply cut by max_tokens one token into the
// built-in models' end-of-turn marker "<|" ends with the reply's text, on
// both APIs' streams and answers, on the local engine and over phaseless/1
// (issue 28: "…in Paris.\n<").
func TestLengthCutDropsMarker(t *testing.T) {
	if raceEnabled {
		t.Skip("generates about 400 tokens with the shipped models (two minutes under -race); make test runs it without -race")
	}
	url := startAgentWithCloud(t)
	const q = "What is the capital of France?"
	for _, route := range []string{"local", "cloud"} {
		full, n, reason := ask(t, url, route, "openai", q, 120, false)
		if reason != "stop" {
			t.Fatalf("%s: finish %q after %q", route, reason, full)
		}
		for _, api := range []string{"openai", "anthropic"} {
			for _, stream := range []bool{false, true} {
				cut, _, reason := ask(t, url, route, api, q, n-1, stream)
				if cut != full || reason != "length" && reason != "max_tokens" {
					t.Errorf("%s %s stream=%v cut at %d tokens: %q (%s), want %q", route, api, stream, n-1, cut, reason, full)
				}
			}
		}
	}
}

// replyEvent reads every answer and stream event of both APIs.
type replyEvent struct {
	Choices []struct {
		Message      struct{ Content string }
		Delta        struct{ Content string }
		FinishReason string `json:"finish_reason"`
	}
	Usage struct {
		CompletionTokens int `json:"completion_tokens"`
		OutputTokens     int `json:"output_tokens"`
	}
	Content []struct{ Text string }
	Delta   struct {
		Text       string
		StopReason string `json:"stop_reason"`
	}
	StopReason string `json:"stop_reason"`
}

// ask sends one greedy request pinned to route and returns the text, the
// completion tokens and the finish (stop) reason.
func ask(t *testing.T, url, route, api, q string, maxTokens int, stream bool) (string, int, string) {
	t.Helper()
	path, body := "/v1/chat/completions", fmt.Sprintf(`{"max_tokens":%d,"temperature":0,"stream":%v,"messages":[{"role":"user","content":%q}]}`, maxTokens, stream, q)
	if stream {
		body = strings.Replace(body, `"stream":true`, `"stream":true,"stream_options":{"include_usage":true}`, 1)
	}
	if api == "anthropic" {
		path, body = "/v1/messages", fmt.Sprintf(`{"model":"auto","max_tokens":%d,"temperature":0,"stream":%v,"messages":[{"role":"user","content":%q}]}`, maxTokens, stream, q)
	}
	resp := post(t, url+path, body, "x-phaseless-route", route)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s %s: status %d: %s", route, api, resp.StatusCode, b)
	}
	var text strings.Builder
	n, reason := 0, ""
	read := func(data []byte) {
		var ev replyEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		for _, c := range ev.Choices {
			text.WriteString(c.Message.Content + c.Delta.Content)
			reason = max(reason, c.FinishReason)
		}
		for _, c := range ev.Content {
			text.WriteString(c.Text)
		}
		text.WriteString(ev.Delta.Text)
		reason = max(reason, ev.StopReason, ev.Delta.StopReason)
		n = max(n, ev.Usage.CompletionTokens, ev.Usage.OutputTokens)
	}
	if !stream {
		var raw json.RawMessage
		if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
			t.Fatal(err)
		}
		read(raw)
		return text.String(), n, reason
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && data != "[DONE]" {
			read([]byte(data))
		}
	}
	return text.String(), n, reason
}

// TestContextLengthOnAgent: a prompt longer than both shipped models'
// context (256 tokens) is a 400 context_length_exceeded on both APIs,
// whichever route: pinned local, pinned to the cloud over phaseless/1, and
// auto (the local engine refuses, the cloud refuses too).
func TestContextLengthOnAgent(t *testing.T) {
	url := startAgentWithCloud(t)
	long := strings.Repeat("tell me more about the weather ", 20)
	for _, route := range []string{"local", "cloud", "auto"} {
		for _, api := range []string{"openai", "anthropic"} {
			path, body := "/v1/chat/completions", `{"max_tokens":8,"messages":[{"role":"user","content":"`+long+`"}]}`
			if api == "anthropic" {
				path, body = "/v1/messages", `{"model":"auto","max_tokens":8,"messages":[{"role":"user","content":"`+long+`"}]}`
			}
			resp := post(t, url+path, body, "x-phaseless-route", route)
			b, _ := io.ReadAll(resp.Body)
			var e struct {
				Error struct{ Type, Code, Message string }
			}
			json.Unmarshal(b, &e)
			if resp.StatusCode != http.StatusBadRequest || e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, "context") ||
				api == "openai" && e.Error.Code != "context_length_exceeded" {
				t.Errorf("%s %s: %d %s, want 400 context_length_exceeded", route, api, resp.StatusCode, b)
			}
		}
	}
}
