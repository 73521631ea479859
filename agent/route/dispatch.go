package route

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/internal/tracing"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/textfeat"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// Recorder stores one telemetry record per request (agent/telemetry's Store
// via AppendRequest). The Dispatcher calls it before Generate returns, so
// before the caller writes the response's end: a Recorder that returns once
// the record is durable makes every answered request leave a record.
type Recorder func(ctx context.Context, rec fleetwire.RequestRecord) error

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
	Record Recorder
	// Shadow is told of every request the cloud answered, with the
	// router's score, so that a shadow sample (agent/shadow) covers the
	// requests of both routes; nil: none.
	Shadow  Shadower
	Metrics *metrics.Registry
	Logger  *slog.Logger
}

// Shadower runs a sampled request on the device's engine beside the
// cloud's answer, off the request's path (agent/shadow's Tap).
type Shadower interface {
	ShadowCloud(req *llm.Request, cloudProb float64)
}

type cloudProbKey struct{}

// CloudProb is the router's score of the request a local engine is
// answering, when the Dispatcher runs it (ok false otherwise): shadow
// sampling sends it with the sample, to calibrate the threshold on.
func CloudProb(ctx context.Context) (p float64, ok bool) {
	p, ok = ctx.Value(cloudProbKey{}).(float64)
	return p, ok
}

// Dispatcher is the agent's llm.Generator: decide, run, fall back, record.
type Dispatcher struct {
	cfg    DispatcherConfig
	log    *slog.Logger
	m      dispatchMetrics
	router atomic.Pointer[Router] // cfg.Router until SetRouter
}

// SetRouter swaps the router for the requests that start from now on (a
// fleet config changed its threshold); requests in flight keep theirs.
func (d *Dispatcher) SetRouter(r *Router) { d.router.Store(r) }

// Router is the router new requests are decided by.
func (d *Dispatcher) Router() *Router { return d.router.Load() }

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
	d := &Dispatcher{cfg: cfg, log: log, m: newDispatchMetrics(cfg.Metrics)}
	d.router.Store(cfg.Router)
	return d, nil
}

// Link is the uplink as the router sees it now.
func (d *Dispatcher) Link() Link {
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
	st     *llm.Stream // whose begin event learns the engine's TTFT
	start  time.Time
	first  time.Time
	last   time.Time
	tokens int
	itl    *metrics.Histogram
	// reply is the text forwarded so far, kept on the cloud path so the
	// local engine can continue it (continueLocally); tools says a tool
	// call was forwarded, which cannot be continued that way.
	reply *strings.Builder
	tools bool
	cont  *llm.Continuation // set once the local engine took the reply over
}

func (t *timedEmit) forward(tok llm.Token) error {
	if tok.Meta != nil { // a begin event (the cloud's): not a token
		return t.emit(tok)
	}
	now := time.Now()
	if t.tokens == 0 {
		t.first = now
		if t.st.Meta.EngineTTFT == 0 {
			// A local engine's latency for its first token; the cloud's
			// begin event, merged before, already says its own.
			t.st.Meta.EngineTTFT = tok.EngineLatency
		}
	} else {
		t.itl.Observe(now.Sub(t.last).Seconds())
	}
	t.last = now
	t.tokens++
	if t.reply != nil {
		t.reply.WriteString(tok.Text)
		t.tools = t.tools || tok.Tool != nil
	}
	return t.emit(tok)
}

