package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/phaseless/phaseless/internal/backoff"
)

// API is the request and stream shape a Client speaks.
type API string

// The two APIs Phaseless serves (DESIGN.md §4).
const (
	OpenAI    API = "openai"    // POST /v1/chat/completions
	Anthropic API = "anthropic" // POST /v1/messages
)

// Config configures a Client. Only URL is required.
type Config struct {
	// URL is the server's base URL, with or without /v1: the agent's
	// http://127.0.0.1:7070 or the cloud's https://cloud:8080.
	URL string
	// FallbackURL, when set, is tried once URL's attempts are spent on
	// failures another server may not have (unreachable, 5xx): an app on a
	// device can name the cloud for when its agent is down. A request with
	// Route "local" never goes there: the app kept it on the device.
	FallbackURL string
	// API is the shape spoken; default OpenAI.
	API API
	// APIKey is sent as a bearer token (OpenAI) or x-api-key (Anthropic).
	APIKey string
	// HTTPClient is used for every request; default a client with no
	// overall timeout (a stream lasts as long as the generation).
	HTTPClient *http.Client
	// MaxAttempts bounds the tries per URL, the first included; default 3.
	MaxAttempts int
	// Backoff is the wait between tries when the server gives no
	// Retry-After; default internal/backoff's (250 ms doubling to 30 s,
	// half-jittered).
	Backoff backoff.Policy
	// MaxWait is the longest wait the client sits out before a retry: a
	// Retry-After longer than this fails the call at once with the
	// server's error (the app decides, e.g. to shed the request). Default
	// 30 s.
	MaxWait time.Duration
	// Clock times waits and measurements; default the system clock.
	Clock backoff.Clock
	// Rand draws jitter in [0, 1); default math/rand/v2.
	Rand func() float64

	// OnRetry is called before each wait for a retry.
	OnRetry func(Retry)
	// OnBudget is called whenever a response reports the caller's burst
	// budget (x-burst-budget-remaining), answered or refused.
	OnBudget func(Budget)
	// OnFallback is called when the answer did not come from where it was
	// first sent: the server's own fallback (x-fallback-reason), or the
	// client's switch to FallbackURL.
	OnFallback func(Fallback)
	// Metrics, when set, receives every request's measurements.
	Metrics *Collectors
}

// Retry describes one retry about to happen.
type Retry struct {
	Attempt int           // the attempt that failed, from 1
	Wait    time.Duration // how long the client waits before the next
	Err     *Error        // why
	URL     string
}

// Budget is the caller's burst budget as a response reported it.
type Budget struct {
	Remaining  int64         // tokens left (x-burst-budget-remaining)
	RetryAfter time.Duration // when a refused request may try again; 0 if answered
	URL        string
}

// Fallback says why an answer came from somewhere else.
type Fallback struct {
	// ByClient is true for the client's switch to FallbackURL, false for
	// the server's own (agent → cloud, cloud pool → conservative pool).
	ByClient bool
	From, To string // client: the two base URLs; server: "", the route header
	Reason   string // the server's x-fallback-reason, or the error that moved the client
}

// Client sends requests to one Phaseless endpoint (and its fallback). It
// is safe for concurrent use.
type Client struct {
	cfg  Config
	urls []string // base URLs without /v1, URL first
}

// New returns a Client for cfg.
func New(cfg Config) (*Client, error) {
	if cfg.API == "" {
		cfg.API = OpenAI
	}
	if cfg.API != OpenAI && cfg.API != Anthropic {
		return nil, fmt.Errorf("client.Config.API: %q is not openai or anthropic", cfg.API)
	}
	var urls []string
	for _, f := range []struct{ name, v string }{{"URL", cfg.URL}, {"FallbackURL", cfg.FallbackURL}} {
		if f.v == "" && f.name == "FallbackURL" {
			continue
		}
		u, err := url.Parse(f.v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("client.Config.%s: %q is not an http(s) URL", f.name, f.v)
		}
		urls = append(urls, strings.TrimSuffix(strings.TrimRight(f.v, "/"), "/v1"))
	}
	switch {
	case cfg.MaxAttempts < 0:
		return nil, fmt.Errorf("client.Config.MaxAttempts: %d must be ≥ 0", cfg.MaxAttempts)
	case cfg.MaxWait < 0:
		return nil, fmt.Errorf("client.Config.MaxWait: %v must be ≥ 0", cfg.MaxWait)
	}
	cfg.Backoff.FillDefaults()
	if err := cfg.Backoff.Validate(); err != nil {
		return nil, fmt.Errorf("client.Config.%w", err)
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 3
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = 30 * time.Second
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	if cfg.Clock == nil {
		cfg.Clock = backoff.System{}
	}
	if cfg.Rand == nil {
		cfg.Rand = backoff.Rand
	}
	return &Client{cfg: cfg, urls: urls}, nil
}

// Message is one chat turn: role user or assistant (system goes in
// Request.System, which both APIs accept that way).
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Request is one completion request, in terms both APIs share.
type Request struct {
	Model       string // default "auto": Phaseless chooses
	System      string
	Messages    []Message
	MaxTokens   int      // required, 1..the server's limit
	Temperature *float64 // nil: the server's default
	Stop        []string
	// Route is x-phaseless-route on the agent: auto, local or cloud.
	Route string
	// TraceParent is a W3C traceparent that the servers continue their
	// spans from.
	TraceParent string
	// IdempotencyKey is sent as Idempotency-Key.
	IdempotencyKey string
}

// Usage is what the server counted.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	// CachedTokens are prompt tokens served from a cached prefix (OpenAI
	// prompt_tokens_details.cached_tokens, Anthropic
	// cache_read_input_tokens). PromptTokens includes them in both APIs.
	CachedTokens int
}

