package agent

import (
	"encoding/json"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/models/lm/grammar/grammartest"
)

// TestCloudOnlyToolsThroughAgent: an app's own tools, which the device's
// model was not taught (the smart home's set of models/edgemodel), go
// through a running agent started with --cloud-tools to a real cloud over
// phaseless/1 on loopback, and come back as a tool call in each API's
// shape whose name is an offered tool and whose arguments validate against
// that tool's schema (checked by an independent JSON Schema validator).
// The route and its reason show in the headers and in telemetry.
func TestCloudOnlyToolsThroughAgent(t *testing.T) {
	if raceEnabled {
		t.Skip("generates tool calls with the shipped cloud model (minutes under -race); make test runs it without -race")
	}
	a, url := startAgentWithCloudConfig(t, func(c *Config) { c.CloudTools = true })
	raw, err := os.ReadFile("../models/edgemodel/testdata/hometools.json")
	if err != nil {
		t.Fatal(err)
	}
	var openaiTools []struct {
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &openaiTools); err != nil {
		t.Fatal(err)
	}
	var anthropicTools []map[string]any
	schemas := map[string]string{}
	for _, tl := range openaiTools {
		f := tl.Function
		anthropicTools = append(anthropicTools, map[string]any{"name": f.Name, "description": f.Description, "input_schema": f.Parameters})
		schemas[f.Name] = string(f.Parameters)
	}
	// Requests of the smart home's dev set, with tool_choice "required"
	// (OpenAI) and "any" (Anthropic): a call must come back.
	// The cloud model picks each right (3 of 3 when this was written).
	want := map[string]string{"turn on the kitchen lights": "lights_on", "add milk to the shopping list": "add_to_shopping_list", "what's the weather in Denver": "get_weather"}
	requests := slices.Sorted(maps.Keys(want))
	check := func(api, request, name string, args json.RawMessage, resp *httpResponse) {
		t.Helper()
		if name != want[request] {
			t.Errorf("%s %q: called %s, want %s", api, request, name, want[request])
		}
		if !strings.HasPrefix(resp.route, "cloud") || resp.reason != "tools: only the cloud serves them" {
			t.Errorf("%s %q: ran %q (%q), want the cloud because only it serves the tools", api, request, resp.route, resp.reason)
		}
		schema, ok := schemas[name]
		if !ok {
			t.Fatalf("%s %q: called %q, not an offered tool", api, request, name)
		}
		var inst any
		if err := json.Unmarshal(args, &inst); err != nil {
			t.Fatalf("%s %q: arguments %s do not parse: %v", api, request, args, err)
		}
		if err := grammartest.Validator(t, schema).Validate(inst); err != nil {
			t.Errorf("%s %q: %s%s does not validate: %v", api, request, name, args, err)
		}
		t.Logf("%s %q → %s%s via %s", api, request, name, args, resp.route)
	}
	for _, q := range requests {
		body, _ := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "user", "content": q}},
			"tools": json.RawMessage(raw), "tool_choice": "required", "max_tokens": 160, "temperature": 0})
		r := postFor(t, url+"/v1/chat/completions", body)
		var cr struct {
			Choices []struct {
				FinishReason string `json:"finish_reason"`
				Message      struct {
					ToolCalls []struct {
						Type     string `json:"type"`
						Function struct {
							Name      string `json:"name"`
							Arguments string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(r.body, &cr); err != nil || len(cr.Choices) != 1 || len(cr.Choices[0].Message.ToolCalls) == 0 {
			t.Fatalf("openai %q: %d %s (%v)", q, r.status, r.body, err)
		}
		c := cr.Choices[0]
		if c.FinishReason != "tool_calls" || c.Message.ToolCalls[0].Type != "function" {
			t.Errorf("openai %q: finish %q, call type %q", q, c.FinishReason, c.Message.ToolCalls[0].Type)
		}
		check("openai", q, c.Message.ToolCalls[0].Function.Name, json.RawMessage(c.Message.ToolCalls[0].Function.Arguments), r)

		body, _ = json.Marshal(map[string]any{"model": "auto", "messages": []map[string]string{{"role": "user", "content": q}},
			"tools": anthropicTools, "tool_choice": map[string]string{"type": "any"}, "max_tokens": 160, "temperature": 0})
		r = postFor(t, url+"/v1/messages", body)
		type block struct {
			Type  string          `json:"type"`
			Name  string          `json:"name"`
			ID    string          `json:"id"`
			Input json.RawMessage `json:"input"`
		}
		var mr struct {
			StopReason string  `json:"stop_reason"`
			Content    []block `json:"content"`
		}
		if err := json.Unmarshal(r.body, &mr); err != nil {
			t.Fatalf("anthropic %q: %d %s (%v)", q, r.status, r.body, err)
		}
		i := slices.IndexFunc(mr.Content, func(b block) bool { return b.Type == "tool_use" })
		if i < 0 || mr.StopReason != "tool_use" || mr.Content[i].ID == "" {
			t.Fatalf("anthropic %q: no tool_use block, or stop %q: %s", q, mr.StopReason, r.body)
		}
		check("anthropic", q, mr.Content[i].Name, mr.Content[i].Input, r)
	}
	cloudTooled := 0
	for _, rec := range pendingRecords(t, a, 2*len(requests)) {
		if rec.Reason == "tools: only the cloud serves them" && rec.Decision == "cloud" {
			cloudTooled++
		}
	}
	if cloudTooled != 2*len(requests) {
		t.Errorf("%d telemetry records give the cloud's tools as the reason, want %d", cloudTooled, 2*len(requests))
	}
}

// httpResponse is an answer's status, route headers and body.
type httpResponse struct {
	status        int
	route, reason string
	body          []byte
}

func postFor(t *testing.T, url string, body []byte) *httpResponse {
	t.Helper()
	resp := post(t, url, string(body))
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return &httpResponse{status: resp.StatusCode, route: resp.Header.Get("x-phaseless-route"), reason: resp.Header.Get("x-phaseless-route-reason"), body: b}
}