// Generate implements llm.Generator. Its stream starts with a begin event
// saying where the request ran and why it moved, merged with the cloud's
// own begin event (pool, worker, hint, budget) when it ran there.
func (d *Dispatcher) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	start := time.Now()
	_, span := tracing.Child(ctx, "scheduling")
	router := d.router.Load()
	dec := router.Decide(req, d.Link(), d.load())
	span.SetAttributes(attribute.String("phaseless.path", dec.Path), attribute.Float64("phaseless.cloud_prob", dec.CloudProb))
	span.End()
	if err := checkCloudHints(req, dec, d.cfg.Cloud != nil, router.cfg.LocalNoPins); err != nil {
		return llm.Final{}, err
	}
	if req.Raw && req.Hints.Route == PathCloud {
		return llm.Final{}, llm.Errorf(llm.CodeInvalid, "header x-phaseless-route: cloud: a raw completion (/v1/completions) runs on the device's built-in engine only; the cloud serves chat")
	}
	d.m.decisions.With(dec.Path).Inc()
	st := llm.NewStream(emit)
	te := &timedEmit{emit: st.Emit, st: st, start: start, itl: d.m.itl}

	path := dec.Path
	var fb llm.Fallback
	var fin llm.Final
	var err error
	if path == PathCloud && d.cfg.Cloud == nil {
		// Forced to the cloud on a device that has none configured.
		path, fb = PathLocal, llm.Fallback{Cause: llm.FallbackNoCloud, From: PathCloud, Detail: "no cloud configured"}
	}
	if path == PathCloud {
		st.Meta = llm.Meta{Route: llm.RouteCloud, RouteReason: dec.Reason}
		te.reply = &strings.Builder{}
		fin, err = d.generateCloud(ctx, req, te)
		if err != nil && te.tokens > 0 && !te.tools && eligibleForFallback(ctx, err) {
			fin, err = d.continueLocally(ctx, req, te, err)
		}
		if err != nil && te.tokens == 0 && ctx.Err() == nil {
			switch {
			case errors.Is(err, errNoFirstToken):
				fb = llm.Fallback{Cause: llm.FallbackCloudTimeout, From: PathCloud, Code: llm.CodeTimeout,
					Detail: fmt.Sprintf("cloud sent no token within %v", d.cfg.CloudFirstToken)}
			case eligibleForFallback(ctx, err):
				fb = llm.Fallback{Cause: llm.FallbackCloudError, From: PathCloud, Code: llm.CodeOf(err),
					Detail: "cloud failed before first token: " + err.Error()}
			}
			if fb.Cause != llm.FallbackNone {
				path, err = PathLocal, nil
			}
		}
	}
	if path == PathLocal {
		// Whatever the failed cloud attempt said about itself is dropped.
		st.Meta = llm.Meta{Route: llm.RouteLocal, RouteReason: dec.Reason, Fallback: fb}
		if fb.Cause != llm.FallbackNone {
			d.m.fallbacks.With(fb.Cause.String()).Inc()
			d.log.Info("falling back to the local engine", "id", req.ID, "cause", fb.Cause.String(), "reason", fb.Detail)
		}
		fin, err = d.cfg.Local.Generate(context.WithValue(ctx, cloudProbKey{}, dec.CloudProb), req, te.forward)
		if off, ok := d.offload(ctx, dec, fb, te, err); ok {
			// The device's engine refused work the router gave it (a prompt
			// longer than its context, a full queue): the cloud may still
			// take it, which beats an error.
			path, fb = PathCloud, off
			d.m.fallbacks.With(fb.Cause.String()).Inc()
			st.Meta = llm.Meta{Route: llm.RouteCloud, RouteReason: dec.Reason, Fallback: fb}
			d.log.Info("offloading to the cloud", "id", req.ID, "reason", fb.Detail)
			fin, err = d.generateCloud(ctx, req, te)
		}
	}
	if err == nil {
		err = st.Begin() // an answer without tokens still starts with its metadata
		if te.tokens > 0 {
			fin.TTFT = te.first.Sub(start)
		}
	}
	d.record(ctx, req, dec, path, &st.Meta, te, fin, err)
	if path == PathCloud && err == nil && d.cfg.Shadow != nil {
		d.cfg.Shadow.ShadowCloud(req, dec.CloudProb)
	}
	return fin, err
}

// continueLocally finishes a cloud answer that failed after tokens were
// delivered — its link dropped and did not come back within the uplink's
// resume deadline, or the cloud failed — on the device's engine, from the
// prompt plus the text already delivered, so the app gets one whole
// answer. The first local token carries a Continuation saying so (a field
// SDKs ignore), and telemetry records it. An answer with tool calls, or
// one asking for a response format, is not continued: the grammar would
// have to walk the delivered text first.
func (d *Dispatcher) continueLocally(ctx context.Context, req *llm.Request, te *timedEmit, cloudErr error) (llm.Final, error) {
	if req.HasTools() || req.ResponseFormat.Type == llm.FormatJSONObject || req.ResponseFormat.Type == llm.FormatJSONSchema {
		return llm.Final{}, cloudErr
	}
	reason := llm.ContinueCloudError
	if llm.CodeOf(cloudErr) == llm.CodeUnavailable {
		reason = llm.ContinueCloudLost
	}
	c := &llm.Continuation{Route: llm.RouteLocal, Reason: reason, Detail: cloudErr.Error()}
	te.cont = c
	d.m.continuations.With(reason).Inc()
	d.log.Info("continuing a cloud answer on the device", "id", req.ID, "reason", reason, "delivered", te.tokens, "err", cloudErr)
	delivered := te.tokens
	cont := *req
	cont.Continue = te.reply.String()
	cont.MaxTokens = req.MaxTokens - delivered
	te.reply = nil
	if cont.MaxTokens <= 0 {
		// The cloud sent every token it was allowed; only its final frame
		// was lost.
		return llm.Final{CompletionTokens: delivered, FinishReason: "length"}, nil
	}
	first := true
	fin, err := d.cfg.Local.Generate(ctx, &cont, func(tok llm.Token) error {
		if tok.Meta != nil {
			return nil // the response began on the cloud; its begin event stands
		}
		if first {
			tok.Continued, first = c, false
		}
		return te.forward(tok)
	})
	if err != nil {
		return llm.Final{}, err
	}
	fin.CompletionTokens += delivered
	return fin, nil
}