// Response is a finished completion.
type Response struct {
	Text         string
	FinishReason string // stop or length, in either API
	Usage        Usage
	// Route, SchedulerHint and FallbackReason are the x-phaseless-route,
	// x-scheduler-hint and x-fallback-reason headers; RequestID x-request-id.
	Route, SchedulerHint, FallbackReason, RequestID string
	// Budget is x-burst-budget-remaining, valid when HasBudget.
	Budget    int64
	HasBudget bool
	Stats     Stats
	Attempts  int    // tries it took, over both URLs
	URL       string // the base URL that answered
}

// Complete runs req and returns the whole answer. It streams underneath,
// so Stats holds the same measurements as for Stream.
func (c *Client) Complete(ctx context.Context, req *Request) (*Response, error) {
	return c.Stream(ctx, req, nil)
}

// Stream runs req, calling onText with each piece of text as it arrives
// (never a split character). An error from onText stops the stream and is
// returned as is. A failure before any text reached onText is retried as
// Config says; after that it is returned (Error.MidStream), since the app
// already showed part of an answer.
func (c *Client) Stream(ctx context.Context, req *Request, onText func(string) error) (*Response, error) {
	if req.MaxTokens < 1 {
		return nil, &Error{Message: fmt.Sprintf("client: Request.MaxTokens must be at least 1, got %d", req.MaxTokens)}
	}
	if len(req.Messages) == 0 {
		return nil, &Error{Message: "client: Request.Messages is empty"}
	}
	body, err := c.encode(req)
	if err != nil {
		return nil, err
	}
	attempts := 0
	var last *Error
	for ui, base := range c.urls {
		if ui > 0 && req.Route == "local" {
			break // pinned to the device: another server must not see it
		}
		if ui > 0 {
			c.fallback(Fallback{ByClient: true, From: c.urls[ui-1], To: base, Reason: last.Error()})
		}
		for n := 1; n <= c.cfg.MaxAttempts; n++ {
			attempts++
			resp, err := c.once(ctx, base, req, body, onText)
			if err == nil {
				resp.Attempts, resp.URL = attempts, base
				c.cfg.Metrics.observe(resp)
				return resp, nil
			}
			var e *Error
			if !errors.As(err, &e) {
				c.cfg.Metrics.fail("callback")
				return nil, err // onText's own error
			}
			e.URL, last = base, e
			if e.MidStream || ctx.Err() != nil {
				c.cfg.Metrics.fail(e.outcome())
				return nil, e
			}
			wait, ok := c.retryWait(e, n)
			if !ok {
				break
			}
			if n == c.cfg.MaxAttempts {
				break
			}
			if c.cfg.OnRetry != nil {
				c.cfg.OnRetry(Retry{Attempt: n, Wait: wait, Err: e, URL: base})
			}
			c.cfg.Metrics.retry(e.outcome())
			select {
			case <-ctx.Done():
				return nil, &Error{Message: ctx.Err().Error(), URL: base, err: ctx.Err()}
			case <-c.cfg.Clock.After(wait):
			}
		}
		if !last.fallbackable() {
			break
		}
	}
	c.cfg.Metrics.fail(last.outcome())
	return nil, last
}

// retryWait says whether a failed attempt n (from 1) is worth another try
// and how long to wait first. The server's Retry-After wins over the
// backoff schedule (plus jitter of up to one Backoff.Initial, so a fleet
// refused at the same moment does not return at the same moment); a wait
// over MaxWait is not sat out. A budget refusal without Retry-After means
// the request costs more than the whole budget: retrying cannot help.
func (c *Client) retryWait(e *Error, n int) (time.Duration, bool) {
	if !e.retryable() {
		return 0, false
	}
	var wait time.Duration
	switch {
	case e.RetryAfter > 0:
		wait = e.RetryAfter + time.Duration(c.cfg.Rand()*float64(c.cfg.Backoff.Initial))
	case e.Status == http.StatusTooManyRequests && e.HasBudget:
		return 0, false
	default:
		wait = c.cfg.Backoff.Delay(n-1, c.cfg.Rand())
	}
	if wait > c.cfg.MaxWait {
		return 0, false
	}
	return wait, true
}

func (c *Client) fallback(f Fallback) {
	if c.cfg.OnFallback != nil {
		c.cfg.OnFallback(f)
	}
	c.cfg.Metrics.fallback(f)
}

