package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/phaseless/phaseless/cloud/admit"
	"github.com/phaseless/phaseless/cloud/place"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/semantic"
	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/internal/tracing"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/constraint"
	"github.com/phaseless/phaseless/models/lm/kvcache"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
	"github.com/phaseless/phaseless/models/textfeat"
)

// Config is what a Coordinator is built from.
type Config struct {
	Workers  *worker.Set
	Admitter *admit.Admitter
	Fair     admit.FairConfig
	Breaker  admit.BreakerConfig
	Rules    sched.RulesConfig
	// Tokenizer counts prompt tokens and cuts the blocks whose hashes are
	// matched against the workers' caches: the built-in model's, so the
	// hashes equal the engine's own.
	Tokenizer tokenizer.Tokenizer
	// CharsPerToken, when > 0, says the Tokenizer counts bytes while the
	// engines tokenize for themselves (remote servers only): the scheduler
	// then estimates a prompt's tokens as its bytes over CharsPerToken, so
	// its prefill and KV estimates are in the engines' tokens (a byte count
	// is about 4× a Llama-style tokenizer's). The hashes and the budget's
	// charge stay byte-wise.
	CharsPerToken float64
	// BlockSize is the workers' KV cache block size in tokens, which the
	// prompt's block hashes are cut at (default kvcache.DefaultBlockSize); it must
	// be the engines' EngineConfig.BlockSize or no prefix ever matches.
	BlockSize int
	// ContextLen, when > 0, is the longest context any worker takes, in
	// the Tokenizer's tokens: a prompt of that many tokens or more fits
	// none and is refused with context_length_exceeded before it is billed
	// (charged first, one over a key's budget was answered 429, which SDKs
	// retry). Zero when a worker's context is not known (remote servers):
	// the workers refuse it themselves.
	ContextLen int
	// Budget returns a tenant's own bucket; the zero Bucket means the
	// admitter's default.
	Budget func(tenant string) admit.Bucket
	// AllowPolicyOverride honours llm.Hints.Policy (x-phaseless-policy), so
	// one coordinator serves the replay's three policies (--dev only).
	AllowPolicyOverride bool
	// SLATTFT and SLAITL define a request that met its SLA: first token
	// within SLATTFT and mean inter-token gap within SLAITL. Defaults 2 s and
	// 200 ms.
	SLATTFT, SLAITL time.Duration
	// Scheduler names the policy in force (sched.Names; phaseless-cloud
	// --scheduler); empty is sched.NameScheduler, the project's default
	// (sched.DefaultPolicy). The priced policies estimate against
	// SLATTFT and SLAITL.
	Scheduler string
	// Policy, when set, is the scheduler in force instead of Scheduler's
	// (tests and embedders with a policy of their own).
	Policy  sched.Policy
	Metrics *metrics.Registry
	Logger  *slog.Logger
	// Tracer records each request's spans (tracing.go); nil records none.
	Tracer trace.TracerProvider
	// Cache is the prompt-caching layer (cache.go).
	Cache CacheConfig
}

// Coordinator is the cloud's llm.Generator: admission, placement, batching
// and streaming for every request that enters over HTTP or QUIC.
type Coordinator struct {
	cfg       Config
	fair      *admit.Fair
	breaker   *admit.Breaker
	placer    *place.Placer
	world     world
	workers   []place.Worker // what each worker is, beside its signals (View.Workers)
	predictor *sched.OutputPredictor
	snaps     sync.Pool // *sched.Snapshot, reused so a decision allocates nothing
	m         coordMetrics
	prompts   *prompts
	// cache is the prompt-caching layer, which the coordinator owns and
	// closes; the request path reaches it only through ext.
	cache *cacheLayer
	ext   extensions
}

var _ llm.Generator = (*Coordinator)(nil)

// world is what a decision reads from outside the request: the workers'
// signals and the circuit breaker. Live it is the worker set and the
// breaker; TestOnePlacementPath replays a simulator's instead.
type world interface {
	snapshot(dst *sched.Snapshot, hashes []uint64)
	breakerOpen() bool
}

// liveWorld is the coordinator's own world.
type liveWorld struct {
	set     *worker.Set
	breaker *admit.Breaker
}

func (w liveWorld) snapshot(dst *sched.Snapshot, hashes []uint64) { w.set.Snapshot(dst, hashes) }
func (w liveWorld) breakerOpen() bool                             { return w.breaker.Open() }

