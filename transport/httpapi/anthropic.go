package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/phaseless/phaseless/llm"
)

// MessagesRequest is the subset of Anthropic's Messages request that
// Phaseless honours.
type MessagesRequest struct {
	Model     string          `json:"model"`
	Messages  []AntMessage    `json:"messages"`
	System    json.RawMessage `json:"system"` // string or array of text blocks
	MaxTokens *int            `json:"max_tokens"`
	// MaxOutputTokens is the source articles' name for max_tokens.
	MaxOutputTokens *int            `json:"max_output_tokens"`
	Temperature     json.RawMessage `json:"temperature"`
	TopP            *float64        `json:"top_p"`
	TopK            *int            `json:"top_k"`
	StopSequences   []string        `json:"stop_sequences"`
	Stream          bool            `json:"stream"`
	Tools           json.RawMessage `json:"tools"`
	ToolChoice      json.RawMessage `json:"tool_choice"` // tools.go
}

// AntMessage is one Anthropic message; Content is a string or an array of
// content blocks of which only text blocks are supported.
type AntMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// decodeMessages decodes and validates an Anthropic Messages body.
func decodeMessages(body []byte, lim limits) (*llm.Request, bool, *apiError) {
	var mr MessagesRequest
	if err := json.Unmarshal(body, &mr); err != nil {
		return nil, false, invalid("", "request body is not a valid Messages request: %v", err)
	}
	req := &llm.Request{}
	var e *apiError
	if mr.Model == "" {
		return nil, false, invalid("model", "model: field required (use \"auto\" to let Phaseless choose)")
	}
	if req.Model, e = lim.checkModel(mr.Model); e != nil {
		return nil, false, e
	}
	maxParam := "max_tokens"
	if mr.MaxTokens == nil && mr.MaxOutputTokens != nil {
		maxParam, mr.MaxTokens = "max_output_tokens", mr.MaxOutputTokens
	}
	if mr.MaxTokens == nil {
		return nil, false, invalid("max_tokens", "max_tokens: field required")
	}
	if e := lim.checkMaxTokens(maxParam, *mr.MaxTokens); e != nil {
		return nil, false, e
	}
	req.MaxTokens = *mr.MaxTokens
	if len(mr.Messages) == 0 {
		return nil, false, invalid("messages", "messages: at least one message is required")
	}
	system, e := textContent("system", mr.System)
	if e != nil {
		return nil, false, e
	}
	req.Messages = make([]llm.Message, 0, len(mr.Messages)+1)
	if system != "" {
		req.Messages = append(req.Messages, llm.Message{Role: "system", Content: system})
	}
	for i, m := range mr.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return nil, false, invalid("messages", "messages.%d.role: %q is not one of user, assistant", i, m.Role)
		}
		turns, e := anthropicMessages(i, m.Role, m.Content)
		if e != nil {
			return nil, false, e
		}
		req.Messages = append(req.Messages, turns...)
	}
	if e := decodeAnthropicTools(&mr, req); e != nil {
		return nil, false, e
	}
	if e = parseTemperature(req, mr.Temperature); e != nil {
		return nil, false, e
	}
	if e = parseTopP(req, mr.TopP); e != nil {
		return nil, false, e
	}
	if mr.TopK == nil {
		req.Omitted |= llm.FieldTopK
	} else {
		if *mr.TopK < 0 {
			return nil, false, invalid("top_k", "top_k must not be negative")
		}
		req.TopK = *mr.TopK
	}
	for _, s := range mr.StopSequences {
		if s == "" {
			return nil, false, invalid("stop_sequences", "stop sequences must not be empty")
		}
	}
	req.Stop = mr.StopSequences
	return req, mr.Stream, nil
}

func (h *Handler) serveMessages(w http.ResponseWriter, r *http.Request, tenant string) {
	req, stream, ok := decodeRequest(h, w, r, apiAnthropic, tenant, decodeMessages)
	if !ok {
		return
	}
	msg := antMessage{ID: "msg_" + req.ID, Type: "message", Role: "assistant", Model: req.Model, Content: []any{}}
	if stream {
		h.run(w, r, apiAnthropic, req, &messagesStreamer{msg: msg})
	} else {
		h.run(w, r, apiAnthropic, req, &messagesCollector{msg: msg})
	}
}

type antMessage struct {
	ID           string   `json:"id"`
	Type         string   `json:"type"`
	Role         string   `json:"role"`
	Model        string   `json:"model"`
	Content      []any    `json:"content"` // antBlock, antToolUse
	StopReason   *string  `json:"stop_reason"`
	StopSequence *string  `json:"stop_sequence"`
	Usage        antUsage `json:"usage"`
}

type antBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// antUsage is Anthropic's usage object. As in Anthropic's API,
// input_tokens counts only the prompt tokens neither read from nor written
// to the cache (antUsageOf).
type antUsage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
	// Prompt tokens read from the cache (the engine's prefix cache,
	// llm.Final.PrefixHitTokens).
	CacheReadInputTokens int `json:"cache_read_input_tokens"`
	// Prompt tokens written into the pinned prompt cache (promptcache.go);
	// Anthropic counts them apart from input_tokens.
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
}

// anthropicStop maps the canonical finish reason to Anthropic's stop_reason.
func anthropicStop(r string) string {
	switch r {
	case "length":
		return "max_tokens"
	case llm.FinishToolCalls:
		return "tool_use"
	}
	return "end_turn"
}

type messagesCollector struct {
	msg   antMessage
	text  strings.Builder
	tools toolCollector
	gen   genLatency
}

