package client

import (
	"time"

	"github.com/phaseless/phaseless/internal/metrics"
)

// Stats is one request as the app saw it. The client's clock measures
// everything but ServerGenMean and PrefixCacheEfficiency, which the
// server's stats field reports (transport/httpapi.StatsField).
type Stats struct {
	// TTFT is from sending the request to the first text delivered,
	// retries of this attempt's predecessors not included.
	TTFT time.Duration
	// ITLMean and ITLMax are the gaps between consecutive pieces of text.
	ITLMean, ITLMax time.Duration
	// Total is from sending the request to the end of the stream.
	Total time.Duration
	// Chunks is how many pieces of text were delivered (a piece is one
	// server delta, or several when reassembly joined them).
	Chunks int
	// TokensPerSecond is completion tokens (the server's count, else
	// Chunks) over Total.
	TokensPerSecond float64
	// ServerGenMean is the engine's mean time per token, as the server
	// reported it; 0 when it did not (a server other than Phaseless).
	ServerGenMean time.Duration
	// PrefixCacheEfficiency is the share of the prompt the server served
	// from its prefix cache, valid when HasPrefixCache.
	PrefixCacheEfficiency float64
	HasPrefixCache        bool
}

// Collectors are the client's Prometheus families, registered on a
// internal/metrics registry (the project's Prometheus text exposition:
// serve it with Registry.Handler). Apps that export nothing leave
// Config.Metrics nil. A nil *Collectors records nothing.
type Collectors struct {
	ttft, itl, total *metrics.Histogram
	tps              *metrics.Histogram
	requests         *metrics.CounterVec
	retries          *metrics.CounterVec
	fallbacks        *metrics.CounterVec
}

// tokensPerSecondBuckets span an edge CPU's few tokens a second to a GPU
// pool's hundreds.
var tokensPerSecondBuckets = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}

// NewCollectors registers the client's families on reg.
func NewCollectors(reg *metrics.Registry) *Collectors {
	return &Collectors{
		ttft:      reg.Histogram("phaseless_client_ttft_seconds", "client-side time from request to first text, seconds", metrics.DefLatencyBuckets),
		itl:       reg.Histogram("phaseless_client_itl_seconds", "client-side mean gap between pieces of text per request, seconds", metrics.DefLatencyBuckets),
		total:     reg.Histogram("phaseless_client_request_seconds", "client-side time from request to end of stream, seconds", metrics.DefLatencyBuckets),
		tps:       reg.Histogram("phaseless_client_tokens_per_second", "completion tokens over request time, per request", tokensPerSecondBuckets),
		requests:  reg.CounterVec("phaseless_client_requests_total", "finished calls by outcome (ok, an HTTP status, transport, mid_stream, stream_error, callback)", "outcome"),
		retries:   reg.CounterVec("phaseless_client_retries_total", "retries by the failure that caused them", "reason"),
		fallbacks: reg.CounterVec("phaseless_client_fallbacks_total", "answers that came from elsewhere, by who moved the request (client, server)", "by"),
	}
}

func (c *Collectors) observe(r *Response) {
	if c == nil {
		return
	}
	c.requests.With("ok").Inc()
	s := r.Stats
	if s.Chunks > 0 {
		c.ttft.Observe(s.TTFT.Seconds())
	}
	if s.Chunks > 1 {
		c.itl.Observe(s.ITLMean.Seconds())
	}
	c.total.Observe(s.Total.Seconds())
	if s.TokensPerSecond > 0 {
		c.tps.Observe(s.TokensPerSecond)
	}
}

func (c *Collectors) fail(outcome string) {
	if c != nil {
		c.requests.With(outcome).Inc()
	}
}

func (c *Collectors) retry(reason string) {
	if c != nil {
		c.retries.With(reason).Inc()
	}
}

func (c *Collectors) fallback(f Fallback) {
	if c == nil {
		return
	}
	by := "server"
	if f.ByClient {
		by = "client"
	}
	c.fallbacks.With(by).Inc()
}
