package httpapi

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/httpapi/sdktest"
)

// toolGen is an engine that calls set_fan_speed{"level":2} whenever tools
// are offered and the last turn is not a tool result, streaming the
// arguments in two pieces; after a result it answers in prose that quotes
// the result, as a model reading it would. It records each request.
type toolGen struct {
	mu   sync.Mutex
	reqs []*llm.Request
}

func (g *toolGen) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	g.mu.Lock()
	g.reqs = append(g.reqs, req)
	g.mu.Unlock()
	last := req.Messages[len(req.Messages)-1]
	if req.HasTools() && last.Role != "tool" {
		name := "set_fan_speed"
		if req.ToolChoice.Mode == llm.ToolNamed {
			name = req.ToolChoice.Name
		}
		for _, d := range []llm.ToolDelta{{ID: "call_1", Name: name}, {Arguments: `{"level"`}, {Arguments: `:2}`}} {
			if err := emit(llm.Token{Tool: &d}); err != nil {
				return llm.Final{}, err
			}
		}
		return llm.Final{PromptTokens: 9, CompletionTokens: 3, FinishReason: llm.FinishToolCalls}, nil
	}
	text := "Done: " + last.Content
	if req.ResponseFormat.Type != llm.FormatText {
		text = `{"city":"Oslo","temp":-3}`
	}
	for _, piece := range []string{text[:4], text[4:]} {
		if err := emit(llm.Token{Text: piece}); err != nil {
			return llm.Final{}, err
		}
	}
	return llm.Final{PromptTokens: 9, CompletionTokens: 2, FinishReason: "stop"}, nil
}

func (g *toolGen) last() *llm.Request {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reqs[len(g.reqs)-1]
}