// The request path's extension points, in the order generate calls them
// for a request (doc.go has the whole order). Each reads the request's
// measured record; none sees the Coordinator. The prompt-caching layer
// (cache.go) fills both.
type (
	// pinLocator says where the replicas' directory has a request's
	// prompt pinned (what their engines cannot tell), before placement.
	pinLocator interface {
		locatePins(m *measured) place.Pin
	}
	// responseCompleter learns from a request that succeeded on worker,
	// after its last token.
	responseCompleter interface {
		completeResponse(ctx context.Context, req *llm.Request, m *measured, worker string)
	}
)

// extensions holds one implementation of each extension point.
type extensions struct {
	pins      pinLocator
	completer responseCompleter
}

// New validates cfg and registers the coordinator's metrics.
func New(cfg Config) (*Coordinator, error) {
	if cfg.Workers == nil || cfg.Admitter == nil || cfg.Tokenizer == nil {
		return nil, errors.New("coordinator: Workers, Admitter and Tokenizer are required")
	}
	if cfg.SLATTFT == 0 {
		cfg.SLATTFT = 2 * time.Second
	}
	if cfg.SLAITL == 0 {
		cfg.SLAITL = 200 * time.Millisecond
	}
	if cfg.SLATTFT < 0 || cfg.SLAITL < 0 {
		return nil, errors.New("coordinator: SLATTFT and SLAITL must be positive")
	}
	if cfg.BlockSize == 0 {
		cfg.BlockSize = kvcache.DefaultBlockSize
	}
	if cfg.Budget == nil {
		cfg.Budget = func(string) admit.Bucket { return admit.Bucket{} }
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.NewRegistry()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	br, err := admit.NewBreaker(cfg.Breaker)
	if err != nil {
		return nil, err
	}
	fair, err := admit.NewFair(cfg.Fair, br.Open)
	if err != nil {
		return nil, err
	}
	c := &Coordinator{cfg: cfg, fair: fair, breaker: br, predictor: sched.NewOutputPredictor(0), world: liveWorld{cfg.Workers, br}}
	if c.placer, err = place.New(place.Config{
		Scheduler: cfg.Scheduler, Policy: cfg.Policy, AllowOverride: cfg.AllowPolicyOverride,
		Options: sched.Options{Rules: cfg.Rules, SLOTTFT: cfg.SLATTFT, SLOTPOT: cfg.SLAITL},
		Layers:  cfg.Cache.Layers, Group: cfg.Cache.Group, Prefetch: cfg.Cache.PrefetchModel,
	}); err != nil {
		return nil, err
	}
	for _, w := range cfg.Workers.Workers() {
		_, remote := w.Engine().(*worker.Remote)
		_, builtin := w.Engine().(*worker.Builtin)
		c.workers = append(c.workers, place.Worker{Model: w.Model(), Remote: remote, Builtin: builtin})
	}
	c.prompts = newPrompts(cfg.Tokenizer, cfg.BlockSize, cfg.Workers.Workers())
	if c.cache, err = newCacheLayer(cfg.Cache, cfg.Workers, c.prompts, c.placer, cfg.Metrics); err != nil {
		return nil, err
	}
	c.ext = extensions{pins: c.cache, completer: c.cache}
	c.snaps.New = func() any { return &sched.Snapshot{} }
	c.m = newCoordMetrics(cfg.Metrics, c)
	return c, nil
}

// measured is what is known about a request before it is placed: the
// record the request path and its extension points share.
type measured struct {
	sig sched.Request
	// prompt is the request's one rendering and tokenization (prompt.go),
	// which its block hashes, the cache layer's pins and a built-in engine
	// all read.
	prompt worker.Prompt
	// place is what the Placer reads (its Sig points at sig); generate
	// fills it once the record stays where it is.
	place  place.Request
	tenant string
	cost   int64 // tokens charged against the budget: prompt + max output
	maxOut int
}

func (c *Coordinator) measure(req *llm.Request) measured {
	// As the engines render it (tool definitions first), so the blocks
	// hashed here are the ones they cache.
	prompt := c.prompts.of(req)
	ids := prompt.IDs
	var text strings.Builder
	for i, m := range req.Messages {
		if i > 0 {
			text.WriteByte('\n')
		}
		text.WriteString(m.Content)
	}
	tenant := req.Tenant
	if tenant == "" {
		tenant = "anonymous"
	}
	return measured{
		prompt: prompt,
		tenant: tenant,
		cost:   int64(len(ids) + req.MaxTokens),
		maxOut: req.MaxTokens,
		sig: sched.Request{
			InputTokens:     c.estimateTokens(len(ids)),
			InputChars:      text.Len(),
			EntropyBits:     textfeat.ByteEntropy(text.String()),
			PredictedOutput: c.predictor.Predict(tenant, req.MaxTokens),
			// Every hop streams (DESIGN.md §2: no token is held back), so
			// every request is scheduled as a stream.
			Stream:      true,
			BlockHashes: c.prompts.hashes(ids),
		},
	}
}

// estimateTokens is the scheduler's prompt length for n Tokenizer ids.
func (c *Coordinator) estimateTokens(n int) int {
	if c.cfg.CharsPerToken > 0 {
		return max(1, int(math.Ceil(float64(n)/c.cfg.CharsPerToken)))
	}
	return n
}

// placeRequest fills m.place, what the Placer reads about req.
func placeRequest(req *llm.Request, m *measured) {
	m.place = place.Request{Sig: &m.sig, Model: req.Model, Tenant: m.tenant, Hints: req.Hints, Messages: req.Messages,
		MaxOutput: req.MaxTokens, CarriesKV: worker.KVCarries(req)}
}

// view is the decision's View of the workers, snap filled for hashes.
func (c *Coordinator) view(snap *sched.Snapshot, hashes []uint64) place.View {
	c.world.snapshot(snap, hashes)
	return place.View{Snap: snap, Workers: c.workers, BreakerOpen: c.world.breakerOpen()}
}

// decide places a request (cloud/place) and times the decision.
func (c *Coordinator) decide(m *measured, snap *sched.Snapshot) (place.Decision, error) {
	t0 := time.Now()
	v := c.view(snap, m.sig.BlockHashes)
	m.place.Pinned = c.ext.pins.locatePins(m)
	d, err := c.placer.Place(&m.place, v)
	c.m.decision.Observe(time.Since(t0).Seconds())
	switch {
	case d.Path == place.PathGroup:
		c.m.groups.With("joined").Inc()
	case d.Group == semantic.Conflict:
		c.m.groups.With("conflict").Inc()
	}
	if d.Group == semantic.Formed {
		c.m.groups.With("formed").Inc()
	}
	return d, err
}

// fallback places a request that failed on worker failed with an
// overload, before its first token (cloud/place).
func (c *Coordinator) fallback(m *measured, snap *sched.Snapshot, failed int) (place.Decision, error) {
	return c.placer.Fallback(&m.place, c.view(snap, m.sig.BlockHashes), failed)
}

// generate is Generate inside the request's span (tracing.go).
func (c *Coordinator) generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	if req.MaxTokens <= 0 {
		return llm.Final{}, llm.Errorf(llm.CodeInvalid, "max tokens must be positive, got %d", req.MaxTokens)
	}
	// Check reads only the hints: a refused request is not measured.
	if err := c.placer.Check(&place.Request{Hints: req.Hints}); err != nil {
		return llm.Final{}, err
	}
	// A schema over the grammar's limits is refused here, before it is
	// billed and queued, rather than by the worker that compiles it
	// (issue 27: one 3.7 MB enum was billed and held a worker 11.5 s).
	if err := constraint.CheckLimits(req); err != nil {
		return llm.Final{}, err
	}
	m := c.measure(req)
	if n := len(m.prompt.IDs); c.cfg.ContextLen > 0 && n >= c.cfg.ContextLen {
		// The engine's own check and words (models/lm), ahead of billing.
		return llm.Final{}, llm.Errorf(llm.CodeContextLength, "prompt of %d tokens does not fit the context of %d", n, c.cfg.ContextLen)
	}
	placeRequest(req, &m)
	bucket := c.cfg.Budget(m.tenant)
	_, span := tracing.Child(ctx, "admission")
	remaining, err := c.cfg.Admitter.Charge(ctx, m.tenant, m.cost, bucket)
	tracing.End(span, err)
	if err != nil {
		c.m.budgetRejections.Inc() // the error carries the remaining budget
		return llm.Final{}, err
	}
	st := llm.NewStream(emit)
	st.Meta = llm.Meta{Route: llm.RouteCloud, BudgetRemaining: remaining, HasBudget: true}
	_, span = tracing.Child(ctx, "queueing", queueTenant)
	ticket, err := c.fair.Acquire(ctx, m.tenant, m.sig.InputTokens)
	tracing.End(span, err)
	if err != nil {
		c.cfg.Admitter.Refund(context.WithoutCancel(ctx), m.tenant, m.cost, bucket)
		return llm.Final{}, err
	}
	defer ticket.Release()

	snap := c.snaps.Get().(*sched.Snapshot)
	defer c.snaps.Put(snap)
	_, span = tracing.Child(ctx, "scheduling")
	var d place.Decision
	if req.KVHandoff != "" {
		d, err = c.placer.Resume(c.view(snap, m.sig.BlockHashes))
	} else {
		d, err = c.decide(&m, snap)
	}
	endScheduling(span, d.Decision, err)
	if err != nil {
		return llm.Final{}, c.finish(ctx, &m, bucket, llm.RouteCloud, llm.Final{}, llm.Errorf(llm.CodeUnavailable, "no worker can take the request: %v", err), 0)
	}
	run := c.newRun(ctx, st, ticket)
	defer run.billOutput() // before the deferred Release: the slot's last tokens count
	var fin llm.Final
	if d.Split {
		fin, err = c.runSplit(ctx, req, &m, d.Decision, run)
		switch {
		case err == nil:
			c.m.pd.handoffs.With("ok").Inc()
		case run.tokens == 0 && ctx.Err() == nil:
			c.m.pd.handoffs.With(handoffResult(err)).Inc()
			st.Meta.Fallback = splitFallback(st.Meta.Split.DecodeWorker, err)
			st.Meta.Split = llm.Split{}
			d.Split = false
			fin, err = c.runOn(ctx, req, &m, d.Decision, run)
		}
	} else {
		fin, err = c.runOn(ctx, req, &m, d.Decision, run)
	}
	if err != nil && run.tokens == 0 && fallbackEligible(err) {
		reason := string(llm.CodeOf(err))
		if !c.cfg.Admitter.AllowFallback(ctx, m.tenant) {
			c.m.fallbackDenied.Inc()
		} else {
			if fd, ferr := c.fallback(&m, snap, d.Worker); ferr == nil {
				c.m.fallbacks.With(reason).Inc()
				from := c.cfg.Workers.Workers()[d.Worker].Name()
				st.Meta.Fallback = llm.Fallback{Cause: llm.FallbackPoolOverloaded, From: from, Code: llm.CodeOf(err),
					Detail: fmt.Sprintf("%s on %s", reason, from)}
				fin, err = c.runOn(ctx, req, &m, fd.Decision, run)
				d = fd
			}
		}
	}
	if err == nil {
		err = st.Begin() // an answer without tokens still starts with its metadata
	}
	if err == nil {
		c.ext.completer.completeResponse(ctx, req, &m, c.cfg.Workers.Workers()[d.Worker].Name())
	}
	return fin, c.finish(ctx, &m, bucket, st.Meta.RouteHeader(), fin, err, run.itlSum)
}

