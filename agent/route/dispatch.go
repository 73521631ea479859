package route

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/phaseless/phaseless/models/textfeat"
	"github.com/phaseless/phaseless/transport/fleet"
	"github.com/phaseless/phaseless/transport/llm"
	"github.com/phaseless/phaseless/transport/metrics"
)

// Recorder stores one telemetry record per request (agent/telemetry's Store
// via AppendRequest). It must not block for long: the Dispatcher calls it
// after the response has ended.
type Recorder func(ctx context.Context, rec fleet.RequestRecord) error

// DispatcherConfig wires a Dispatcher to its engines and signals.
type DispatcherConfig struct {
	Router *Router
	Local  llm.Generator // required: the device's engine runner (agent/local)
	Cloud  llm.Generator // the QUIC uplink; nil = offline-only
	// Link reports the uplink's state; nil means "configured and connected"
	// when Cloud is set.
	Link func() Link
	// Load reports the local engine's load; nil means idle.
	Load func() Load
	// CloudFirstToken bounds how long a cloud request may go without its
	// first token before it is cancelled and run locally (default 15 s). A
	// device must not hang on an uplink that accepts requests and then goes
	// quiet (a half-open connection, a handshake that never completes).
	CloudFirstToken time.Duration
	// Record receives the telemetry record of every request; nil drops them.
	Record  Recorder
	Metrics *metrics.Registry
	Logger  *slog.Logger
}

// Dispatcher is the agent's llm.Generator: decide, run, fall back, record.
type Dispatcher struct {
	cfg DispatcherConfig
	log *slog.Logger
	m   dispatchMetrics
}

var _ llm.Generator = (*Dispatcher)(nil)

// NewDispatcher checks cfg and returns a Dispatcher.
func NewDispatcher(cfg DispatcherConfig) (*Dispatcher, error) {
	switch {
	case cfg.Router == nil:
		return nil, errors.New("route: DispatcherConfig.Router is required")
	case cfg.Local == nil:
		return nil, errors.New("route: DispatcherConfig.Local is required")
	}
	if cfg.CloudFirstToken == 0 {
		cfg.CloudFirstToken = 15 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Dispatcher{cfg: cfg, log: log, m: newDispatchMetrics(cfg.Metrics)}, nil
}

func (d *Dispatcher) link() Link {
	if d.cfg.Cloud == nil {
		return Link{}
	}
	if d.cfg.Link == nil {
		return Link{Configured: true, Connected: true}
	}
	l := d.cfg.Link()
	l.Configured = true
	return l
}

func (d *Dispatcher) load() Load {
	if d.cfg.Load == nil {
		return Load{}
	}
	return d.cfg.Load()
}

// timedEmit forwards tokens unchanged and measures them on the way.
type timedEmit struct {
	emit   llm.Emit
	start  time.Time
	first  time.Time
	last   time.Time
	tokens int
	itl    *metrics.Histogram
}

func (t *timedEmit) forward(tok llm.Token) error {
	now := time.Now()
	if t.tokens == 0 {
		t.first = now
	} else {
		t.itl.Observe(now.Sub(t.last).Seconds())
	}
	t.last = now
	t.tokens++
	return t.emit(tok)
}

// Generate implements llm.Generator.
func (d *Dispatcher) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	start := time.Now()
	dec := d.cfg.Router.Decide(req, d.link(), d.load())
	d.m.decisions.With(dec.Path).Inc()
	meta := llm.MetaFrom(ctx)
	te := &timedEmit{emit: emit, start: start, itl: d.m.itl}

	path, fallback := dec.Path, ""
	var fin llm.Final
	var err error
	if path == PathCloud && d.cfg.Cloud == nil {
		// Forced to the cloud on a device that has none configured.
		path, fallback = PathLocal, "no cloud configured"
	}
	if path == PathCloud {
		meta.SetRoute(PathCloud)
		fin, err = d.generateCloud(ctx, req, te)
		if err != nil && te.tokens == 0 && ctx.Err() == nil {
			switch {
			case errors.Is(err, errNoFirstToken):
				fallback = fmt.Sprintf("cloud sent no token within %v", d.cfg.CloudFirstToken)
			case eligibleForFallback(ctx, err):
				fallback = "cloud failed before first token: " + err.Error()
			}
			if fallback != "" {
				path, err = PathLocal, nil
			}
		}
	}
	if path == PathLocal {
		meta.SetRoute(PathLocal)
		if fallback != "" {
			d.m.fallbacks.With(fallbackKind(fallback)).Inc()
			meta.SetFallbackReason(fallback)
			d.log.Info("falling back to the local engine", "id", req.ID, "reason", fallback)
		}
		fin, err = d.cfg.Local.Generate(ctx, req, te.forward)
		if reason := d.offloadReason(ctx, dec, fallback, te, err); reason != "" {
			// The device's engine refused work the router gave it (a prompt
			// longer than its context, a full queue): the cloud may still
			// take it, which beats an error.
			path, fallback = PathCloud, reason
			d.m.fallbacks.With("local_refused").Inc()
			meta.SetRoute(PathCloud)
			meta.SetFallbackReason(fallback)
			d.log.Info("offloading to the cloud", "id", req.ID, "reason", fallback)
			fin, err = d.generateCloud(ctx, req, te)
		}
	}
	if err == nil {
		if path == PathLocal || fin.Route == "" {
			fin.Route = path
		}
		fin.FallbackReason = fallback
		if te.tokens > 0 {
			fin.TTFT = te.first.Sub(start)
		}
	}
	d.record(ctx, req, dec, path, fallback, te, fin, err)
	return fin, err
}

