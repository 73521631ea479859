package httpapi

import (
	"encoding/json"
	"regexp"
	"strings"

	"github.com/phaseless/phaseless/llm"
)

// Tool calling and structured output for both APIs: decoding the requests'
// tools, tool_choice and response_format into llm.ToolRequest, the
// histories' calls and results into llm.ToolTurn, and the responses' call
// shapes. openai.go and anthropic.go call in here.

// toolNameRE is OpenAI's rule for function names, which Anthropic shares.
var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// maxTools bounds the tools of one request (OpenAI's limit).
const maxTools = 128

func present(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null"
}

// checkTools validates names, uniqueness and the parameter schemas' shape
// (a JSON object); whether the engine can enforce a schema is the
// engine's question, answered as a 400 before any token.
func checkTools(param string, tools []llm.Tool) *apiError {
	if len(tools) > maxTools {
		return invalid(param, "at most %d tools", maxTools)
	}
	seen := map[string]bool{}
	for i, t := range tools {
		if !toolNameRE.MatchString(t.Name) {
			return invalid(param, "%s[%d].name %q must be 1 to 64 letters, digits, underscores or dashes", param, i, t.Name)
		}
		if seen[t.Name] {
			return invalid(param, "%s: tool %q is listed twice", param, t.Name)
		}
		seen[t.Name] = true
		if present(t.Parameters) && !isObject(t.Parameters) {
			return invalid(param, "%s[%d]: the parameters schema must be a JSON object", param, i)
		}
	}
	return nil
}

func isObject(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(raw, &m) == nil && m != nil
}

// checkChoice validates a tool choice against the tools.
func checkChoice(param string, tr *llm.ToolRequest) *apiError {
	c := tr.ToolChoice
	switch {
	case (c.Mode == llm.ToolRequired || c.Mode == llm.ToolNamed) && len(tr.Tools) == 0:
		return invalid(param, "%s %s needs tools", param, c.Mode)
	case c.Mode == llm.ToolNamed:
		for _, t := range tr.Tools {
			if t.Name == c.Name {
				return nil
			}
		}
		return invalid(param, "%s names %q, which is not among the tools", param, c.Name)
	}
	return nil
}

// --- OpenAI ---

type oaiTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      *bool           `json:"strict"`
	} `json:"function"`
	// CacheControl is sent upstream only (promptCache reads a request's
	// own from the raw body).
	CacheControl *cacheControl `json:"cache_control,omitempty"`
}

type oaiToolCall struct {
	Index    *int   `json:"index,omitempty"` // streamed deltas only
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type oaiResponseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict *bool           `json:"strict"`
	} `json:"json_schema"`
}

// decodeOpenAITools fills req's ToolRequest from a chat request.
func decodeOpenAITools(cr *ChatRequest, req *llm.Request) *apiError {
	if present(cr.Tools) {
		var tools []oaiTool
		if err := json.Unmarshal(cr.Tools, &tools); err != nil {
			return invalid("tools", "tools must be an array of function tools: %v", err)
		}
		for i, t := range tools {
			if t.Type != "function" {
				return invalid("tools", "tools[%d].type %q is not supported (function)", i, t.Type)
			}
			req.Tools = append(req.Tools, llm.Tool{Name: t.Function.Name, Description: t.Function.Description,
				Parameters: t.Function.Parameters, Strict: t.Function.Strict != nil && *t.Function.Strict})
		}
		if e := checkTools("tools", req.Tools); e != nil {
			return e
		}
	}
	if present(cr.ToolChoice) {
		var mode string
		if json.Unmarshal(cr.ToolChoice, &mode) == nil {
			switch mode {
			case "auto":
			case "none":
				req.ToolChoice.Mode = llm.ToolNone
			case "required":
				req.ToolChoice.Mode = llm.ToolRequired
			default:
				return invalid("tool_choice", "tool_choice %q is not one of auto, none, required", mode)
			}
		} else {
			var named struct {
				Type     string `json:"type"`
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			}
			if err := json.Unmarshal(cr.ToolChoice, &named); err != nil || named.Type != "function" {
				return invalid("tool_choice", `tool_choice must be "auto", "none", "required" or {"type":"function","function":{"name":...}}`)
			}
			req.ToolChoice = llm.ToolChoice{Mode: llm.ToolNamed, Name: named.Function.Name}
		}
	}
	if cr.ParallelToolCalls != nil && !*cr.ParallelToolCalls {
		req.ToolChoice.Single = true
	}
	if e := checkChoice("tool_choice", &req.ToolRequest); e != nil {
		return e
	}
	if !present(cr.ResponseFormat) {
		return nil
	}
	var rf oaiResponseFormat
	if err := json.Unmarshal(cr.ResponseFormat, &rf); err != nil {
		return invalid("response_format", "response_format: %v", err)
	}
	switch rf.Type {
	case "text":
	case "json_object":
		req.ResponseFormat.Type = llm.FormatJSONObject
	case "json_schema":
		if rf.JSONSchema == nil || !isObject(rf.JSONSchema.Schema) {
			return invalid("response_format", "response_format json_schema needs json_schema.schema, a JSON object")
		}
		req.ResponseFormat = llm.ResponseFormat{Type: llm.FormatJSONSchema, Name: rf.JSONSchema.Name, Schema: rf.JSONSchema.Schema,
			Strict: rf.JSONSchema.Strict != nil && *rf.JSONSchema.Strict}
	default:
		return invalid("response_format", "response_format type %q is not one of text, json_object, json_schema", rf.Type)
	}
	return nil
}