// fallbackEligible: the 429/503-like failures of DESIGN.md §5.
func fallbackEligible(err error) bool {
	switch llm.CodeOf(err) {
	case llm.CodeOverloaded, llm.CodeUnavailable:
		return true
	}
	return false
}

// run is one request's streaming state, shared by a first attempt and its
// fallback (a fallback happens only before the first token).
type run struct {
	c      *Coordinator
	st     *llm.Stream
	ticket *admit.Ticket
	start  time.Time
	last   time.Time
	tokens int
	// ttftHist and itlHist are the pool's series, looked up once per
	// placement rather than once per token.
	ttftHist, itlHist *metrics.Histogram
	ttft              time.Duration
	itlSum            time.Duration
	// unbilled is output not yet charged to the fair queue. Charging it
	// per token took the fair queue's lock, which every stream of the
	// coordinator shares, for every token; billing every outputBillEvery
	// tokens keeps the tenant's counter at most that far behind.
	unbilled int
	// engineBase is engine time spent before the first token's own
	// latency: a split's prefill and KV transfer (0 colocated).
	engineBase time.Duration
}

// outputBillEvery is how many output tokens a run charges the fair queue at
// once. A counter a few tokens behind does not change which tenant the VTC
// queue serves next in any way that matters (a request's prompt alone is
// charged in the tens of tokens); 16 makes the lock one take per 16 tokens.
const outputBillEvery = 16

