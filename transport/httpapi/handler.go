package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/llm"
)

// Handler serves the compatible API surface in front of one llm.Generator.
// Mount it at "/v1/" (it answers only its own paths).
type Handler struct {
	gen  llm.Generator
	opts Options
	m    handlerMetrics
}

var _ http.Handler = (*Handler)(nil)

// NewHandler returns a Handler that runs every request through gen.
func NewHandler(gen llm.Generator, opts Options) (*Handler, error) {
	if gen == nil {
		return nil, errors.New("httpapi: nil generator")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.fill()
	return &Handler{gen: gen, opts: opts, m: newHandlerMetrics(opts.Metrics)}, nil
}

// ServeHTTP dispatches the API paths; anything else is a 404 in the
// OpenAI shape.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a := apiOpenAI
	if r.URL.Path == "/v1/messages" {
		a = apiAnthropic
	}
	if n := headerBytes(r); n > h.opts.MaxHeaderBytes {
		h.fail(w, a, &apiError{
			status: http.StatusRequestHeaderFieldsTooLarge, code: llm.CodeInvalid,
			message: "request header block is " + strconv.Itoa(n) + " bytes; the limit is " + strconv.Itoa(h.opts.MaxHeaderBytes),
			oaiType: "invalid_request_error", oaiCode: "headers_too_large", antType: "invalid_request_error",
		})
		return
	}
	switch r.URL.Path {
	case "/v1/chat/completions", "/v1/messages", "/v1/completions":
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			h.fail(w, a, &apiError{status: http.StatusMethodNotAllowed, code: llm.CodeInvalid, message: r.Method + " not allowed; use POST",
				oaiType: "invalid_request_error", antType: "invalid_request_error"})
			return
		}
	case "/v1/models":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", http.MethodGet)
			h.fail(w, a, &apiError{status: http.StatusMethodNotAllowed, code: llm.CodeInvalid, message: r.Method + " not allowed; use GET",
				oaiType: "invalid_request_error", antType: "invalid_request_error"})
			return
		}
	default:
		h.fail(w, a, notFound("no route for %s %s", r.Method, r.URL.Path))
		return
	}
	tenant := ""
	if h.opts.Authenticate != nil {
		t, err := h.opts.Authenticate(r)
		if err != nil {
			e := fromError(err)
			if llm.CodeOf(err) == llm.CodeInternal { // a bare error from the authenticator means "not authenticated"
				e = fromError(&llm.Error{Code: llm.CodeAuth, Message: err.Error()})
			}
			h.fail(w, a, e)
			return
		}
		tenant = t
	}
	switch r.URL.Path {
	case "/v1/models":
		h.serveModels(w, r)
	case "/v1/chat/completions":
		h.serveChat(w, r, tenant)
	case "/v1/completions":
		h.serveCompletions(w, r, tenant)
	case "/v1/messages":
		h.serveMessages(w, r, tenant)
	}
}

// headerBytes approximates the header block's size on the wire ("Name: value\r\n").
func headerBytes(r *http.Request) int {
	n := len("Host: \r\n") + len(r.Host)
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

func (h *Handler) fail(w http.ResponseWriter, a api, e *apiError) {
	h.m.requests.With(strconv.Itoa(e.status)).Inc()
	if e.status >= 500 {
		h.opts.Logger.Warn("request failed", "api", a.String(), "status", e.status, "code", string(e.code), "err", e.message)
	}
	e.write(w, a)
}

// readBody reads the request body within MaxBodyBytes.
// decodeRequest is the common start of both APIs: read the bounded body,
// decode it with the API's decoder, parse the x-* hints and stamp the ids.
// On failure it answers in the API's error shape and returns false.
func decodeRequest[X any](h *Handler, w http.ResponseWriter, r *http.Request, a api, tenant string,
	decode func([]byte, limits) (*llm.Request, X, *apiError)) (*llm.Request, X, bool) {
	var (
		req   *llm.Request
		extra X
	)
	body, e := h.readBody(w, r)
	if e == nil {
		req, extra, e = decode(body, h.limits())
	}
	if e == nil {
		req.Hints, e = parseHints(r.Header, h.opts.AllowPolicyHint)
	}
	if e == nil && h.opts.Cloud && req.Hints.Route == "local" {
		e = invalid("x-phaseless-route", "header x-phaseless-route: local asks for the device's own engine, and this is the cloud: send it to the agent on the device")
	}
	if e == nil {
		e = promptCache(a, body, req)
	}
	if e == nil {
		req.Trace, e = parseTrace(r.Header)
	}
	if e != nil {
		h.fail(w, a, e)
		return nil, extra, false
	}
	req.ID, req.Tenant = newID(), tenant
	req.IdempotencyKey = r.Header.Get("Idempotency-Key")
	if v := strings.TrimSpace(r.Header.Get(KVHandoffHeader)); v != "" {
		if !h.opts.AllowKVHandoff {
			h.fail(w, a, invalid(KVHandoffHeader, "header %s is accepted only by a cloud worker", KVHandoffHeader))
			return nil, extra, false
		}
		req.KVHandoff = v
	}
	return req, extra, true
}

func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &apiError{status: http.StatusRequestEntityTooLarge, code: llm.CodeInvalid,
				message: "request body exceeds " + strconv.FormatInt(h.opts.MaxBodyBytes, 10) + " bytes",
				oaiType: "invalid_request_error", antType: "request_too_large"}
		}
		return nil, invalid("", "read request body: %v", err)
	}
	return body, nil
}