// openAIToolTurn decodes a history message's tool fields.
func openAIToolTurn(i int, m *ChatMessage, out *llm.Message) *apiError {
	switch m.Role {
	case "assistant":
		for _, c := range m.ToolCalls {
			if c.Type != "" && c.Type != "function" {
				return invalid("messages", "messages[%d].tool_calls: type %q is not supported", i, c.Type)
			}
			out.ToolCalls = append(out.ToolCalls, llm.ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments})
		}
	case "tool":
		if m.ToolCallID == "" {
			return invalid("messages", "messages[%d]: a tool message needs tool_call_id", i)
		}
		out.ToolCallID = m.ToolCallID
	}
	return nil
}

// toolCollector gathers a reply's calls from the stream's ToolDelta events.
type toolCollector struct {
	calls []llm.ToolCall
}

func (c *toolCollector) add(d *llm.ToolDelta) {
	for d.Index >= len(c.calls) {
		c.calls = append(c.calls, llm.ToolCall{})
	}
	call := &c.calls[d.Index]
	if d.ID != "" {
		call.ID = d.ID
	}
	if d.Name != "" {
		call.Name = d.Name
	}
	call.Arguments += d.Arguments
}

func (c *toolCollector) openAI() []oaiToolCall { return upToolCalls(c.calls) }

// openAIToolDelta is one streamed tool_calls delta.
func openAIToolDelta(d *llm.ToolDelta) []oaiToolCall {
	idx := d.Index
	c := oaiToolCall{Index: &idx, ID: d.ID}
	if d.Name != "" {
		c.Type = "function"
	}
	c.Function.Name, c.Function.Arguments = d.Name, d.Arguments
	return []oaiToolCall{c}
}

// --- Anthropic ---

type antTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

func decodeAnthropicTools(mr *MessagesRequest, req *llm.Request) *apiError {
	if present(mr.Tools) {
		var tools []antTool
		if err := json.Unmarshal(mr.Tools, &tools); err != nil {
			return invalid("tools", "tools: %v", err)
		}
		for i, t := range tools {
			if t.Type != "" && t.Type != "custom" {
				return invalid("tools", "tools.%d.type %q is not supported (only client tools with an input_schema)", i, t.Type)
			}
			if !isObject(t.InputSchema) {
				return invalid("tools", "tools.%d.input_schema: field required (a JSON schema object)", i)
			}
			req.Tools = append(req.Tools, llm.Tool{Name: t.Name, Description: t.Description, Parameters: t.InputSchema, Strict: true})
		}
		if e := checkTools("tools", req.Tools); e != nil {
			return e
		}
	}
	if present(mr.ToolChoice) {
		var tc struct {
			Type                   string `json:"type"`
			Name                   string `json:"name"`
			DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
		}
		if err := json.Unmarshal(mr.ToolChoice, &tc); err != nil {
			return invalid("tool_choice", "tool_choice: %v", err)
		}
		switch tc.Type {
		case "auto":
		case "none":
			req.ToolChoice.Mode = llm.ToolNone
		case "any":
			req.ToolChoice.Mode = llm.ToolRequired
		case "tool":
			req.ToolChoice = llm.ToolChoice{Mode: llm.ToolNamed, Name: tc.Name}
		default:
			return invalid("tool_choice", "tool_choice.type %q is not one of auto, any, tool, none", tc.Type)
		}
		req.ToolChoice.Single = tc.DisableParallelToolUse
	}
	return checkChoice("tool_choice", &req.ToolRequest)
}

// antInBlock is a content block of an Anthropic request message.
type antInBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

