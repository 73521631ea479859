package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/phaseless/phaseless/llm"
)

// ChatRequest is the subset of OpenAI's chat completions request that
// Phaseless honours. Unknown fields are ignored, as the official API does for
// fields a model does not use, so SDK upgrades keep working.
type ChatRequest struct {
	Model               string        `json:"model"`
	Messages            []ChatMessage `json:"messages"`
	MaxTokens           *int          `json:"max_tokens"`
	MaxCompletionTokens *int          `json:"max_completion_tokens"`
	MaxOutputTokens     *int          `json:"max_output_tokens"` // the source articles' (and Responses API's) name
	oaiSampling
	Tools json.RawMessage `json:"tools"`

	// Tool calling and structured output (tools.go).
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`
	ResponseFormat    json.RawMessage `json:"response_format"`
}

// ChatMessage is one OpenAI message; Content is a string or an array of
// content parts of which only text parts are supported.
type ChatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`

	ToolCalls  []oaiToolCall `json:"tool_calls"`   // assistant
	ToolCallID string        `json:"tool_call_id"` // tool
}

type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// textContent decodes a string or an array of {"type":"text"} parts.
func textContent(param string, raw json.RawMessage) (string, *apiError) {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return "", nil
	}
	if s[0] == '"' {
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return "", invalid(param, "%s: %v", param, err)
		}
		return text, nil
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", invalid(param, "%s must be a string or an array of text parts", param)
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return "", invalid(param, "%s: content part type %q is not supported (text only)", param, p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

type chatStream struct {
	stream, includeUsage bool
}

// decodeChat decodes and validates an OpenAI chat completions body.
func decodeChat(body []byte, lim limits) (*llm.Request, chatStream, *apiError) {
	var cr ChatRequest
	if err := json.Unmarshal(body, &cr); err != nil {
		return nil, chatStream{}, invalid("", "request body is not a valid chat completions request: %v", err)
	}
	req := &llm.Request{}
	var e *apiError
	if req.Model, e = lim.checkModel(cr.Model); e != nil {
		return nil, chatStream{}, e
	}
	if len(cr.Messages) == 0 {
		return nil, chatStream{}, invalid("messages", "messages must contain at least one message")
	}
	req.Messages = make([]llm.Message, 0, len(cr.Messages))
	for i, m := range cr.Messages {
		role := m.Role
		switch role {
		case "developer":
			role = "system" // OpenAI's newer name for the system turn
		case "system", "user", "assistant", "tool":
		default:
			return nil, chatStream{}, invalid("messages", "messages[%d].role %q is not supported (system, developer, user, assistant, tool)", i, m.Role)
		}
		text, e := textContent("messages.content", m.Content)
		if e != nil {
			return nil, chatStream{}, e
		}
		msg := llm.Message{Role: role, Content: text}
		if e := openAIToolTurn(i, &m, &msg); e != nil {
			return nil, chatStream{}, e
		}
		req.Messages = append(req.Messages, msg)
	}
	if e := decodeOpenAITools(&cr, req); e != nil {
		return nil, chatStream{}, e
	}
	switch {
	case cr.MaxCompletionTokens != nil:
		if e := lim.checkMaxTokens("max_completion_tokens", *cr.MaxCompletionTokens); e != nil {
			return nil, chatStream{}, e
		}
		req.MaxTokens = *cr.MaxCompletionTokens
	case cr.MaxTokens != nil:
		if e := lim.checkMaxTokens("max_tokens", *cr.MaxTokens); e != nil {
			return nil, chatStream{}, e
		}
		req.MaxTokens = *cr.MaxTokens
	case cr.MaxOutputTokens != nil:
		if e := lim.checkMaxTokens("max_output_tokens", *cr.MaxOutputTokens); e != nil {
			return nil, chatStream{}, e
		}
		req.MaxTokens = *cr.MaxOutputTokens
	default:
		req.MaxTokens = lim.defaultTokens
	}
	cs, e := cr.decode(req)
	if e != nil {
		return nil, chatStream{}, e
	}
	return req, cs, nil
}

// maxStops matches OpenAI's limit on stop sequences.
const maxStops = 4

func decodeStop(raw json.RawMessage) ([]string, *apiError) {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return nil, nil
	}
	var stops []string
	if s[0] == '"' {
		var one string
		if err := json.Unmarshal(raw, &one); err != nil {
			return nil, invalid("stop", "stop: %v", err)
		}
		stops = []string{one}
	} else if err := json.Unmarshal(raw, &stops); err != nil {
		return nil, invalid("stop", "stop must be a string or an array of strings")
	}
	if len(stops) > maxStops {
		return nil, invalid("stop", "at most %d stop sequences", maxStops)
	}
	for _, st := range stops {
		if st == "" {
			return nil, invalid("stop", "stop sequences must not be empty")
		}
	}
	return stops, nil
}