// limits are the bounds a decoder validates against.
type limits struct {
	maxTokens, defaultTokens int
	models                   func() []Model
}

func (h *Handler) limits() limits {
	return limits{maxTokens: h.opts.MaxOutputTokens, defaultTokens: h.opts.DefaultOutputTokens, models: h.opts.Models}
}

// checkModel accepts "auto", an empty name (= auto) and listed models.
func (l limits) checkModel(name string) (string, *apiError) {
	if name == "" || name == "auto" {
		return "auto", nil
	}
	if l.models == nil {
		return name, nil
	}
	for _, m := range l.models() {
		if m.ID == name {
			return name, nil
		}
	}
	return "", notFound("model %q does not exist; use \"auto\" or one listed at /v1/models", name)
}

func (l limits) checkMaxTokens(param string, n int) *apiError {
	if n < 1 || n > l.maxTokens {
		return invalid(param, "%s must be between 1 and %d, got %d", param, l.maxTokens, n)
	}
	return nil
}

// parseTemperature accepts a JSON number in [0, 2] or one of the named
// levels of DESIGN.md §4. Missing means 1.0, both official APIs' default.
func parseTemperature(raw json.RawMessage) (float64, *apiError) {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return 1.0, nil
	}
	if s[0] == '"' {
		var name string
		if err := json.Unmarshal(raw, &name); err != nil {
			return 0, invalid("temperature", "temperature: %v", err)
		}
		switch strings.ToLower(name) {
		case "low":
			return 0.2, nil
		case "balanced":
			return 0.7, nil
		case "high":
			return 1.0, nil
		}
		return 0, invalid("temperature", "temperature %q is not a number or one of low, balanced, high", name)
	}
	var t float64
	if err := json.Unmarshal(raw, &t); err != nil {
		return 0, invalid("temperature", "temperature must be a number or one of low, balanced, high")
	}
	if t < 0 || t > 2 {
		return 0, invalid("temperature", "temperature must be between 0 and 2, got %g", t)
	}
	return t, nil
}

// parseHints reads the optional x-* request headers of DESIGN.md §4.
func parseHints(hdr http.Header, allowPolicy bool) (llm.Hints, *apiError) {
	var hints llm.Hints
	oneOf := func(name string, allowed ...string) (string, *apiError) {
		v := strings.ToLower(strings.TrimSpace(hdr.Get(name)))
		if v == "" {
			return "", nil
		}
		for _, a := range allowed {
			if v == a {
				return v, nil
			}
		}
		return "", invalid(name, "header %s: %q is not one of %s", name, v, strings.Join(allowed, "|"))
	}
	var e *apiError
	if hints.Route, e = oneOf("x-phaseless-route", "auto", "local", "cloud"); e != nil {
		return hints, e
	}
	if hints.Prefetch, e = oneOf("x-prefetch-hint", "high", "medium", "low", "none"); e != nil {
		return hints, e
	}
	if hints.SemanticMode, e = oneOf("x-semantic-mode", "intent", "topic", "hybrid"); e != nil {
		return hints, e
	}
	if v := strings.TrimSpace(hdr.Get("x-batch-threshold")); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0.1 || f > 0.9 {
			return hints, invalid("x-batch-threshold", "header x-batch-threshold: %q must be a number in 0.1..0.9", v)
		}
		hints.BatchThreshold = f
	}
	if v := strings.TrimSpace(hdr.Get("x-cache-ttl")); v != "" {
		s, err := strconv.Atoi(strings.TrimSuffix(v, "s"))
		if err != nil || s < 300 || s > 3600 {
			return hints, invalid("x-cache-ttl", "header x-cache-ttl: %q must be whole seconds in 300..3600", v)
		}
		hints.CacheTTL = time.Duration(s) * time.Second
	}
	if v := strings.TrimSpace(hdr.Get("x-phaseless-policy")); v != "" {
		if !allowPolicy {
			return hints, invalid("x-phaseless-policy", "header x-phaseless-policy is honoured only in --dev mode")
		}
		hints.Policy = v
	}
	return hints, nil
}

// newID returns a random trace id (24 hex digits).
func newID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// writeMeta turns a stream's begin event into response headers. It runs
// before the first byte of the body.
func writeMeta(hdr http.Header, m *llm.Meta) {
	set := func(k, v string) {
		if v != "" {
			hdr.Set(k, v)
		}
	}
	set("x-phaseless-route", m.RouteHeader())
	set("x-phaseless-route-reason", m.RouteReason)
	set("x-scheduler-hint", m.SchedulerHint)
	set("x-phaseless-decode", m.Split.String())
	set("x-fallback-reason", m.Fallback.String())
	if m.HasBudget {
		hdr.Set("x-burst-budget-remaining", strconv.FormatInt(m.BudgetRemaining, 10))
	}
	if m.EngineTTFT > 0 {
		// W3C Server Timing: browsers' devtools and phaselessctl load read
		// it; the SDKs ignore it.
		hdr.Set("Server-Timing", "engine;dur="+strconv.FormatFloat(float64(m.EngineTTFT)/1e6, 'f', 3, 64))
	}
}