// anthropicMessages decodes one request message into history turns: text
// and tool_use blocks make one turn; each tool_result block of a user
// message becomes a "tool" turn ahead of the user's own text.
func anthropicMessages(i int, role string, raw json.RawMessage) ([]llm.Message, *apiError) {
	s := strings.TrimSpace(string(raw))
	if s == "" || s[0] != '[' {
		text, e := textContent("messages.content", raw)
		if e != nil {
			return nil, e
		}
		return []llm.Message{{Role: role, Content: text}}, nil
	}
	var blocks []antInBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, invalid("messages", "messages.%d.content: %v", i, err)
	}
	var out []llm.Message
	turn := llm.Message{Role: role}
	var text strings.Builder
	for j, b := range blocks {
		switch {
		case b.Type == "text":
			text.WriteString(b.Text)
		case b.Type == "tool_use" && role == "assistant":
			args := "{}"
			if present(b.Input) {
				args = string(b.Input)
			}
			turn.ToolCalls = append(turn.ToolCalls, llm.ToolCall{ID: b.ID, Name: b.Name, Arguments: args})
		case b.Type == "tool_result" && role == "user":
			if b.ToolUseID == "" {
				return nil, invalid("messages", "messages.%d.content.%d.tool_use_id: field required", i, j)
			}
			result, e := textContent("messages.content", b.Content)
			if e != nil {
				return nil, e
			}
			out = append(out, llm.Message{Role: "tool", Content: result, ToolTurn: llm.ToolTurn{ToolCallID: b.ToolUseID, ToolError: b.IsError}})
		default:
			return nil, invalid("messages", "messages.%d.content.%d: block type %q is not supported in a %s message", i, j, b.Type, role)
		}
	}
	turn.Content = text.String()
	if turn.Content != "" || len(turn.ToolCalls) > 0 || len(out) == 0 {
		out = append(out, turn)
	}
	return out, nil
}

// antToolUse is a tool_use block of a response.
type antToolUse struct {
	Type  string          `json:"type"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// toolInput is a call's arguments as the input object Anthropic clients
// expect; arguments that are not a JSON object (a remote engine's
// malformed call) become an empty one rather than a broken response.
func toolInput(args string) json.RawMessage {
	if isObject(json.RawMessage(args)) {
		return json.RawMessage(args)
	}
	return json.RawMessage("{}")
}

// --- upstream (Client, to OpenAI-compatible engines) ---

// upToolFields are the tool and format fields of an upstream request, as
// vLLM, SGLang and llama.cpp's server take them (OpenAI's shape): the
// schemas pass through unchanged, so the engine's own guided decoding
// constrains the output.
type upToolFields struct {
	Tools             []oaiTool          `json:"tools,omitempty"`
	ToolChoice        any                `json:"tool_choice,omitempty"`
	ParallelToolCalls *bool              `json:"parallel_tool_calls,omitempty"`
	ResponseFormat    *oaiResponseFormat `json:"response_format,omitempty"`
}

func upTools(tr *llm.ToolRequest) upToolFields {
	var f upToolFields
	for _, t := range tr.Tools {
		var ot oaiTool
		ot.Type = "function"
		ot.Function.Name, ot.Function.Description, ot.Function.Parameters = t.Name, t.Description, t.Parameters
		if t.Strict {
			strict := true
			ot.Function.Strict = &strict
		}
		f.Tools = append(f.Tools, ot)
	}
	switch tr.ToolChoice.Mode {
	case llm.ToolNone:
		f.ToolChoice = "none"
	case llm.ToolRequired:
		f.ToolChoice = "required"
	case llm.ToolNamed:
		f.ToolChoice = map[string]any{"type": "function", "function": map[string]string{"name": tr.ToolChoice.Name}}
	}
	if len(f.Tools) == 0 {
		f.ToolChoice = nil // servers refuse a choice without tools
	}
	if tr.ToolChoice.Single && len(f.Tools) > 0 {
		no := false
		f.ParallelToolCalls = &no
	}
	switch rf := &tr.ResponseFormat; rf.Type {
	case llm.FormatJSONObject:
		f.ResponseFormat = &oaiResponseFormat{Type: "json_object"}
	case llm.FormatJSONSchema:
		f.ResponseFormat = &oaiResponseFormat{Type: "json_schema"}
		strict := rf.Strict
		name := rf.Name
		if name == "" {
			name = "response" // OpenAI requires one
		}
		f.ResponseFormat.JSONSchema = &struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict *bool           `json:"strict"`
		}{name, rf.Schema, &strict}
	}
	return f
}

func upToolCalls(calls []llm.ToolCall) []oaiToolCall {
	if len(calls) == 0 {
		return nil
	}
	out := make([]oaiToolCall, len(calls))
	for i, c := range calls {
		out[i].ID, out[i].Type = c.ID, "function"
		out[i].Function.Name, out[i].Function.Arguments = c.Name, c.Arguments
	}
	return out
}

// toolDeltaFromUp is an upstream streamed tool_calls entry as a ToolDelta.
// Servers that omit the index (one call) get 0.
func toolDeltaFromUp(tc oaiToolCall) *llm.ToolDelta {
	d := &llm.ToolDelta{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments}
	if tc.Index != nil && *tc.Index >= 0 && *tc.Index < maxTools {
		d.Index = *tc.Index
	}
	return d
}
