package lm

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/chatfmt"
	"github.com/phaseless/phaseless/models/lm/grammar/grammartest"
)

var testTools = []llm.Tool{
	{Name: "set_fan_speed", Parameters: json.RawMessage(`{"type":"object","properties":{"level":{"type":"integer","minimum":0,"maximum":5}},"required":["level"],"additionalProperties":false}`)},
	{Name: "set_window", Parameters: json.RawMessage(`{"type":"object","properties":{"window":{"type":"string","enum":["driver","passenger"]},"open":{"type":"boolean"}},"required":["window","open"],"additionalProperties":false}`)},
	{Name: "note", Parameters: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string","maxLength":6}},"required":["text"]}`)},
}

func validator(t *testing.T, schema json.RawMessage) *jsonschema.Schema {
	return grammartest.Validator(t, string(schema))
}

func validates(t *testing.T, v *jsonschema.Schema, text string) {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		t.Fatalf("%q does not parse: %v", text, err)
	}
	if err := v.Validate(inst); err != nil {
		t.Fatalf("%q does not validate: %v", text, err)
	}
}

// collect gathers a reply's text and its tool calls from the stream.
type collected struct {
	text  string
	calls []llm.ToolCall
}

func (c *collected) emit(t llm.Token) error {
	if t.Tool == nil {
		c.text += t.Text
		return nil
	}
	if t.Tool.Index == len(c.calls) {
		c.calls = append(c.calls, llm.ToolCall{ID: t.Tool.ID, Name: t.Tool.Name})
	}
	c.calls[t.Tool.Index].Arguments += t.Tool.Arguments
	return nil
}

func run(t *testing.T, e *Engine, req *llm.Request) (collected, llm.Final) {
	t.Helper()
	var c collected
	fin, err := e.Generate(context.Background(), req, c.emit)
	if err != nil {
		t.Fatal(err)
	}
	return c, fin
}

// TestConstrainedToolCallsValidate runs a random-weight model, which left
// alone writes noise, under each tool_choice: every reply it gives is
// well-formed calls to the offered tools with arguments valid against their
// schemas (or, under auto, possibly prose).
func TestConstrainedToolCallsValidate(t *testing.T) {
	m, _ := buildModel(t, tinyConfig(), F32, 4, false)
	e := newEngine(t, m, EngineConfig{})
	vs := map[string]*jsonschema.Schema{}
	for _, tl := range testTools {
		vs[tl.Name] = validator(t, tl.Parameters)
	}
	for _, choice := range []llm.ToolChoice{{Mode: llm.ToolRequired}, {Mode: llm.ToolNamed, Name: "set_window"}, {Mode: llm.ToolRequired, Single: true}, {Mode: llm.ToolAuto}} {
		calls, prose := 0, 0
		// Twelve seeds at temperature 1 and the greedy reply at 0: the two
		// settings apps send (docs/tools.md).
		for seed := range uint64(13) {
			temp := 1.0
			if seed == 12 {
				temp = 0
			}
			req := &llm.Request{Messages: []llm.Message{{Role: "user", Content: "open the window"}}, MaxTokens: 200, Temperature: temp, Seed: seed + 1,
				ToolRequest: llm.ToolRequest{Tools: testTools, ToolChoice: choice}}
			c, fin := run(t, e, req)
			if fin.FinishReason == "length" {
				continue
			}
			if len(c.calls) == 0 {
				if choice.Mode != llm.ToolAuto {
					t.Fatalf("%v: no call, text %q", choice, c.text)
				}
				if strings.HasPrefix(c.text, chatfmt.ToolCallOpen[:1]) || strings.Contains(c.text, chatfmt.ToolCallOpen[:2]) {
					t.Fatalf("prose reply %q holds a call's markup", c.text)
				}
				prose++
				continue
			}
			if fin.FinishReason != llm.FinishToolCalls || strings.TrimSpace(c.text) != "" {
				t.Fatalf("%v: finish %q, text %q beside calls", choice, fin.FinishReason, c.text)
			}
			if choice.Single && len(c.calls) != 1 {
				t.Fatalf("single: %d calls", len(c.calls))
			}
			for _, call := range c.calls {
				if choice.Mode == llm.ToolNamed && call.Name != choice.Name {
					t.Fatalf("named %s: called %s", choice.Name, call.Name)
				}
				if !strings.HasPrefix(call.ID, "call_") {
					t.Fatalf("call id %q", call.ID)
				}
				validates(t, vs[call.Name], call.Arguments)
				calls++
			}
		}
		if calls == 0 && choice.Mode != llm.ToolAuto || calls+prose == 0 {
			t.Fatalf("%v: no reply finished", choice)
		}
	}
}

