package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/phaseless/phaseless/internal/tracing"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/sse"
)

// ClientConfig describes an OpenAI-compatible server reached by a Client.
// Zero timeouts mean no limit, as in net/http; the users that want limits
// (cloud/worker.Remote) set them.
type ClientConfig struct {
	// URL is the server's base URL, with or without the /v1 root:
	// http://127.0.0.1:8081 and http://127.0.0.1:8081/v1 both reach
	// http://127.0.0.1:8081/v1/chat/completions.
	URL string
	// Name is how errors name the server ("local server", "remote
	// gpu1:8000"). Default "upstream <host>".
	Name string
	// Model maps the request's model to the name sent upstream; nil sends
	// the request's own.
	Model func(requested string) string
	// APIKey, when set, is sent as a bearer token.
	APIKey string
	// ConnectTimeout bounds dialing.
	ConnectTimeout time.Duration
	// FirstTokenTimeout bounds the wait for the response headers, which an
	// OpenAI-compatible server sends with (or just before) its first token.
	FirstTokenTimeout time.Duration
	// TokenTimeout bounds the gap between two stream lines; it ends a
	// generation whose server stalled mid-stream with llm.CodeTimeout.
	TokenTimeout time.Duration
	// Proxy picks the proxy per request (http.ProxyFromEnvironment); nil
	// dials directly, right for a server on the same device.
	Proxy func(*http.Request) (*url.URL, error)
	// MaxIdleConnsPerHost is how many kept-alive connections are pooled.
	// Default 16.
	MaxIdleConnsPerHost int
	// HTTPClient, when set, is used as is instead of one built from
	// ConnectTimeout, FirstTokenTimeout, Proxy and MaxIdleConnsPerHost.
	// TokenTimeout still applies.
	HTTPClient *http.Client
	// CacheControl reports whether the server pins the prefixes that
	// cache_control marks (a Phaseless server does): then a request's
	// cache breakpoints go upstream (client_cache.go). nil, or false, sends
	// none: vLLM, SGLang and llama.cpp's servers have no per-request pin.
	CacheControl func() bool
}

// Validate names the first bad field.
func (c *ClientConfig) Validate() error {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("httpapi.ClientConfig.URL: %q is not an http(s) URL", c.URL)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"ConnectTimeout", c.ConnectTimeout}, {"FirstTokenTimeout", c.FirstTokenTimeout}, {"TokenTimeout", c.TokenTimeout}} {
		if d.v < 0 {
			return fmt.Errorf("httpapi.ClientConfig.%s: %v must be ≥ 0", d.name, d.v)
		}
	}
	if c.MaxIdleConnsPerHost < 0 {
		return fmt.Errorf("httpapi.ClientConfig.MaxIdleConnsPerHost: %d must be ≥ 0", c.MaxIdleConnsPerHost)
	}
	return nil
}

// Client streams chat completions from an OpenAI-compatible server (vLLM,
// SGLang, llama.cpp's llama-server, a vendor NPU runtime, or another
// Phaseless) as an llm.Generator. Each content delta is emitted as its SSE
// event arrives, never buffered; cancelling ctx closes the connection,
// which stops the generation on the server. It is the one client behind
// both the agent's --local-url engine and the cloud's remote workers.
type Client struct {
	cfg  ClientConfig
	v1   string // …/v1, without a trailing slash
	http *http.Client
}

var _ llm.Generator = (*Client)(nil)

// NewClient returns a client for the server at cfg.URL.
func NewClient(cfg ClientConfig) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	u, _ := url.Parse(cfg.URL)
	p := strings.TrimRight(u.Path, "/")
	if !strings.HasSuffix(p, "/v1") {
		p += "/v1"
	}
	u.Path, u.RawPath = p, ""
	if cfg.Name == "" {
		cfg.Name = "upstream " + u.Host
	}
	if cfg.MaxIdleConnsPerHost == 0 {
		cfg.MaxIdleConnsPerHost = 16
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Transport: &http.Transport{
			Proxy:                 cfg.Proxy,
			DialContext:           (&net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext,
			ResponseHeaderTimeout: cfg.FirstTokenTimeout,
			MaxIdleConnsPerHost:   cfg.MaxIdleConnsPerHost,
			IdleConnTimeout:       90 * time.Second,
			// A custom dialer turns HTTP/2 off unless asked for; https
			// servers get it as net/http's default transport would.
			ForceAttemptHTTP2: true,
		}}
	}
	return &Client{cfg: cfg, v1: u.String(), http: hc}, nil
}

// V1 returns the URL of path under the server's /v1 root, e.g.
// V1("/models") for a readiness check.
func (c *Client) V1(path string) string { return c.v1 + path }

// HTTP returns the HTTP client, for other requests to the same server
// (health and metrics probes) over the same connection pool.
func (c *Client) HTTP() *http.Client { return c.http }