// offload says whether a local failure should be retried on the cloud, and
// why: only when the local engine refused before its first token for a
// reason another engine may not have, the router chose local by itself (not
// an x-phaseless-route override, not a fallback from the cloud), and the
// cloud is reachable.
func (d *Dispatcher) offload(ctx context.Context, dec Decision, fb llm.Fallback, te *timedEmit, err error) (llm.Fallback, bool) {
	if err == nil || te.tokens > 0 || ctx.Err() != nil || fb.Cause != llm.FallbackNone || dec.Override == PathLocal || d.cfg.Cloud == nil || !d.Link().Connected {
		return llm.Fallback{}, false
	}
	switch code := llm.CodeOf(err); code {
	case llm.CodeContextLength, llm.CodeOverloaded:
		return llm.Fallback{Cause: llm.FallbackLocalRefused, From: PathLocal, Code: code, Detail: "local engine refused: " + err.Error()}, true
	}
	return llm.Fallback{}, false
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
		if tok.Meta != nil { // the cloud's begin event, ahead of its first token
			if state.Load() == cloudTimedOut {
				return errNoFirstToken
			}
			return te.forward(tok)
		}
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

func (d *Dispatcher) record(ctx context.Context, req *llm.Request, dec Decision, path string, meta *llm.Meta, te *timedEmit, fin llm.Final, err error) {
	rec := fleetwire.RequestRecord{
		TraceID:          req.ID,
		Features:         dec.Features,
		FeatureVersion:   textfeat.Version,
		CloudProb:        dec.CloudProb,
		Decision:         dec.Path,
		Reason:           dec.Reason,
		Path:             path,
		FallbackReason:   meta.Fallback.String(),
		FallbackCause:    meta.Fallback.Cause.String(),
		CompletionTokens: te.tokens,
		Outcome:          "ok",
	}
	if err == nil {
		rec.Path = meta.RouteHeader() // with the cloud's pool and worker when it ran there
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
	if te.cont != nil {
		rec.ContinuedOn, rec.ContinueReason = te.cont.Route, te.cont.Reason
		rec.ContinueDetail = te.cont.Detail
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
	decisions     *metrics.LabeledCounter
	fallbacks     *metrics.LabeledCounter
	continuations *metrics.LabeledCounter
	outcomes      *metrics.LabeledCounter
	recordErrors  *metrics.Counter
	ttft          *metrics.HistogramVec
	itl           *metrics.Histogram
}

func newDispatchMetrics(r *metrics.Registry) dispatchMetrics {
	if r == nil {
		r = metrics.NewRegistry()
	}
	m := dispatchMetrics{
		decisions:     r.LabeledCounter("phaseless_route_decisions_total", "router decisions by chosen path", "path"),
		fallbacks:     r.LabeledCounter("phaseless_route_fallbacks_total", "requests run locally although the cloud was chosen, by cause", "cause"),
		continuations: r.LabeledCounter("phaseless_route_continuations_total", "cloud answers cut off mid-stream that the device's engine finished, by reason", "reason"),
		outcomes:      r.LabeledCounter("phaseless_route_requests_total", "requests by outcome", "outcome"),
		recordErrors:  r.Counter("phaseless_route_telemetry_errors_total", "telemetry records that could not be stored"),
		itl:           r.Histogram("phaseless_route_itl_seconds", "inter-token latency as the router forwards tokens, seconds", metrics.DefLatencyBuckets),
		ttft:          r.HistogramVec("phaseless_route_ttft_seconds", "time to first token by the path the request ran on, seconds", metrics.DefLatencyBuckets, "path"),
	}
	return m
}