func (h *Handler) serveChat(w http.ResponseWriter, r *http.Request, tenant string) {
	req, cs, ok := decodeRequest(h, w, r, apiOpenAI, tenant, decodeChat)
	if !ok {
		return
	}
	base := chatBase{ID: "chatcmpl-" + req.ID, Created: h.opts.Now().Unix(), Model: req.Model}
	if cs.stream {
		h.run(w, r, apiOpenAI, req, &chatStreamer{base: base, includeUsage: cs.includeUsage})
	} else {
		h.run(w, r, apiOpenAI, req, &chatCollector{base: base})
	}
}

type chatBase struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
}

// ChatUsage is OpenAI's usage object. PromptTokensDetails.CachedTokens is
// how many prompt tokens came from a cached prefix, as OpenAI reports
// prompt caching.
type ChatUsage struct {
	PromptTokens        int                 `json:"prompt_tokens"`
	CompletionTokens    int                 `json:"completion_tokens"`
	TotalTokens         int                 `json:"total_tokens"`
	PromptTokensDetails PromptTokensDetails `json:"prompt_tokens_details"`
}

// PromptTokensDetails is OpenAI's usage.prompt_tokens_details.
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

func chatUsage(fin llm.Final) *ChatUsage {
	return &ChatUsage{fin.PromptTokens, fin.CompletionTokens, fin.PromptTokens + fin.CompletionTokens,
		PromptTokensDetails{CachedTokens: fin.PrefixHitTokens}}
}

// openAIFinish maps the canonical finish reason to OpenAI's.
func openAIFinish(r string) string {
	if r == "length" || r == llm.FinishToolCalls {
		return r
	}
	return "stop"
}

type chatCompletion struct {
	chatBase
	Choices []chatChoice `json:"choices"`
	Usage   *ChatUsage   `json:"usage"`
}

type chatChoice struct {
	Index        int             `json:"index"`
	Message      chatOutMessage  `json:"message"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
}

type chatOutMessage struct {
	Role      string        `json:"role"`
	Content   *string       `json:"content"` // null when the reply is only tool calls
	ToolCalls []oaiToolCall `json:"tool_calls,omitempty"`
}

// chatCollector answers a non-streaming request once generation ended.
type chatCollector struct {
	base  chatBase
	text  strings.Builder
	tools toolCollector
	gen   genLatency
}

func (c *chatCollector) begin(http.ResponseWriter) error { return nil }
func (c *chatCollector) token(_ http.ResponseWriter, t llm.Token) error {
	if t.Tool != nil {
		c.tools.add(t.Tool)
		return nil
	}
	c.text.WriteString(t.Text)
	c.gen.add(t)
	return nil
}
func (c *chatCollector) end(w http.ResponseWriter, fin llm.Final) {
	c.gen.writeHeaders(w.Header(), fin)
	c.base.Object = "chat.completion"
	writeJSON(w, http.StatusOK, chatCompletion{
		chatBase: c.base,
		Choices: []chatChoice{{
			Message: c.message(), Logprobs: json.RawMessage("null"),
			FinishReason: openAIFinish(fin.FinishReason),
		}},
		Usage: chatUsage(fin),
	})
}

func (c *chatCollector) message() chatOutMessage {
	m := chatOutMessage{Role: "assistant", ToolCalls: c.tools.openAI()}
	if text := c.text.String(); text != "" || m.ToolCalls == nil {
		m.Content = &text
	}
	return m
}

// fail is unreachable for the collector (begin wrote nothing, so run sends
// a plain error response) but keeps the responder contract whole.
func (c *chatCollector) fail(w http.ResponseWriter, e *apiError) { e.write(w, apiOpenAI) }

type chatChunk struct {
	chatBase
	Choices []chunkChoice `json:"choices"`
	Usage   *ChatUsage    `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int        `json:"index"`
	Delta        chunkDelta `json:"delta"`
	Logprobs     *struct{}  `json:"logprobs"`
	FinishReason *string    `json:"finish_reason"`
}