// CloseIdleConnections drops pooled connections, for Close methods.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// upRequest is the chat completions body sent upstream.
type upRequest struct {
	Model         string      `json:"model"`
	Messages      []upMessage `json:"messages"`
	MaxTokens     int         `json:"max_tokens"`
	Temperature   float64     `json:"temperature"`
	TopP          float64     `json:"top_p,omitempty"`
	TopK          int         `json:"top_k,omitempty"` // vLLM/SGLang/llama.cpp extension; others ignore it
	Seed          uint64      `json:"seed,omitempty"`
	Stop          []string    `json:"stop,omitempty"`
	Stream        bool        `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	upToolFields // tools.go
}

type upMessage struct {
	Role    string `json:"role"`
	Content any    `json:"content"` // a string, or text parts carrying cache_control (client_cache.go)

	ToolCalls  []oaiToolCall `json:"tool_calls,omitempty"`
	ToolCallID string        `json:"tool_call_id,omitempty"`
}

// upChunk is one streamed event; Error appears when a server fails
// mid-stream.
type upChunk struct {
	Choices []struct {
		Delta struct {
			Content   string        `json:"content"`
			ToolCalls []oaiToolCall `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		Details          *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Error *upErr `json:"error"`
}

type upErr struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    any    `json:"code"`
}

// Generate implements llm.Generator by streaming a chat completion over SSE.
func (c *Client) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	if req.Raw {
		return llm.Final{}, llm.RawUnsupported(c.cfg.Name + ", driven through chat completions,")
	}
	start := time.Now()
	body := upRequest{Model: req.Model, MaxTokens: req.MaxTokens, Temperature: req.Temperature,
		TopP: req.TopP, TopK: req.TopK, Seed: req.Seed, Stop: req.Stop, Stream: true}
	body.StreamOptions.IncludeUsage = true
	if c.cfg.Model != nil {
		body.Model = c.cfg.Model(req.Model)
	}
	body.Messages = make([]upMessage, len(req.Messages))
	for i, m := range req.Messages {
		// OpenAI's tool message has no error flag: a failed result
		// (Anthropic is_error) says it failed in its text.
		body.Messages[i] = upMessage{Role: m.Role, Content: m.ToolResultText(), ToolCalls: upToolCalls(m.ToolCalls), ToolCallID: m.ToolCallID}
	}
	body.upToolFields = upTools(&req.ToolRequest)
	cacheTTL := c.cacheControl(&body, req)
	raw, err := json.Marshal(body)
	if err != nil {
		return llm.Final{}, llm.Errorf(llm.CodeInternal, "encode request: %v", err)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.v1+"/chat/completions", bytes.NewReader(raw))
	if err != nil {
		return llm.Final{}, llm.Errorf(llm.CodeInternal, "build request: %v", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
	if req.ID != "" {
		hreq.Header.Set("x-request-id", req.ID)
	}
	setTraceHeaders(hreq.Header, tracing.Outgoing(ctx, req.Trace))
	if c.cfg.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
	}
	if req.KVHandoff != "" {
		hreq.Header.Set(KVHandoffHeader, req.KVHandoff)
	}
	if cacheTTL != "" {
		hreq.Header.Set("x-cache-ttl", cacheTTL)
	}
	resp, err := c.http.Do(hreq)
	if err != nil {
		return llm.Final{}, transportError(ctx, c.cfg.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return llm.Final{}, statusError(resp, c.cfg.Name)
	}

	progress := func() {}
	if d := c.cfg.TokenTimeout; d > 0 {
		// The stall timer cancels the request when no line arrives in time.
		stall := time.AfterFunc(d, func() {
			cancel(llm.Errorf(llm.CodeTimeout, "%s: no stream event for %v", c.cfg.Name, d))
		})
		defer stall.Stop()
		progress = func() { stall.Reset(d) }
	}
	return decodeStream(ctx, resp.Body, start, c.cfg.Name, progress, emit)
}

// decodeStream reads an OpenAI SSE stream, emitting each content delta as it
// arrives; progress is called on every line (the stall timer). emit's own
// errors are returned as they are; every other failure is classified: a
// read failure by transportError, a bad or failing stream as *llm.Error.
// On error the Final holds what was counted so far.
func decodeStream(ctx context.Context, body io.Reader, start time.Time, name string, progress func(), emit llm.Emit) (llm.Final, error) {
	fin := llm.Final{FinishReason: "stop"}
	br := bufio.NewReaderSize(body, 16<<10)
	last := start
	for {
		line, err := sse.ReadLine(br, sse.DefaultMaxLine)
		if err != nil {
			if errors.Is(err, io.EOF) && ctx.Err() == nil {
				// A server that crashed mid-stream closes without [DONE].
				return fin, llm.Errorf(llm.CodeUnavailable, "%s: stream ended without [DONE]", name)
			}
			return fin, transportError(ctx, name, err)
		}
		if ctx.Err() != nil {
			// Events already buffered must not outlive a caller who left.
			return fin, transportError(ctx, name, ctx.Err())
		}
		progress()
		c, done, err := parseStreamLine(line, name)
		if err != nil {
			return fin, err
		}
		if done {
			break
		}
		if c == nil {
			continue
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != "" {
				now := time.Now()
				if fin.TTFT == 0 {
					fin.TTFT = now.Sub(start)
				}
				fin.CompletionTokens++
				if err := emit(llm.Token{Text: ch.Delta.Content, ID: -1, EngineLatency: now.Sub(last)}); err != nil {
					return fin, err
				}
				last = now
			}
			for _, tc := range ch.Delta.ToolCalls {
				if err := emit(llm.Token{ID: -1, Tool: toolDeltaFromUp(tc)}); err != nil {
					return fin, err
				}
			}
			if ch.FinishReason != nil && *ch.FinishReason != "" {
				fin.FinishReason = finishReason(*ch.FinishReason)
			}
		}
		if c.Usage != nil {
			fin.PromptTokens = c.Usage.PromptTokens
			fin.CompletionTokens = c.Usage.CompletionTokens
			if c.Usage.Details != nil {
				fin.PrefixHitTokens = c.Usage.Details.CachedTokens
			}
		}
	}
	fin.Total = time.Since(start)
	return fin, nil
}

// finishReason maps OpenAI's finish reasons onto llm.Final's: the token
// limit is "length", "tool_calls" stays, every other end ("stop",
// "content_filter") is "stop".
func finishReason(r string) string {
	if r == "length" || r == llm.FinishToolCalls {
		return r
	}
	return "stop"
}

// parseStreamLine decodes one line of an SSE stream: a chunk, the [DONE]
// terminator, or nothing (event names, comments, blank separators). An
// in-stream error object becomes an *llm.Error classified by its type.
func parseStreamLine(line []byte, name string) (c *upChunk, done bool, err error) {
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return nil, false, nil
	}
	data = bytes.TrimSpace(data)
	if string(data) == "[DONE]" {
		return nil, true, nil
	}
	c = &upChunk{}
	if err := json.Unmarshal(data, c); err != nil {
		return nil, false, llm.Errorf(llm.CodeInternal, "%s: bad stream event: %v", name, err)
	}
	if c.Error != nil {
		return nil, false, llm.Errorf(codeForType(c.Error.Type), "%s: %s", name, c.Error.Message)
	}
	return c, false, nil
}