// billOutput charges the unbilled output to the run's tenant.
func (r *run) billOutput() {
	if r.unbilled > 0 {
		r.ticket.Output(r.unbilled)
		r.unbilled = 0
	}
}

func (c *Coordinator) newRun(_ context.Context, st *llm.Stream, t *admit.Ticket) *run {
	return &run{c: c, st: st, ticket: t, start: time.Now()}
}

// forward passes a token on at once — nothing is buffered — and measures it.
func (r *run) forward(t llm.Token) error {
	if t.Meta != nil { // an upstream Phaseless's begin event: folded into ours
		return r.st.Emit(t)
	}
	now := time.Now()
	if r.tokens == 0 {
		r.ttft = now.Sub(r.start)
		r.ttftHist.Observe(r.ttft.Seconds())
		// The engine's own share of the TTFT (its latency for this first
		// token), so a client can tell what the coordinator added.
		r.st.Meta.EngineTTFT = r.engineBase + t.EngineLatency
	} else {
		gap := now.Sub(r.last)
		r.itlSum += gap
		r.itlHist.Observe(gap.Seconds())
	}
	r.last = now
	r.tokens++
	r.c.m.outputTokens.Inc()
	if r.unbilled++; r.unbilled >= outputBillEvery {
		r.billOutput()
	}
	return r.st.Emit(t)
}