// run calls the generator for one decoded request and drives a responder
// through the request's life: tokens as they arrive, then the end. It owns
// the timing metrics so both APIs measure the same thing.
func (h *Handler) run(w http.ResponseWriter, r *http.Request, a api, req *llm.Request, resp responder) {
	w.Header().Set("x-request-id", req.ID)
	start := time.Now()
	var last time.Time
	started, begun := false, false
	emit := func(t llm.Token) error {
		if t.Meta != nil { // the begin event: headers, before any body byte
			if !begun && !started {
				begun = true
				writeMeta(w.Header(), t.Meta)
			}
			return nil
		}
		now := time.Now()
		if !started {
			started = true
			h.m.ttft.Observe(now.Sub(start).Seconds())
			if err := resp.begin(w); err != nil {
				return err
			}
		} else {
			h.m.itl.Observe(now.Sub(last).Seconds())
		}
		last = now
		return resp.token(w, t)
	}
	fin, err := h.gen.Generate(r.Context(), req, emit)
	h.m.duration.Observe(time.Since(start).Seconds())
	if err != nil {
		if r.Context().Err() != nil { // the client left; nobody reads the rest
			h.m.requests.With(strconv.Itoa(fromError(context.Canceled).status)).Inc()
			return
		}
		e := fromError(err)
		if !started {
			var le *llm.Error
			if errors.As(err, &le) && le.HasBudget {
				w.Header().Set("x-burst-budget-remaining", strconv.FormatInt(le.BudgetRemaining, 10))
			}
			h.fail(w, a, e)
			return
		}
		h.m.streamErrors.Inc()
		h.m.requests.With("stream_error").Inc()
		h.opts.Logger.Warn("stream failed after tokens", "api", a.String(), "id", req.ID, "code", string(e.code), "err", e.message)
		resp.fail(w, e)
		return
	}
	if !started {
		if err := resp.begin(w); err != nil {
			return
		}
	}
	h.m.requests.With("200").Inc()
	resp.end(w, fin)
}

// responder writes one API's response shape. begin runs once, before the
// first token (or at the end when no token came); fail runs only after begin.
type responder interface {
	begin(w http.ResponseWriter) error
	token(w http.ResponseWriter, t llm.Token) error
	end(w http.ResponseWriter, fin llm.Final)
	fail(w http.ResponseWriter, e *apiError)
}

// sseHeaders prepares a text/event-stream response.
func sseHeaders(w http.ResponseWriter) {
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("X-Accel-Buffering", "no") // tell reverse proxies not to buffer tokens
	w.WriteHeader(http.StatusOK)
}

// writeEvent writes one SSE event and flushes it: tokens leave the process as
// soon as they exist. An empty name writes a data-only event (OpenAI style).
func writeEvent(w http.ResponseWriter, name string, data []byte) error {
	return writeEventStats(w, name, data, nil)
}

// writeEventStats is writeEvent with a StatsField line when stats is set.
func writeEventStats(w http.ResponseWriter, name string, data, stats []byte) error {
	buf := make([]byte, 0, len(name)+len(data)+len(stats)+32)
	if name != "" {
		buf = append(buf, "event: "...)
		buf = append(buf, name...)
		buf = append(buf, '\n')
	}
	if stats != nil {
		buf = append(buf, StatsField+": "...)
		buf = append(buf, stats...)
		buf = append(buf, '\n')
	}
	buf = append(buf, "data: "...)
	buf = append(buf, data...)
	buf = append(buf, "\n\n"...)
	if _, err := w.Write(buf); err != nil {
		return err
	}
	return http.NewResponseController(w).Flush()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

type handlerMetrics struct {
	requests     *metrics.LabeledCounter
	ttft, itl    *metrics.Histogram
	duration     *metrics.Histogram
	streamErrors *metrics.Counter
}

func newHandlerMetrics(r *metrics.Registry) handlerMetrics {
	if r == nil {
		r = metrics.NewRegistry() // unexported: nobody scrapes it
	}
	return handlerMetrics{
		requests:     r.LabeledCounter("phaseless_api_requests_total", "API requests by HTTP status (stream_error: failed after tokens were sent)", "status"),
		ttft:         r.Histogram("phaseless_api_ttft_seconds", "time from decoded request to first token, seconds", metrics.DefLatencyBuckets),
		itl:          r.Histogram("phaseless_api_itl_seconds", "time between consecutive tokens, seconds", metrics.DefLatencyBuckets),
		duration:     r.Histogram("phaseless_api_request_seconds", "generation time per request, seconds", metrics.DefLatencyBuckets),
		streamErrors: r.Counter("phaseless_api_stream_errors_total", "streams ended with an error event after tokens were sent"),
	}
}
