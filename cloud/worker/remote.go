package worker

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
	"sync"
	"time"

	"github.com/phaseless/phaseless/transport/llm"
)

// RemoteConfig describes an OpenAI-compatible server.
type RemoteConfig struct {
	// URL is the server's base URL (http://host:8000); /v1/chat/completions
	// and /metrics are resolved against it.
	URL string
	// Model is the model name sent in requests. Default "auto" (Phaseless);
	// vLLM and SGLang need the served model's name.
	Model string
	// APIKey, when set, is sent as a bearer token.
	APIKey string
	// ConnectTimeout bounds dialing. Default 5 s.
	ConnectTimeout time.Duration
	// FirstTokenTimeout bounds the wait for the response headers, which an
	// OpenAI-compatible server sends with its first token. Default 60 s.
	FirstTokenTimeout time.Duration
	// TokenTimeout bounds the gap between two stream events. Default 30 s.
	TokenTimeout time.Duration
	// ProbeTimeout bounds one health/metrics probe. Default 2 s.
	ProbeTimeout time.Duration
}

func (c *RemoteConfig) fill() {
	if c.Model == "" {
		c.Model = "auto"
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 5 * time.Second
	}
	if c.FirstTokenTimeout == 0 {
		c.FirstTokenTimeout = 60 * time.Second
	}
	if c.TokenTimeout == 0 {
		c.TokenTimeout = 30 * time.Second
	}
	if c.ProbeTimeout == 0 {
		c.ProbeTimeout = 2 * time.Second
	}
}

// Validate names the first bad field.
func (c *RemoteConfig) Validate() error {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("worker.RemoteConfig.URL: %q is not an http(s) URL", c.URL)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"ConnectTimeout", c.ConnectTimeout}, {"FirstTokenTimeout", c.FirstTokenTimeout}, {"TokenTimeout", c.TokenTimeout}, {"ProbeTimeout", c.ProbeTimeout}} {
		if d.v < 0 {
			return fmt.Errorf("worker.RemoteConfig.%s: %v must be ≥ 0", d.name, d.v)
		}
	}
	return nil
}

// Remote is an OpenAI-compatible server used as an engine.
type Remote struct {
	cfg    RemoteConfig
	base   *url.URL
	client *http.Client
	tr     *http.Transport

	mu         sync.Mutex // guards lastFaults, lastAt, noMetrics
	lastFaults float64
	lastAt     time.Time
	noMetrics  bool // /metrics answered 404: probe health only
}

// NewRemote returns a client for the server at cfg.URL.
func NewRemote(cfg RemoteConfig) (*Remote, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	base, _ := url.Parse(strings.TrimRight(cfg.URL, "/"))
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext,
		ResponseHeaderTimeout: cfg.FirstTokenTimeout,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &Remote{cfg: cfg, base: base, tr: tr, client: &http.Client{Transport: tr}}, nil
}

func (r *Remote) endpoint(path string) string { return r.base.String() + path }