func (c *messagesCollector) begin(http.ResponseWriter) error { return nil }
func (c *messagesCollector) token(_ http.ResponseWriter, t llm.Token) error {
	if t.Tool != nil {
		c.tools.add(t.Tool)
		return nil
	}
	c.text.WriteString(t.Text)
	c.gen.add(t)
	return nil
}
func (c *messagesCollector) end(w http.ResponseWriter, fin llm.Final) {
	c.gen.writeHeaders(w.Header(), fin)
	stop := anthropicStop(fin.FinishReason)
	c.msg.Content = nil
	if c.text.Len() > 0 || len(c.tools.calls) == 0 {
		c.msg.Content = append(c.msg.Content, antBlock{Type: "text", Text: c.text.String()})
	}
	for _, call := range c.tools.calls {
		c.msg.Content = append(c.msg.Content, antToolUse{Type: "tool_use", ID: call.ID, Name: call.Name, Input: toolInput(call.Arguments)})
	}
	c.msg.StopReason = &stop
	c.msg.Usage = antUsageOf(fin)
	writeJSON(w, http.StatusOK, c.msg)
}
func (c *messagesCollector) fail(w http.ResponseWriter, e *apiError) { e.write(w, apiAnthropic) }

// messagesStreamer writes Anthropic's event sequence: message_start and
// content_block_start once before the first token, one content_block_delta
// per token, then content_block_stop, message_delta and message_stop once.
type messagesStreamer struct {
	msg antMessage
	// open is the index of the content block being written, -1 before
	// the first; openTool says whether it is a tool_use block. Blocks open
	// lazily: a reply may start with text or with a call.
	open     int
	openTool bool
}

func (s *messagesStreamer) event(w http.ResponseWriter, name string, v any) error {
	return s.eventStats(w, name, v, nil)
}

// eventStats writes one event with a StatsField line when stats is set.
func (s *messagesStreamer) eventStats(w http.ResponseWriter, name string, v any, stats []byte) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return writeEventStats(w, name, b, stats)
}

type antTextDelta struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

func (s *messagesStreamer) begin(w http.ResponseWriter) error {
	sseHeaders(w)
	// Input tokens are counted by the engine and known only at the end; they
	// are reported in message_delta's usage, which the SDKs merge.
	s.open = -1
	return s.event(w, "message_start", struct {
		Type    string     `json:"type"`
		Message antMessage `json:"message"`
	}{"message_start", s.msg})
}

// startBlock closes the open block and opens block, a text or tool_use block.
func (s *messagesStreamer) startBlock(w http.ResponseWriter, block any, tool bool) error {
	if err := s.stopBlock(w); err != nil {
		return err
	}
	s.open++
	s.openTool = tool
	return s.event(w, "content_block_start", struct {
		Type         string `json:"type"`
		Index        int    `json:"index"`
		ContentBlock any    `json:"content_block"`
	}{"content_block_start", s.open, block})
}

func (s *messagesStreamer) stopBlock(w http.ResponseWriter) error {
	if s.open < 0 {
		return nil
	}
	return s.event(w, "content_block_stop", struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
	}{"content_block_stop", s.open})
}

type antJSONDelta struct {
	Type        string `json:"type"`
	PartialJSON string `json:"partial_json"`
}

func (s *messagesStreamer) token(w http.ResponseWriter, t llm.Token) error {
	var delta any = antTextDelta{"text_delta", t.Text}
	switch {
	case t.Tool != nil && t.Tool.Name != "":
		// A new call: its tool_use block starts with an empty input that
		// the input_json_delta events fill.
		if err := s.startBlock(w, antToolUse{Type: "tool_use", ID: t.Tool.ID, Name: t.Tool.Name, Input: json.RawMessage("{}")}, true); err != nil {
			return err
		}
		if t.Tool.Arguments == "" {
			return nil
		}
		delta = antJSONDelta{"input_json_delta", t.Tool.Arguments}
	case t.Tool != nil:
		delta = antJSONDelta{"input_json_delta", t.Tool.Arguments}
	case s.open < 0 || s.openTool:
		if err := s.startBlock(w, antBlock{Type: "text"}, false); err != nil {
			return err
		}
	}
	return s.eventStats(w, "content_block_delta", struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
		Delta any    `json:"delta"`
	}{"content_block_delta", s.open, delta}, tokenStats(t))
}

func (s *messagesStreamer) end(w http.ResponseWriter, fin llm.Final) {
	if s.open < 0 { // no token at all: an empty text block, as Anthropic sends
		if s.startBlock(w, antBlock{Type: "text"}, false) != nil {
			return
		}
	}
	if s.stopBlock(w) != nil {
		return
	}
	stop := anthropicStop(fin.FinishReason)
	if s.event(w, "message_delta", struct {
		Type  string `json:"type"`
		Delta struct {
			StopReason   *string `json:"stop_reason"`
			StopSequence *string `json:"stop_sequence"`
		} `json:"delta"`
		Usage antUsage `json:"usage"`
	}{Type: "message_delta", Delta: struct {
		StopReason   *string `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	}{StopReason: &stop}, Usage: antUsageOf(fin)}) != nil {
		return
	}
	s.eventStats(w, "message_stop", struct {
		Type string `json:"type"`
	}{"message_stop"}, endStats(fin))
}

// fail ends the stream with Anthropic's error event, which the official SDK
// raises as an APIError.
func (s *messagesStreamer) fail(w http.ResponseWriter, e *apiError) {
	writeEvent(w, "error", e.body(apiAnthropic))
}
