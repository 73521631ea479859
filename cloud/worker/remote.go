package worker

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/httpapi"
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

// Remote is an OpenAI-compatible server used as an engine: generation goes
// through httpapi.Client (the same streaming client the agent uses for its
// --local-url server); Remote adds the load probes the scheduler reads.
type Remote struct {
	cfg    RemoteConfig
	base   *url.URL
	stream *httpapi.Client
	// kvClient, when set, makes the KV handoff calls instead of stream's
	// client (a push made on behalf of another coordinator).
	kvClient *http.Client
	// noKV is set once the server answered 404 on /v1/kv/ (not a
	// Phaseless cloud, or one from before KV handoffs): splits skip it.
	noKV atomic.Bool
	// phaseless is set once /metrics showed a Phaseless server's engine
	// families: it pins what cache_control marks, so breakpoints go to it.
	// vLLM and SGLang have no per-request pin and get none.
	phaseless atomic.Bool

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
	model := cfg.Model
	r := &Remote{cfg: cfg, base: base}
	stream, err := httpapi.NewClient(httpapi.ClientConfig{
		CacheControl: r.phaseless.Load,
		URL:          base.String(),
		Name:         "remote " + base.Host,
		// "auto" (or nothing) lets the server's configured model answer.
		Model: func(requested string) string {
			if requested == "" || requested == "auto" {
				return model
			}
			return requested
		},
		APIKey:            cfg.APIKey,
		ConnectTimeout:    cfg.ConnectTimeout,
		FirstTokenTimeout: cfg.FirstTokenTimeout,
		TokenTimeout:      cfg.TokenTimeout,
		Proxy:             http.ProxyFromEnvironment,
		// One connection per running stream (HTTP/1.1 streams one
		// response per connection): an idle pool smaller than the engine's
		// concurrency closes connections as streams end and dials anew for
		// the next ones (new connections' buffers were the largest share of
		// BenchmarkCoordinatorStreams' allocation at 300 streams over 64).
		// 256 is vLLM's default --max-num-seqs.
		MaxIdleConnsPerHost: 256,
	})
	if err != nil {
		return nil, fmt.Errorf("worker.RemoteConfig: %w", err)
	}
	r.stream = stream
	return r, nil
}

func (r *Remote) endpoint(path string) string { return r.base.String() + path }

// Generate implements llm.Generator by streaming a chat completion over SSE.
// Each token is passed to emit as its event arrives; cancelling ctx closes
// the connection, which stops the generation on the server.
func (r *Remote) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	return r.stream.Generate(ctx, req, emit)
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
	resp, err := r.stream.HTTP().Do(req)
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
	m := metrics.Sums(body, wantedMetrics)
	if _, ok := m["phaseless_engine_running"]; ok {
		r.phaseless.Store(true)
	}
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
	r.stream.CloseIdleConnections()
	return nil
}