// transportError classifies a failure to talk to the server.
func transportError(ctx context.Context, name string, err error) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause // the stall timer's timeout, or the caller's deadline
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return llm.Errorf(llm.CodeTimeout, "%s: %v", name, err)
	}
	return llm.Errorf(llm.CodeUnavailable, "%s: %v", name, err)
}

// maxErrorBody bounds how much of an error answer is read; maxErrorText
// how much of a non-JSON one lands in the error message.
const (
	maxErrorBody = 64 << 10
	maxErrorText = 4 << 10
)

// statusError maps a non-200 answer to the llm classification: 429 and 503
// are overloads (eligible for fallback), other 5xx are internal errors.
func statusError(resp *http.Response, name string) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var body struct {
		Error *upErr `json:"error"`
	}
	var msg string
	contextLength := false
	if json.Unmarshal(raw, &body) == nil && body.Error != nil && body.Error.Message != "" {
		msg = body.Error.Message
		// OpenAI's, vLLM's and Phaseless' own code for a prompt longer than
		// the model's context: another engine may still take it.
		contextLength = body.Error.Code == string(llm.CodeContextLength)
	} else {
		msg = strings.TrimSpace(string(raw[:min(len(raw), maxErrorText)]))
	}
	var code llm.Code
	switch s := resp.StatusCode; {
	case s == http.StatusTooManyRequests || s == http.StatusServiceUnavailable:
		code = llm.CodeOverloaded
	case contextLength:
		code = llm.CodeContextLength
	case s == http.StatusBadRequest || s == http.StatusRequestEntityTooLarge || s == http.StatusUnprocessableEntity:
		code = llm.CodeInvalid
	case s == http.StatusGatewayTimeout:
		code = llm.CodeTimeout
	default:
		code = llm.CodeInternal
	}
	e := llm.Errorf(code, "%s answered %s: %s", name, resp.Status, msg)
	if s := resp.Header.Get("Retry-After"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			e.RetryAfter = time.Duration(n) * time.Second
		}
	}
	return e
}

// codeForType classifies a mid-stream error event by its OpenAI or
// Anthropic error type.
func codeForType(t string) llm.Code {
	switch t {
	case "overloaded_error", "rate_limit_error", "server_overloaded":
		return llm.CodeOverloaded
	case "invalid_request_error":
		return llm.CodeInvalid
	}
	return llm.CodeInternal
}