// chatRequest is the OpenAI request body sent upstream.
type chatRequest struct {
	Model         string        `json:"model"`
	Messages      []chatMessage `json:"messages"`
	MaxTokens     int           `json:"max_tokens"`
	Temperature   float64       `json:"temperature"`
	TopP          float64       `json:"top_p,omitempty"`
	TopK          int           `json:"top_k,omitempty"` // vLLM/SGLang extension; others ignore it
	Seed          uint64        `json:"seed,omitempty"`
	Stop          []string      `json:"stop,omitempty"`
	Stream        bool          `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// chunk is one streamed event; Error appears when a server fails mid-stream.
type chunk struct {
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
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
	Error *apiErr `json:"error"`
}

type apiErr struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    any    `json:"code"`
}

// Generate implements llm.Generator by streaming a chat completion over SSE.
// Each token is passed to emit as its event arrives; cancelling ctx closes
// the connection, which stops the generation on the server.
func (r *Remote) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	start := time.Now()
	body := chatRequest{Model: r.cfg.Model, MaxTokens: req.MaxTokens, Temperature: req.Temperature,
		TopP: req.TopP, TopK: req.TopK, Seed: req.Seed, Stop: req.Stop, Stream: true}
	body.StreamOptions.IncludeUsage = true
	if req.Model != "" && req.Model != "auto" {
		body.Model = req.Model
	}
	for _, m := range req.Messages {
		body.Messages = append(body.Messages, chatMessage{Role: m.Role, Content: m.Content})
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return llm.Final{}, llm.Errorf(llm.CodeInternal, "encode request: %v", err)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, r.endpoint("/v1/chat/completions"), bytes.NewReader(raw))
	if err != nil {
		return llm.Final{}, llm.Errorf(llm.CodeInternal, "build request: %v", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
	if req.ID != "" {
		hreq.Header.Set("x-request-id", req.ID)
	}
	if r.cfg.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+r.cfg.APIKey)
	}
	resp, err := r.client.Do(hreq)
	if err != nil {
		return llm.Final{}, r.transportError(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return llm.Final{}, statusError(resp)
	}

	// The stall timer cancels the request when no event arrives in time.
	stall := time.AfterFunc(r.cfg.TokenTimeout, func() {
		cancel(llm.Errorf(llm.CodeTimeout, "remote %s: no stream event for %v", r.base.Host, r.cfg.TokenTimeout))
	})
	defer stall.Stop()

	fin, err := decodeStream(ctx, resp.Body, start, r.base.Host, func() { stall.Reset(r.cfg.TokenTimeout) }, emit)
	if err != nil && !isLLMError(err) && ctx.Err() == nil {
		err = r.transportError(ctx, err)
	}
	return fin, err
}

func isLLMError(err error) bool {
	var e *llm.Error
	return errors.As(err, &e)
}

// decodeStream reads an OpenAI SSE stream, emitting each content delta as it
// arrives; progress is called on every line (the stall timer). Errors that
// are not *llm.Error come from reading the body.
func decodeStream(ctx context.Context, body io.Reader, start time.Time, host string, progress func(), emit llm.Emit) (llm.Final, error) {
	var fin llm.Final
	fin.FinishReason = "stop"
	br := bufio.NewReaderSize(body, 16<<10)
	for {
		line, err := readLine(br)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return llm.Final{}, llm.Errorf(llm.CodeUnavailable, "remote %s: stream ended without [DONE]", host)
			}
			return llm.Final{}, err
		}
		if err := ctx.Err(); err != nil {
			// Events already buffered must not outlive a caller who left.
			return llm.Final{}, err
		}
		progress()
		data, ok := sseData(line)
		if !ok {
			continue
		}
		if data == "[DONE]" {
			break
		}
		var c chunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return llm.Final{}, llm.Errorf(llm.CodeInternal, "remote %s: bad stream event: %v", host, err)
		}
		if c.Error != nil {
			return llm.Final{}, llm.Errorf(codeForType(c.Error.Type), "remote %s: %s", host, c.Error.Message)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != "" {
				if fin.CompletionTokens == 0 {
					fin.TTFT = time.Since(start)
				}
				fin.CompletionTokens++
				if err := emit(llm.Token{Text: ch.Delta.Content}); err != nil {
					return llm.Final{}, err
				}
			}
			if ch.FinishReason != nil && *ch.FinishReason != "" {
				fin.FinishReason = *ch.FinishReason
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

// readLine reads one line, bounded at 1 MiB so a hostile server cannot make
// the coordinator buffer without end.
func readLine(br *bufio.Reader) (string, error) {
	var b []byte
	for {
		frag, isPrefix, err := br.ReadLine()
		if err != nil {
			return "", err
		}
		b = append(b, frag...)
		if len(b) > 1<<20 {
			return "", errors.New("stream line over 1 MiB")
		}
		if !isPrefix {
			return string(b), nil
		}
	}
}

// sseData returns the payload of a `data:` line.
func sseData(line string) (string, bool) {
	rest, ok := strings.CutPrefix(line, "data:")
	if !ok {
		return "", false
	}
	return strings.TrimPrefix(rest, " "), true
}

// transportError classifies a failure to talk to the server.
func (r *Remote) transportError(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause // the stall timer's timeout, or the caller's deadline
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return llm.Errorf(llm.CodeTimeout, "remote %s: %v", r.base.Host, err)
	}
	return llm.Errorf(llm.CodeUnavailable, "remote %s: %v", r.base.Host, err)
}

// statusError maps a non-200 answer to the llm classification: 429 and 503
// are overloads (eligible for fallback), other 5xx are internal errors.
func statusError(resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	msg := strings.TrimSpace(string(raw))
	var body struct {
		Error *apiErr `json:"error"`
	}
	if json.Unmarshal(raw, &body) == nil && body.Error != nil && body.Error.Message != "" {
		msg = body.Error.Message
	}
	var code llm.Code
	switch s := resp.StatusCode; {
	case s == http.StatusTooManyRequests || s == http.StatusServiceUnavailable:
		code = llm.CodeOverloaded
	case s == http.StatusBadRequest || s == http.StatusRequestEntityTooLarge || s == http.StatusUnprocessableEntity:
		code = llm.CodeInvalid
	case s == http.StatusGatewayTimeout:
		code = llm.CodeTimeout
	default:
		code = llm.CodeInternal
	}
	e := llm.Errorf(code, "remote answered %s: %s", resp.Status, msg)
	if s := resp.Header.Get("Retry-After"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			e.RetryAfter = time.Duration(n) * time.Second
		}
	}
	return e
}

func codeForType(t string) llm.Code {
	switch t {
	case "overloaded_error", "rate_limit_error", "server_overloaded":
		return llm.CodeOverloaded
	case "invalid_request_error":
		return llm.CodeInvalid
	}
	return llm.CodeInternal
}

// metric names read from /metrics, per field, in order of preference:
// vLLM, SGLang, llama.cpp server, and Phaseless' own coordinator.
var (
	runningNames  = []string{"vllm:num_requests_running", "sglang:num_running_reqs", "llamacpp:requests_processing", "phaseless_engine_running"}
	waitingNames  = []string{"vllm:num_requests_waiting", "sglang:num_queue_reqs", "llamacpp:requests_deferred", "phaseless_engine_waiting"}
	kvUsageNames  = []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage", "llamacpp:kv_cache_usage_ratio", "phaseless_engine_kv_usage"}
	faultNames    = []string{"vllm:num_preemptions_total", "phaseless_engine_kv_faults_total"}
	capacityNames = []string{"phaseless_engine_capacity"}
	hitNames      = []string{"vllm:prefix_cache_hits_total", "phaseless_engine_prefix_hit_tokens_total"}
	queryNames    = []string{"vllm:prefix_cache_queries_total", "phaseless_engine_prompt_tokens_total"}
	wantedMetrics = func() map[string]bool {
		m := map[string]bool{}
		for _, l := range [][]string{runningNames, waitingNames, kvUsageNames, faultNames, capacityNames, hitNames, queryNames} {
			for _, n := range l {
				m[n] = true
			}
		}
		return m
	}()
)

func first(m map[string]float64, names []string) (float64, bool) {
	for _, n := range names {
		if v, ok := m[n]; ok {
			return v, true
		}
	}
	return 0, false
}

// Probe implements Engine: it scrapes /metrics for load, or, on a server
// without metrics, checks /health and then /v1/models for liveness.
func (r *Remote) Probe(ctx context.Context) (Load, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.ProbeTimeout)
	defer cancel()
	r.mu.Lock()
	noMetrics := r.noMetrics
	r.mu.Unlock()
	if !noMetrics {
		body, status, err := r.get(ctx, "/metrics")
		if err != nil {
			return Load{}, err
		}
		if status == http.StatusOK {
			return r.loadFrom(body), nil
		}
		if status != http.StatusNotFound {
			return Load{}, fmt.Errorf("remote %s: /metrics answered %d", r.base.Host, status)
		}
		r.mu.Lock()
		r.noMetrics = true
		r.mu.Unlock()
	}
	for _, p := range []string{"/health", "/v1/models"} {
		_, status, err := r.get(ctx, p)
		if err != nil {
			return Load{}, err
		}
		if status == http.StatusOK {
			return Load{}, nil
		}
		if status != http.StatusNotFound {
			return Load{}, fmt.Errorf("remote %s: %s answered %d", r.base.Host, p, status)
		}
	}
	return Load{}, fmt.Errorf("remote %s: no /metrics, /health or /v1/models", r.base.Host)
}

func (r *Remote) get(ctx context.Context, path string) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.endpoint(path), nil)
	if err != nil {
		return nil, 0, err
	}
	if r.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+r.cfg.APIKey)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("remote %s: %w", r.base.Host, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, 0, fmt.Errorf("remote %s: %w", r.base.Host, err)
	}
	return body, resp.StatusCode, nil
}

// loadFrom turns a metrics scrape into a Load. KV faults are a counter on
// the server; the rate is taken between consecutive probes.
func (r *Remote) loadFrom(body []byte) Load {
	m := promSums(body, wantedMetrics)
	var l Load
	if v, ok := first(m, runningNames); ok {
		l.Running = int(v)
	}
	if v, ok := first(m, waitingNames); ok {
		l.Waiting = int(v)
	}
	if v, ok := first(m, kvUsageNames); ok {
		l.KVUsage = min(max(v, 0), 1)
	}
	if v, ok := first(m, capacityNames); ok {
		l.Capacity = int(v)
	}
	if v, ok := first(m, hitNames); ok && v >= 0 {
		l.PrefixHitTokens = uint64(v)
	}
	if v, ok := first(m, queryNames); ok && v >= 0 {
		l.PromptTokens = uint64(v)
	}
	if v, ok := first(m, faultNames); ok {
		now := time.Now()
		r.mu.Lock()
		if !r.lastAt.IsZero() && v >= r.lastFaults {
			if ms := float64(now.Sub(r.lastAt).Milliseconds()); ms > 0 {
				l.KVFaultsPerMs = (v - r.lastFaults) / ms
			}
		}
		r.lastFaults, r.lastAt = v, now
		r.mu.Unlock()
	}
	return l
}

// CachedPrefixBlocks implements Engine: a remote server's cache is not
// visible, so the worker's own routing index answers.
func (r *Remote) CachedPrefixBlocks([]uint64) int { return -1 }

// Close implements Engine: it drops idle connections.
func (r *Remote) Close() error {
	r.tr.CloseIdleConnections()
	return nil
}