type chatToolResponse struct {
	Choices []struct {
		Message struct {
			Content   *string `json:"content"`
			ToolCalls []struct {
				ID, Type string
				Function struct{ Name, Arguments string }
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
}

type errorResponse struct {
	Error struct {
		Type, Message string
		Param         *string
	} `json:"error"`
}

const fanTool = `{"type":"function","function":{"name":"set_fan_speed","description":"fan","parameters":{"type":"object","properties":{"level":{"type":"integer"}},"required":["level"]},"strict":true}}`

func TestChatToolCallNonStream(t *testing.T) {
	gen := &toolGen{}
	url := serve(t, gen, Options{})
	body := `{"model":"auto","messages":[{"role":"user","content":"fan 2"}],"tools":[` + fanTool + `],"tool_choice":"required","parallel_tool_calls":false}`
	resp := post(t, url+"/v1/chat/completions", body, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	c := decode[chatToolResponse](t, resp.Body)
	m := c.Choices[0].Message
	if m.Content != nil || len(m.ToolCalls) != 1 || m.ToolCalls[0].ID != "call_1" || m.ToolCalls[0].Type != "function" ||
		m.ToolCalls[0].Function.Name != "set_fan_speed" || m.ToolCalls[0].Function.Arguments != `{"level":2}` || c.Choices[0].FinishReason != "tool_calls" {
		t.Fatalf("response %+v", c)
	}
	req := gen.last()
	if len(req.Tools) != 1 || req.Tools[0].Name != "set_fan_speed" || !req.Tools[0].Strict || req.ToolChoice != (llm.ToolChoice{Mode: llm.ToolRequired, Single: true}) ||
		!json.Valid(req.Tools[0].Parameters) {
		t.Fatalf("decoded %+v", req.ToolRequest)
	}
}

func TestChatToolCallStream(t *testing.T) {
	url := serve(t, &toolGen{}, Options{})
	body := `{"model":"auto","stream":true,"messages":[{"role":"user","content":"fan 2"}],"tools":[` + fanTool + `]}`
	resp := post(t, url+"/v1/chat/completions", body, nil)
	evs := readAllEvents(t, resp.Body)
	var got []string
	for _, ev := range evs {
		got = append(got, ev.data)
	}
	joined := strings.Join(got, "\n")
	for _, want := range []string{
		`"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"set_fan_speed","arguments":""}}]}`,
		`"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"level\""}}]}`,
		`"delta":{"tool_calls":[{"index":0,"function":{"arguments":":2}"}}]}`,
		`"finish_reason":"tool_calls"`,
		`[DONE]`,
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("stream lacks %s:\n%s", want, joined)
		}
	}
}

func TestChatToolHistoryAndFormatsDecoded(t *testing.T) {
	gen := &toolGen{}
	url := serve(t, gen, Options{})
	body := `{"model":"auto","messages":[{"role":"user","content":"fan 2"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"set_fan_speed","arguments":"{\"level\":2}"}}]},
		{"role":"tool","tool_call_id":"call_1","content":"fan at 2"}],
		"tools":[` + fanTool + `],"tool_choice":{"type":"function","function":{"name":"set_fan_speed"}},
		"response_format":{"type":"json_schema","json_schema":{"name":"w","schema":{"type":"object"},"strict":true}}}`
	resp := post(t, url+"/v1/chat/completions", body, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	req := gen.last()
	if len(req.Messages) != 3 || req.Messages[1].ToolCalls[0] != (llm.ToolCall{ID: "call_1", Name: "set_fan_speed", Arguments: `{"level":2}`}) ||
		req.Messages[2].Role != "tool" || req.Messages[2].ToolCallID != "call_1" || req.Messages[2].Content != "fan at 2" {
		t.Fatalf("history %+v", req.Messages)
	}
	if req.ToolChoice.Mode != llm.ToolNamed || req.ToolChoice.Name != "set_fan_speed" || req.ResponseFormat.Type != llm.FormatJSONSchema ||
		req.ResponseFormat.Name != "w" || !req.ResponseFormat.Strict || string(req.ResponseFormat.Schema) != `{"type":"object"}` {
		t.Fatalf("decoded %+v", req.ToolRequest)
	}
}

func TestToolRequestsRefused(t *testing.T) {
	url := serve(t, &toolGen{}, Options{})
	msgs := `"messages":[{"role":"user","content":"x"}]`
	for _, tc := range []struct{ path, body, param string }{
		{"/v1/chat/completions", `{` + msgs + `,"tools":[{"type":"web_search"}]}`, "tools"},
		{"/v1/chat/completions", `{` + msgs + `,"tools":[{"type":"function","function":{"name":"bad name"}}]}`, "tools"},
		{"/v1/chat/completions", `{` + msgs + `,"tools":[` + fanTool + `,` + fanTool + `]}`, "tools"},
		{"/v1/chat/completions", `{` + msgs + `,"tool_choice":"required"}`, "tool_choice"},
		{"/v1/chat/completions", `{` + msgs + `,"tools":[` + fanTool + `],"tool_choice":{"type":"function","function":{"name":"other"}}}`, "tool_choice"},
		{"/v1/chat/completions", `{` + msgs + `,"tools":[` + fanTool + `],"tool_choice":"sometimes"}`, "tool_choice"},
		{"/v1/chat/completions", `{` + msgs + `,"response_format":{"type":"json_schema"}}`, "response_format"},
		{"/v1/chat/completions", `{` + msgs + `,"response_format":{"type":"yaml"}}`, "response_format"},
		{"/v1/chat/completions", `{"messages":[{"role":"tool","content":"x"}]}`, "messages"},
		{"/v1/messages", `{"model":"auto","max_tokens":5,` + msgs + `,"tools":[{"name":"f"}]}`, "tools"},
		{"/v1/messages", `{"model":"auto","max_tokens":5,` + msgs + `,"tools":[{"type":"bash_20250124","name":"bash"}]}`, "tools"},
		{"/v1/messages", `{"model":"auto","max_tokens":5,` + msgs + `,"tool_choice":{"type":"any"}}`, "tool_choice"},
		{"/v1/messages", `{"model":"auto","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","content":"x"}]}]}`, "messages"},
		{"/v1/messages", `{"model":"auto","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_use","id":"a","name":"f","input":{}}]}]}`, "messages"},
	} {
		resp := post(t, url+tc.path, tc.body, map[string]string{"anthropic-version": "2023-06-01"})
		e := decode[errorResponse](t, resp.Body)
		if resp.StatusCode != 400 || e.Error.Type != "invalid_request_error" {
			t.Errorf("%s: status %d %+v", tc.body, resp.StatusCode, e)
		}
		if tc.path == "/v1/chat/completions" && (e.Error.Param == nil || *e.Error.Param != tc.param) {
			t.Errorf("%s: param %v, want %s", tc.body, e.Error.Param, tc.param)
		}
	}
}

const antFanTool = `{"name":"set_fan_speed","description":"fan","input_schema":{"type":"object","properties":{"level":{"type":"integer"}},"required":["level"]}}`

func TestMessagesToolUse(t *testing.T) {
	gen := &toolGen{}
	url := serve(t, gen, Options{})
	hdr := map[string]string{"anthropic-version": "2023-06-01"}
	body := `{"model":"auto","max_tokens":20,"messages":[{"role":"user","content":"fan 2"}],"tools":[` + antFanTool + `],"tool_choice":{"type":"tool","name":"set_fan_speed","disable_parallel_tool_use":true}}`
	resp := post(t, url+"/v1/messages", body, hdr)
	m := decode[map[string]any](t, resp.Body)
	content, _ := m["content"].([]any)
	if resp.StatusCode != 200 || m["stop_reason"] != "tool_use" || len(content) != 1 {
		t.Fatalf("status %d message %v", resp.StatusCode, m)
	}
	b, _ := json.Marshal(content[0])
	if string(b) != `{"id":"call_1","input":{"level":2},"name":"set_fan_speed","type":"tool_use"}` {
		t.Fatalf("block %s", b)
	}
	if req := gen.last(); req.ToolChoice != (llm.ToolChoice{Mode: llm.ToolNamed, Name: "set_fan_speed", Single: true}) || !req.Tools[0].Strict {
		t.Fatalf("decoded %+v", req.ToolRequest)
	}

	resp = post(t, url+"/v1/messages", strings.Replace(body, `"max_tokens":20`, `"max_tokens":20,"stream":true`, 1), hdr)
	var names, deltas []string
	for _, ev := range readAllEvents(t, resp.Body) {
		names = append(names, ev.name)
		if ev.name == "content_block_delta" || ev.name == "content_block_start" {
			deltas = append(deltas, ev.data)
		}
	}
	if got := strings.Join(names, " "); got != "message_start content_block_start content_block_delta content_block_delta content_block_stop message_delta message_stop" {
		t.Fatalf("events %s", got)
	}
	if want := []string{
		`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"call_1","name":"set_fan_speed","input":{}}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"level\""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":":2}"}}`,
	}; strings.Join(deltas, "\n") != strings.Join(want, "\n") {
		t.Fatalf("deltas\n%s", strings.Join(deltas, "\n"))
	}

	// The result goes back as a tool_result block; the text beside it follows it.
	body = `{"model":"auto","max_tokens":20,"tools":[` + antFanTool + `],"messages":[{"role":"user","content":"fan 2"},
		{"role":"assistant","content":[{"type":"text","text":"Sure."},{"type":"tool_use","id":"call_1","name":"set_fan_speed","input":{"level":2}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":[{"type":"text","text":"fan at 2"}],"is_error":false},{"type":"text","text":"thanks"}]}]}`
	resp = post(t, url+"/v1/messages", body, hdr)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	req := gen.last()
	if len(req.Messages) != 4 || req.Messages[1].Content != "Sure." || req.Messages[1].ToolCalls[0] != (llm.ToolCall{ID: "call_1", Name: "set_fan_speed", Arguments: `{"level":2}`}) ||
		req.Messages[2].Role != "tool" || req.Messages[2].ToolCallID != "call_1" || req.Messages[2].Content != "fan at 2" || req.Messages[3].Content != "thanks" {
		t.Fatalf("history %+v", req.Messages)
	}
}

// TestOfficialSDKTools runs the official SDKs' tool and structured-output
// helpers (examples/sdk-test/tools.mjs), unchanged, against the handler.
func TestOfficialSDKTools(t *testing.T) {
	dir := sdktest.Install(t)
	url := serve(t, &toolGen{}, Options{})
	results := map[string]string{}
	for _, r := range sdktest.Run[map[string]any](t, dir, "tools.mjs", url) {
		check, _ := r["check"].(string)
		delete(r, "check")
		b, _ := json.Marshal(r)
		results[check] = string(b)
	}
	for check, want := range map[string]string{
		"openai.runTools":           `{"calls":[{"level":2}],"final":"Done: fan at 2","turns":4}`,
		"openai.runTools.stream":    `{"calls":[{"level":2}],"final":"Done: fan at 2"}`,
		"openai.stream.tools":       `{"arguments":"{\"level\":2}","finish":"tool_calls","name":"set_fan_speed","parsed":{"level":2}}`,
		"openai.parse":              `{"parsed":{"city":"Oslo","temp":-3}}`,
		"anthropic.tool_use":        `{"id":"call_1","input":{"level":2},"name":"set_fan_speed","stop":"tool_use"}`,
		"anthropic.stream.tool_use": `{"input":{"level":2},"name":"set_fan_speed","partial":["{\"level\"",":2}"],"stop":"tool_use"}`,
		"anthropic.toolRunner":      `{"calls":[{"level":2}],"text":"Done: fan at 2"}`,
	} {
		if got := results[check]; got != want {
			t.Errorf("%s:\n got %s\nwant %s", check, got, want)
		}
	}
}

// TestClientPassesToolsThrough: the upstream client (what remote
// OpenAI-compatible workers use) sends tools, tool_choice, the history's
// calls and results and the response format in OpenAI's shape, and turns
// the server's streamed tool_calls back into ToolDelta events. The server
// is this package's handler, so the round trip must give back the request.
func TestClientPassesToolsThrough(t *testing.T) {
	gen := &toolGen{}
	c := newClient(t, ClientConfig{URL: serve(t, gen, Options{})})
	tr := llm.ToolRequest{
		Tools:      []llm.Tool{{Name: "set_fan_speed", Description: "fan", Parameters: json.RawMessage(`{"type":"object"}`), Strict: true}},
		ToolChoice: llm.ToolChoice{Mode: llm.ToolNamed, Name: "set_fan_speed", Single: true},
	}
	req := &llm.Request{Model: "auto", MaxTokens: 8, ToolRequest: tr, Messages: []llm.Message{
		{Role: "user", Content: "fan 1"},
		{Role: "assistant", ToolTurn: llm.ToolTurn{ToolCalls: []llm.ToolCall{{ID: "c0", Name: "set_fan_speed", Arguments: `{"level":1}`}}}},
		{Role: "tool", Content: "fan at 1", ToolTurn: llm.ToolTurn{ToolCallID: "c0"}},
		{Role: "user", Content: "now 2"},
	}}
	var calls toolCollector
	fin, err := c.Generate(context.Background(), req, func(tk llm.Token) error {
		if tk.Tool != nil {
			calls.add(tk.Tool)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fin.FinishReason != llm.FinishToolCalls || len(calls.calls) != 1 || calls.calls[0] != (llm.ToolCall{ID: "call_1", Name: "set_fan_speed", Arguments: `{"level":2}`}) {
		t.Fatalf("final %+v calls %+v", fin, calls.calls)
	}
	got := gen.last()
	if !reflect.DeepEqual(got.ToolRequest, tr) || !reflect.DeepEqual(got.Messages, req.Messages) {
		t.Fatalf("server saw\n%+v\n%+v", got.ToolRequest, got.Messages)
	}

	rf := llm.ResponseFormat{Type: llm.FormatJSONSchema, Name: "weather", Schema: json.RawMessage(`{"type":"object"}`), Strict: true}
	req = &llm.Request{Model: "auto", MaxTokens: 8, Messages: []llm.Message{{Role: "user", Content: "weather"}}, ToolRequest: llm.ToolRequest{ResponseFormat: rf}}
	if _, err := c.Generate(context.Background(), req, func(llm.Token) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := gen.last(); !reflect.DeepEqual(got.ResponseFormat, rf) || len(got.Tools) != 0 || got.ToolChoice != (llm.ToolChoice{}) {
		t.Fatalf("server saw %+v", got.ToolRequest)
	}
}

// TestClientSaysToolFailed: OpenAI's tool message has no error flag, so a
// failed result (Anthropic is_error, llm.Message.ToolError) reaches an
// OpenAI-compatible worker with the failure in its text.
func TestClientSaysToolFailed(t *testing.T) {
	gen := &toolGen{}
	c := newClient(t, ClientConfig{URL: serve(t, gen, Options{})})
	req := &llm.Request{Model: "auto", MaxTokens: 8, Messages: []llm.Message{
		{Role: "user", Content: "open the window"},
		{Role: "assistant", ToolTurn: llm.ToolTurn{ToolCalls: []llm.ToolCall{{ID: "c0", Name: "set_fan_speed", Arguments: `{"level":1}`}}}},
		{Role: "tool", Content: "fan broken", ToolTurn: llm.ToolTurn{ToolCallID: "c0", ToolError: true}},
	}}
	if _, err := c.Generate(context.Background(), req, func(llm.Token) error { return nil }); err != nil {
		t.Fatal(err)
	}
	got := gen.last().Messages[2]
	if got.Role != "tool" || got.ToolCallID != "c0" || got.Content != llm.ToolFailed+"fan broken" {
		t.Fatalf("worker saw %+v", got)
	}
}