// TestConstrainedJSONSchema checks response_format json_schema and
// json_object on a random-weight model, at temperature 1 and 0: the text
// always parses and validates.
func TestConstrainedJSONSchema(t *testing.T) {
	m, _ := buildModel(t, tinyConfig(), F32, 5, false)
	e := newEngine(t, m, EngineConfig{})
	schema := json.RawMessage(`{"type":"object","properties":{"city":{"type":"string","enum":["Paris","Oslo"]},"temp":{"type":"number","minimum":-30,"maximum":45},"ok":{"type":"boolean"}},"required":["city","temp","ok"],"additionalProperties":false}`)
	v := validator(t, schema)
	finished := 0
	// Ten seeds at temperature 1 and the greedy reply at 0.
	for seed := range uint64(11) {
		temp := 1.0
		if seed == 10 {
			temp = 0
		}
		for _, rf := range []llm.ResponseFormat{{Type: llm.FormatJSONSchema, Schema: schema, Strict: true}, {Type: llm.FormatJSONObject}} {
			req := &llm.Request{Messages: []llm.Message{{Role: "user", Content: "weather"}}, MaxTokens: 120, Temperature: temp, Seed: seed + 1,
				ToolRequest: llm.ToolRequest{ResponseFormat: rf}}
			c, fin := run(t, e, req)
			if fin.FinishReason == "length" {
				continue
			}
			finished++
			if rf.Type == llm.FormatJSONSchema {
				validates(t, v, c.text)
				continue
			}
			var obj map[string]any
			if err := json.Unmarshal([]byte(c.text), &obj); err != nil {
				t.Fatalf("json_object: %q: %v", c.text, err)
			}
		}
	}
	if finished < 5 {
		t.Fatalf("only %d of 20 replies finished within the token limit", finished)
	}
	req := &llm.Request{Messages: []llm.Message{{Role: "user", Content: "x"}}, MaxTokens: 5,
		ToolRequest: llm.ToolRequest{ResponseFormat: llm.ResponseFormat{Type: llm.FormatJSONSchema, Schema: json.RawMessage(`{"type":"string","pattern":"(?=a)b"}`)}}}
	if _, err := e.Generate(context.Background(), req, nil); llm.CodeOf(err) != llm.CodeInvalid {
		t.Fatalf("unsupported schema: %v", err)
	}
}

// TestConstrainedSplitMatchesWhole runs tool-call requests split between
// two engines (prefill on one, KV handed to the other, decode there): the
// decode side's grammar starts after the handed-off first token, and the
// calls are those one engine produces.
func TestConstrainedSplitMatchesWhole(t *testing.T) {
	m, _ := buildModel(t, tinyConfig(), F32, 4, false)
	whole, pre, dec := newEngine(t, m, EngineConfig{}), newEngine(t, m, EngineConfig{}), newEngine(t, m, EngineConfig{})
	for seed := range uint64(6) {
		req := &llm.Request{Messages: []llm.Message{{Role: "user", Content: "open the window"}}, MaxTokens: 200, Temperature: 1, Seed: seed + 1,
			ToolRequest: llm.ToolRequest{Tools: testTools, ToolChoice: llm.ToolChoice{Mode: llm.ToolRequired}}}
		want, wfin := run(t, whole, req)
		h, _, err := pre.PrefillChat(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		var got collected
		gfin, err := dec.ResumeChat(context.Background(), req, h, got.emit)
		if err != nil {
			t.Fatal(err)
		}
		if got.text != want.text || len(got.calls) != len(want.calls) || gfin.FinishReason != wfin.FinishReason {
			t.Fatalf("seed %d: split %+v (%s), whole %+v (%s)", seed, got, gfin.FinishReason, want, wfin.FinishReason)
		}
		for i := range got.calls {
			if got.calls[i].Name != want.calls[i].Name || got.calls[i].Arguments != want.calls[i].Arguments {
				t.Fatalf("seed %d: call %d split %+v whole %+v", seed, i, got.calls[i], want.calls[i])
			}
		}
	}
}