type chunkDelta struct {
	Role      string        `json:"role,omitempty"`
	Content   *string       `json:"content,omitempty"`
	ToolCalls []oaiToolCall `json:"tool_calls,omitempty"`
}

// chatStreamer writes OpenAI SSE chunks, one per token.
type chatStreamer struct {
	base         chatBase
	includeUsage bool
	first        bool // the next chunk is the first one (carries the role)
}

// chunk writes c, with a StatsField line when stats is set.
func (s *chatStreamer) chunk(w http.ResponseWriter, c chatChunk, stats []byte) error {
	c.chatBase = s.base
	c.Object = "chat.completion.chunk"
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return writeEventStats(w, "", b, stats)
}

func (s *chatStreamer) begin(w http.ResponseWriter) error {
	sseHeaders(w)
	s.first = true
	return nil
}

func (s *chatStreamer) token(w http.ResponseWriter, t llm.Token) error {
	d := chunkDelta{Content: &t.Text}
	if t.Tool != nil {
		d = chunkDelta{ToolCalls: openAIToolDelta(t.Tool)}
	}
	if s.first {
		d.Role, s.first = "assistant", false
	}
	return s.chunk(w, chatChunk{Choices: []chunkChoice{{Delta: d}}}, tokenStats(t))
}

func (s *chatStreamer) end(w http.ResponseWriter, fin llm.Final) {
	d := chunkDelta{}
	if s.first {
		empty := ""
		d = chunkDelta{Role: "assistant", Content: &empty}
	}
	reason := openAIFinish(fin.FinishReason)
	if s.chunk(w, chatChunk{Choices: []chunkChoice{{Delta: d, FinishReason: &reason}}}, nil) != nil {
		return
	}
	if s.includeUsage {
		if s.chunk(w, chatChunk{Choices: []chunkChoice{}, Usage: chatUsage(fin)}, nil) != nil {
			return
		}
	}
	writeEventStats(w, "", []byte("[DONE]"), endStats(fin))
}

// fail ends the stream with OpenAI's in-stream error object and no [DONE],
// which the official SDKs raise as an APIError.
func (s *chatStreamer) fail(w http.ResponseWriter, e *apiError) {
	writeEvent(w, "", e.body(apiOpenAI))
}

// serveModels lists "auto" and the configured models, in the OpenAI shape or
// (when the caller sends anthropic-version, as the Anthropic SDK does) in
// Anthropic's.
func (h *Handler) serveModels(w http.ResponseWriter, r *http.Request) {
	models := []Model{{ID: "auto", OwnedBy: "phaseless"}}
	if h.opts.Models != nil {
		models = append(models, h.opts.Models()...)
	}
	h.m.requests.With("200").Inc()
	if r.Header.Get("anthropic-version") != "" {
		type antModel struct {
			Type        string `json:"type"`
			ID          string `json:"id"`
			DisplayName string `json:"display_name"`
			CreatedAt   string `json:"created_at"`
		}
		out := struct {
			Data    []antModel `json:"data"`
			HasMore bool       `json:"has_more"`
			FirstID *string    `json:"first_id"`
			LastID  *string    `json:"last_id"`
		}{Data: []antModel{}}
		for _, m := range models {
			out.Data = append(out.Data, antModel{Type: "model", ID: m.ID, DisplayName: m.ID, CreatedAt: m.Created.UTC().Format(time.RFC3339)})
		}
		out.FirstID, out.LastID = &out.Data[0].ID, &out.Data[len(out.Data)-1].ID
		writeJSON(w, http.StatusOK, out)
		return
	}
	type oaiModel struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	out := struct {
		Object string     `json:"object"`
		Data   []oaiModel `json:"data"`
	}{Object: "list"}
	for _, m := range models {
		var created int64
		if !m.Created.IsZero() {
			created = m.Created.Unix()
		}
		owner := m.OwnedBy
		if owner == "" {
			owner = "phaseless"
		}
		out.Data = append(out.Data, oaiModel{ID: m.ID, Object: "model", Created: created, OwnedBy: owner})
	}
	writeJSON(w, http.StatusOK, out)
}