// encode builds the request body in the configured API's shape.
func (c *Client) encode(req *Request) ([]byte, error) {
	model := req.Model
	if model == "" {
		model = "auto"
	}
	if c.cfg.API == Anthropic {
		return json.Marshal(struct {
			Model         string    `json:"model"`
			System        string    `json:"system,omitempty"`
			Messages      []Message `json:"messages"`
			MaxTokens     int       `json:"max_tokens"`
			Temperature   *float64  `json:"temperature,omitempty"`
			StopSequences []string  `json:"stop_sequences,omitempty"`
			Stream        bool      `json:"stream"`
		}{model, req.System, req.Messages, req.MaxTokens, req.Temperature, req.Stop, true})
	}
	msgs := req.Messages
	if req.System != "" {
		msgs = append([]Message{{Role: "system", Content: req.System}}, msgs...)
	}
	type streamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	}
	return json.Marshal(struct {
		Model         string        `json:"model"`
		Messages      []Message     `json:"messages"`
		MaxTokens     int           `json:"max_tokens"`
		Temperature   *float64      `json:"temperature,omitempty"`
		Stop          []string      `json:"stop,omitempty"`
		Stream        bool          `json:"stream"`
		StreamOptions streamOptions `json:"stream_options"`
	}{model, msgs, req.MaxTokens, req.Temperature, req.Stop, true, streamOptions{true}})
}

// once runs one attempt against base.
func (c *Client) once(ctx context.Context, base string, req *Request, body []byte, onText func(string) error) (*Response, error) {
	path := "/v1/chat/completions"
	if c.cfg.API == Anthropic {
		path = "/v1/messages"
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		return nil, &Error{Message: err.Error(), err: err}
	}
	h := hreq.Header
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "text/event-stream")
	if c.cfg.API == Anthropic {
		h.Set("anthropic-version", "2023-06-01")
		if c.cfg.APIKey != "" {
			h.Set("x-api-key", c.cfg.APIKey)
		}
	} else if c.cfg.APIKey != "" {
		h.Set("Authorization", "Bearer "+c.cfg.APIKey)
	}
	for k, v := range map[string]string{"x-phaseless-route": req.Route, "traceparent": req.TraceParent, "Idempotency-Key": req.IdempotencyKey} {
		if v != "" {
			h.Set(k, v)
		}
	}
	start := c.cfg.Clock.Now()
	hresp, err := c.cfg.HTTPClient.Do(hreq)
	if err != nil {
		return nil, &Error{Message: err.Error(), err: err, Transport: true}
	}
	defer hresp.Body.Close()
	c.budget(hresp, base)
	if hresp.StatusCode != http.StatusOK {
		return nil, statusError(hresp)
	}
	resp := &Response{
		Route: hresp.Header.Get("x-phaseless-route"), SchedulerHint: hresp.Header.Get("x-scheduler-hint"),
		FallbackReason: hresp.Header.Get("x-fallback-reason"), RequestID: hresp.Header.Get("x-request-id"),
	}
	resp.Budget, resp.HasBudget = budgetHeader(hresp.Header)
	d := &decoder{api: c.cfg.API, clock: c.cfg.Clock, start: start, onText: onText}
	if err := d.run(hresp.Body, resp); err != nil {
		return nil, err
	}
	if resp.FallbackReason != "" {
		c.fallback(Fallback{To: resp.Route, Reason: resp.FallbackReason})
	}
	return resp, nil
}

// budget reports a response's budget header to OnBudget.
func (c *Client) budget(r *http.Response, base string) {
	if v, ok := budgetHeader(r.Header); ok && c.cfg.OnBudget != nil {
		c.cfg.OnBudget(Budget{Remaining: v, RetryAfter: retryAfter(r.Header), URL: base})
	}
}

// budgetHeader reads x-burst-budget-remaining.
func budgetHeader(h http.Header) (int64, bool) {
	v, err := strconv.ParseInt(h.Get("x-burst-budget-remaining"), 10, 64)
	return v, err == nil
}

// retryAfter reads Retry-After in delay-seconds (what Phaseless writes);
// the HTTP-date form is read too, against the response's own Date.
func retryAfter(h http.Header) time.Duration {
	s := strings.TrimSpace(h.Get("Retry-After"))
	if s == "" {
		return 0
	}
	if n, err := strconv.Atoi(s); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(s); err == nil {
		if now, err := http.ParseTime(h.Get("Date")); err == nil && t.After(now) {
			return t.Sub(now)
		}
	}
	return 0
}

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 64 << 10

// statusError reads a non-200 answer in either API's error shape.
func statusError(r *http.Response) *Error {
	raw, _ := io.ReadAll(io.LimitReader(r.Body, maxErrorBody))
	e := &Error{Status: r.StatusCode, RetryAfter: retryAfter(r.Header)}
	e.Budget, e.HasBudget = budgetHeader(r.Header)
	var body struct {
		Error *struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    any    `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &body) == nil && body.Error != nil {
		e.Message, e.Type = body.Error.Message, body.Error.Type
		if s, ok := body.Error.Code.(string); ok {
			e.Code = s
		}
	} else {
		e.Message = strings.TrimSpace(string(raw[:min(len(raw), 4<<10)]))
	}
	if e.Message == "" {
		e.Message = r.Status
	}
	return e
}