func (c *Coordinator) runOn(ctx context.Context, req *llm.Request, m *measured, d sched.Decision, r *run) (llm.Final, error) {
	r.engineBase = 0
	w := c.cfg.Workers.Workers()[d.Worker]
	// Placement is final for this attempt: the begin event, sent with the
	// first token, says so. A fallback attempt overwrites it.
	r.st.Meta.Pool, r.st.Meta.Worker, r.st.Meta.SchedulerHint = d.Pool.String(), w.Name(), d.Hint()
	c.m.pool.With(d.Pool.String()).Inc()
	r.ttftHist, r.itlHist = c.m.ttft.With(d.Pool.String()), c.m.itl.With(d.Pool.String())
	c.m.reasons.With(d.Reason.String()).Inc()
	fin, size, err := w.Generate(c.prompts.context(ctx, d.Worker, &m.prompt), req, m.sig.InputTokens, m.sig.BlockHashes, r.forward)
	if size > 0 {
		c.m.batchSize.Observe(float64(size))
	}
	return fin, err
}

// finish records the outcome: budget refund, breaker, SLA, prefix hits, the
// output predictor's history.
func (c *Coordinator) finish(ctx context.Context, m *measured, bucket admit.Bucket, route string, fin llm.Final, err error, itlSum time.Duration) error {
	used := int64(m.sig.InputTokens + fin.CompletionTokens)
	c.cfg.Admitter.Refund(context.WithoutCancel(ctx), m.tenant, m.cost-used, bucket)
	code := llm.CodeOf(err)
	serverErr := code == llm.CodeInternal || code == llm.CodeUnavailable || code == llm.CodeOverloaded || code == llm.CodeTimeout
	if err == nil || serverErr {
		c.breaker.Record(serverErr, fin.TTFT)
	}
	if err != nil {
		if serverErr {
			c.m.sla.With("missed").Inc()
			c.cfg.Logger.Warn("request failed", "tenant", m.tenant, "route", route, "code", string(code), "err", err)
		}
		return err
	}
	met := fin.TTFT <= c.cfg.SLATTFT
	if fin.CompletionTokens > 1 && itlSum/time.Duration(fin.CompletionTokens-1) > c.cfg.SLAITL {
		met = false
	}
	c.m.sla.With(map[bool]string{true: "met", false: "missed"}[met]).Inc()
	c.m.promptTokens.Add(float64(fin.PromptTokens))
	c.m.prefixHits.Add(float64(fin.PrefixHitTokens))
	c.predictor.Observe(m.tenant, m.maxOut, fin.CompletionTokens)
	return nil
}

// Close stops the prompt-caching layer's warm-ups, waiting for them, and
// closes its directory. Requests still in flight are not waited for.
func (c *Coordinator) Close() error { return c.cache.close() }

// Ready reports whether some worker is healthy.
func (c *Coordinator) Ready() error { return c.cfg.Workers.Ready() }

// Breaker exposes the circuit breaker's state.
func (c *Coordinator) Breaker() admit.BreakerState { return c.breaker.State() }
