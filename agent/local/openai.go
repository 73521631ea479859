package local

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/phaseless/phaseless/transport/llm"
)

// OpenAI is an engine reached over an OpenAI-compatible chat completions
// API on the device (llama.cpp's llama-server, vLLM, a vendor NPU runtime).
// It always streams, so tokens pass through as the server produces them.
type OpenAI struct {
	endpoint string // …/v1/chat/completions
	model    string
	client   *http.Client
}

var _ llm.Generator = (*OpenAI)(nil)

// NewOpenAI returns an engine for the server at base, e.g.
// http://127.0.0.1:8081 or http://127.0.0.1:8081/v1. model is sent as the
// request's model ("" sends the request's own). client nil means a client
// without an overall timeout (streams may be long; ctx bounds them).
func NewOpenAI(base, model string, client *http.Client) (*OpenAI, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("local: %q is not an http(s) URL", base)
	}
	p := strings.TrimSuffix(u.Path, "/")
	if !strings.HasSuffix(p, "/v1") {
		p += "/v1"
	}
	u.Path = p + "/chat/completions"
	if client == nil {
		client = &http.Client{Transport: &http.Transport{
			Proxy:                 nil, // a device-local server is never behind the environment's proxy
			MaxIdleConnsPerHost:   16,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: 5 * time.Minute, // prompt processing on a slow board
		}}
	}
	return &OpenAI{endpoint: u.String(), model: model, client: client}, nil
}

type oaiRequest struct {
	Model         string        `json:"model"`
	Messages      []oaiMessage  `json:"messages"`
	MaxTokens     int           `json:"max_tokens"`
	Temperature   float64       `json:"temperature"`
	TopP          float64       `json:"top_p,omitempty"`
	Seed          uint64        `json:"seed,omitempty"`
	Stop          []string      `json:"stop,omitempty"`
	Stream        bool          `json:"stream"`
	StreamOptions streamOptions `json:"stream_options"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type oaiMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type oaiChunk struct {
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    any    `json:"code"`
	} `json:"error"`
}

// Generate implements llm.Generator.
func (o *OpenAI) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	start := time.Now()
	body := oaiRequest{
		Model: o.model, MaxTokens: req.MaxTokens, Temperature: req.Temperature, TopP: req.TopP,
		Seed: req.Seed, Stop: req.Stop, Stream: true, StreamOptions: streamOptions{IncludeUsage: true},
	}
	if body.Model == "" {
		body.Model = req.Model
	}
	for _, m := range req.Messages {
		body.Messages = append(body.Messages, oaiMessage{Role: m.Role, Content: m.Content})
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return llm.Final{}, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, o.endpoint, bytes.NewReader(raw))
	if err != nil {
		return llm.Final{}, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
	resp, err := o.client.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return llm.Final{}, context.Cause(ctx)
		}
		return llm.Final{}, &llm.Error{Code: llm.CodeUnavailable, Retryable: true, Message: "local server " + o.endpoint + ": " + err.Error()}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return llm.Final{}, statusError(resp)
	}

	fin := llm.Final{FinishReason: "stop"}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var last time.Time
	for sc.Scan() {
		c, done, err := parseStreamLine(sc.Bytes())
		if err != nil {
			return fin, err
		}
		if done {
			break
		}
		if c == nil {
			continue
		}
		if c.Usage != nil {
			fin.PromptTokens, fin.CompletionTokens = c.Usage.PromptTokens, c.Usage.CompletionTokens
		}
		for _, ch := range c.Choices {
			if ch.FinishReason != nil && *ch.FinishReason == "length" {
				fin.FinishReason = "length"
			}
			if ch.Delta.Content == "" {
				continue
			}
			now := time.Now()
			if fin.TTFT == 0 {
				fin.TTFT = now.Sub(start)
				last = start
			}
			if err := emit(llm.Token{Text: ch.Delta.Content, ID: -1, EngineLatency: now.Sub(last)}); err != nil {
				return fin, err
			}
			last = now
			fin.CompletionTokens++
		}
	}
	if err := sc.Err(); err != nil {
		if ctx.Err() != nil {
			return fin, context.Cause(ctx)
		}
		return fin, &llm.Error{Code: llm.CodeUnavailable, Message: "local server stream broke: " + err.Error()}
	}
	fin.Total = time.Since(start)
	return fin, nil
}

// parseStreamLine decodes one line of the server's SSE stream: a chunk, the
// [DONE] terminator, or nothing (event names, comments, blank separators).
// An in-stream error object becomes an error.
func parseStreamLine(line []byte) (c *oaiChunk, done bool, err error) {
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return nil, false, nil
	}
	data = bytes.TrimSpace(data)
	if string(data) == "[DONE]" {
		return nil, true, nil
	}
	c = &oaiChunk{}
	if err := json.Unmarshal(data, c); err != nil {
		return nil, false, &llm.Error{Code: llm.CodeInternal, Message: fmt.Sprintf("local server sent a malformed chunk: %v", err)}
	}
	if c.Error != nil {
		return nil, false, &llm.Error{Code: llm.CodeInternal, Message: "local server: " + c.Error.Message}
	}
	return c, false, nil
}

// statusError maps a local server's error status to the canonical codes.
func statusError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	msg := strings.TrimSpace(string(b))
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
		msg = e.Error.Message
	}
	msg = fmt.Sprintf("local server: %s: %s", resp.Status, msg)
	switch {
	case resp.StatusCode == http.StatusBadRequest:
		return &llm.Error{Code: llm.CodeInvalid, Message: msg}
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable:
		return &llm.Error{Code: llm.CodeOverloaded, Retryable: true, Message: msg}
	case resp.StatusCode == http.StatusGatewayTimeout:
		return &llm.Error{Code: llm.CodeTimeout, Retryable: true, Message: msg}
	}
	return &llm.Error{Code: llm.CodeInternal, Message: msg}
}

// ErrNoServer is returned by Ping when the local server does not answer.
var ErrNoServer = errors.New("local: OpenAI-compatible server not reachable")

// Ping checks that the server answers GET /v1/models, for /readyz.
func (o *OpenAI) Ping(ctx context.Context) error {
	u := strings.TrimSuffix(o.endpoint, "/chat/completions") + "/models"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := o.client.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoServer, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: GET %s: %s", ErrNoServer, u, resp.Status)
	}
	return nil
}