// offloadReason says why a local failure should be retried on the cloud, or
// "" when it should not: only when the local engine refused before its first
// token for a reason another engine may not have, the router chose local by
// itself (not an x-phaseless-route override, not a fallback from the cloud),
// and the cloud is reachable.
func (d *Dispatcher) offloadReason(ctx context.Context, dec Decision, fallback string, te *timedEmit, err error) string {
	if err == nil || te.tokens > 0 || ctx.Err() != nil || fallback != "" || dec.Override == PathLocal || d.cfg.Cloud == nil || !d.link().Connected {
		return ""
	}
	switch llm.CodeOf(err) {
	case llm.CodeContextLength, llm.CodeOverloaded:
		return "local engine refused: " + err.Error()
	}
	return ""
}

var errNoFirstToken = errors.New("route: no first token from the cloud in time")

// Cloud first-token race states: whoever moves the state off waiting wins.
const (
	cloudWaiting int32 = iota
	cloudStreaming
	cloudTimedOut
)

// generateCloud runs req on the cloud, cancelling it when no token arrives
// within CloudFirstToken.
func (d *Dispatcher) generateCloud(ctx context.Context, req *llm.Request, te *timedEmit) (llm.Final, error) {
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var state atomic.Int32
	timer := time.AfterFunc(d.cfg.CloudFirstToken, func() {
		if state.CompareAndSwap(cloudWaiting, cloudTimedOut) {
			cancel(errNoFirstToken)
		}
	})
	defer timer.Stop()
	fin, err := d.cfg.Cloud.Generate(cctx, req, func(tok llm.Token) error {
		if state.Load() != cloudStreaming && !state.CompareAndSwap(cloudWaiting, cloudStreaming) {
			return errNoFirstToken // too late: the request is being run locally instead
		}
		return te.forward(tok)
	})
	if err != nil && state.Load() == cloudTimedOut {
		err = errNoFirstToken
	}
	return fin, err
}

// eligibleForFallback: the client is still there and the failure is the
// cloud's, not the request's (an invalid request fails locally too).
func eligibleForFallback(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	switch llm.CodeOf(err) {
	case llm.CodeInvalid, llm.CodeContextLength, llm.CodeCancelled:
		return false
	}
	return true
}

func fallbackKind(reason string) string {
	switch {
	case reason == "no cloud configured":
		return "no_cloud"
	case strings.HasPrefix(reason, "cloud sent no token"):
		return "cloud_timeout"
	}
	return "cloud_error"
}

func (d *Dispatcher) record(ctx context.Context, req *llm.Request, dec Decision, path, fallback string, te *timedEmit, fin llm.Final, err error) {
	rec := fleet.RequestRecord{
		TraceID:          req.ID,
		Features:         dec.Features,
		FeatureVersion:   textfeat.Version,
		CloudProb:        dec.CloudProb,
		Decision:         dec.Path,
		Reason:           dec.Reason,
		Path:             path,
		FallbackReason:   fallback,
		CompletionTokens: te.tokens,
		Outcome:          "ok",
	}
	if fin.Route != "" && err == nil {
		rec.Path = fin.Route
	}
	rec.PromptTokens = fin.PromptTokens
	if err == nil && fin.CompletionTokens > 0 {
		// The engine's count: a token whose bytes completed a character
		// only with the next one reached emit merged with it.
		rec.CompletionTokens = fin.CompletionTokens
	}
	if te.tokens > 0 {
		rec.TTFTMillis = ms(te.first.Sub(te.start))
		d.m.ttft.With(path).Observe(te.first.Sub(te.start).Seconds())
	}
	if te.tokens > 1 {
		rec.ITLMillis = ms(te.last.Sub(te.first)) / float64(te.tokens-1)
	}
	if err != nil {
		rec.Outcome, rec.Error = "error", err.Error()
		if llm.CodeOf(err) == llm.CodeCancelled || ctx.Err() != nil {
			rec.Outcome = "cancelled"
		}
	}
	d.m.outcomes.With(rec.Outcome).Inc()
	if d.cfg.Record == nil {
		return
	}
	// The request's ctx may be cancelled (client gone); the record of that
	// is still wanted, so it gets its own short deadline.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if rerr := d.cfg.Record(rctx, rec); rerr != nil {
		d.m.recordErrors.Inc()
		d.log.Warn("telemetry record dropped", "id", req.ID, "err", rerr)
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// labeledHistogram is one histogram per label value (the metrics package has
// labelled counters only).
type dispatchMetrics struct {
	decisions    *metrics.LabeledCounter
	fallbacks    *metrics.LabeledCounter
	outcomes     *metrics.LabeledCounter
	recordErrors *metrics.Counter
	ttft         *metrics.HistogramVec
	itl          *metrics.Histogram
}

func newDispatchMetrics(r *metrics.Registry) dispatchMetrics {
	if r == nil {
		r = metrics.NewRegistry()
	}
	m := dispatchMetrics{
		decisions:    r.LabeledCounter("phaseless_route_decisions_total", "router decisions by chosen path", "path"),
		fallbacks:    r.LabeledCounter("phaseless_route_fallbacks_total", "requests run locally although the cloud was chosen, by cause", "cause"),
		outcomes:     r.LabeledCounter("phaseless_route_requests_total", "requests by outcome", "outcome"),
		recordErrors: r.Counter("phaseless_route_telemetry_errors_total", "telemetry records that could not be stored"),
		itl:          r.Histogram("phaseless_route_itl_seconds", "inter-token latency as the router forwards tokens, seconds", metrics.DefLatencyBuckets),
		ttft:         r.HistogramVec("phaseless_route_ttft_seconds", "time to first token by the path the request ran on, seconds", metrics.DefLatencyBuckets, "path"),
	}
	return m
}
