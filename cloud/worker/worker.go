package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/phaseless/phaseless/cloud/batch"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/internal/tracing"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/kvcache"
)

// Load is what an engine reports about itself.
type Load struct {
	Running, Waiting int
	Capacity         int     // sequences it runs at once; 0 = unknown
	KVUsage          float64 // 0..1
	KVFaultsPerMs    float64
	PrefixHitTokens  uint64 // cumulative prompt tokens served from cache; 0 = unknown
	PromptTokens     uint64 // cumulative prompt tokens run or cached; 0 = unknown
}

// Engine is one inference backend.
type Engine interface {
	llm.Generator
	// Probe checks the engine's health and returns its load. An error marks
	// the worker unhealthy until a probe succeeds again (a probe that only
	// timed out, after slowProbes in a row: see Worker.probe).
	Probe(ctx context.Context) (Load, error)
	// CachedPrefixBlocks is how many leading 16-token block hashes the engine
	// holds in its KV cache, or -1 when it cannot say (remote engines): the
	// worker then answers from the blocks it has routed there itself.
	CachedPrefixBlocks(hashes []uint64) int
	Close() error
}

var (
	_ Engine = (*Builtin)(nil)
	_ Engine = (*Remote)(nil)
)

// Config describes one worker.
type Config struct {
	Name string
	Role sched.Role
	// Capacity is how many sequences it runs at once, when the engine does
	// not say. Default 16.
	Capacity int
	// Batch, when set, holds requests in prompt-length buckets while the
	// engine is full (cloud/batch). Built-in workers use it.
	Batch *batch.Config
	// PrefixEntries sizes the index of routed prefix blocks used when the
	// engine cannot report its cache. Default 65536.
	PrefixEntries int
	// Class is the worker's GPU class as the priced policies see it
	// (`--worker URL#gpu=h100`, or a sim:// worker's GPU); zero when it
	// declared none.
	Class sched.Class
	// Model is the model the engine serves, as /v1/models lists it; a
	// request that names it may run here. "" (a remote serving whatever it
	// was started with) takes only requests for "auto".
	Model string
}

// Worker is one engine with its role and measured signals.
type Worker struct {
	cfg    Config
	eng    Engine
	batch  *batch.Batcher // nil when not batching
	burst  *BurstMeter
	prefix *prefixIndex

	inflight atomic.Int64 // generations running through this worker
	// pendingTokens and pendingReqs count the prefill work placed here
	// whose first token has not come (uncached prompt tokens, requests):
	// counted live, because a burst lands between two probes.
	pendingTokens, pendingReqs atomic.Int64
	healthy                    atomic.Bool
	load                       atomic.Pointer[Load]
	probeErr                   atomic.Pointer[string]
	slow                       atomic.Int32  // probes in a row that timed out
	tokens                     atomic.Uint64 // output tokens emitted

	closeOnce sync.Once
}

// New returns a worker on eng; the worker owns eng and closes it.
func New(cfg Config, eng Engine) (*Worker, error) {
	if cfg.Name == "" {
		return nil, fmt.Errorf("worker.Config.Name: empty")
	}
	if cfg.Role >= sched.NumRoles {
		return nil, fmt.Errorf("worker.Config.Role: %v is not a pool role", cfg.Role)
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = 16
	}
	if cfg.Capacity < 0 {
		return nil, fmt.Errorf("worker.Config.Capacity: %d must be ≥ 1", cfg.Capacity)
	}
	if cfg.PrefixEntries == 0 {
		cfg.PrefixEntries = 1 << 16
	}
	w := &Worker{cfg: cfg, eng: eng, burst: NewBurstMeter(), prefix: newPrefixIndex(cfg.PrefixEntries)}
	if cfg.Batch != nil {
		b, err := batch.New(*cfg.Batch, w.room)
		if err != nil {
			return nil, fmt.Errorf("worker %s: %w", cfg.Name, err)
		}
		w.batch = b
	}
	w.healthy.Store(true) // until a probe says otherwise
	w.load.Store(&Load{})
	return w, nil
}

// queueBatch tells the batcher's queue span from the coordinator's;
// splitHalf marks the prefill and decode spans of a split request, each on
// its own worker.
var (
	queueBatch = attribute.String("phaseless.queue", "batch")
	splitHalf  = attribute.Bool("phaseless.split", true)
)

// Name is the worker's name, as it appears in routes and metrics.
func (w *Worker) Name() string { return w.cfg.Name }

// Model is the model the worker serves; "" when unknown.
func (w *Worker) Model() string { return w.cfg.Model }

// Role is the worker's pool.
func (w *Worker) Role() sched.Role { return w.cfg.Role }

// Engine returns the worker's engine.
func (w *Worker) Engine() Engine { return w.eng }

// capacity is the engine's reported capacity, else the configured one.
func (w *Worker) capacity() int {
	if c := w.load.Load().Capacity; c > 0 {
		return c
	}
	return w.cfg.Capacity
}

// room is how many more sequences the engine would run now.
func (w *Worker) room() int { return w.capacity() - int(w.inflight.Load()) }

// Healthy reports the last probe's verdict.
func (w *Worker) Healthy() bool { return w.healthy.Load() }

// Inflight is how many generations run through this worker now.
func (w *Worker) Inflight() int { return int(w.inflight.Load()) }

// Queued is how many requests wait for this worker: in its batcher and in
// the engine's own queue.
func (w *Worker) Queued() int {
	n := w.load.Load().Waiting
	if w.batch != nil {
		n += w.batch.Waiting()
	}
	return n
}

// LastLoad returns the last probed load.
func (w *Worker) LastLoad() Load { return *w.load.Load() }

// OutputTokens is the number of tokens this worker has emitted.
func (w *Worker) OutputTokens() uint64 { return w.tokens.Load() }

// Signals fills s with the worker's state for a request whose prompt has
// the given block hashes. It does not allocate.
func (w *Worker) Signals(s *sched.Worker, hashes []uint64, now time.Time) {
	l := w.load.Load()
	batched := 0
	if w.batch != nil {
		batched = w.batch.Waiting()
	}
	FillSignals(s, w.cfg.Role, w.healthy.Load(), int(w.inflight.Load()), batched, w.capacity(), l, w.burst.Sigma(now))
	if len(hashes) > 0 {
		s.PrefixBlocks = w.cachedBlocks(hashes)
	}
	s.PendingPrefill, s.Prefilling, s.Class = int(w.pendingTokens.Load()), int(w.pendingReqs.Load()), w.cfg.Class
}

func (w *Worker) cachedBlocks(hashes []uint64) int {
	n := w.eng.CachedPrefixBlocks(hashes)
	if n < 0 {
		n = w.prefix.match(hashes)
	}
	return n
}

// PendingPrefill is the uncached prompt tokens placed on the worker whose
// first token has not come, and how many requests they belong to.
func (w *Worker) PendingPrefill() (tokens, requests int) {
	return int(w.pendingTokens.Load()), int(w.pendingReqs.Load())
}

// prefilling counts a request's uncached prompt as pending on w until done
// is called (its first token, or the end of its prefill): blockTokens is
// the prompt's block size in tokens.
func (w *Worker) prefilling(promptTokens int, hashes []uint64) (done func()) {
	n := int64(max(1, promptTokens-w.cachedBlocks(hashes)*kvcache.DefaultBlockSize))
	w.pendingTokens.Add(n)
	w.pendingReqs.Add(1)
	var once sync.Once
	return func() {
		once.Do(func() {
			w.pendingTokens.Add(-n)
			w.pendingReqs.Add(-1)
		})
	}
}

// FillSignals turns what a worker knows about itself into the scheduler's
// view of it: inflight generations, requests held in its batcher, the
// capacity in force, the last probed engine load and the output σ. Worker
// and the GPU simulator (cloud/sim) both build their signals with it, so
// the policies see simulated workers exactly as they see live ones.
// PrefixBlocks is left 0 for the caller's prefix probe.
func FillSignals(s *sched.Worker, role sched.Role, healthy bool, inflight, batched, capacity int, l *Load, sigma float64) {
	*s = sched.Worker{
		Role:          role,
		Healthy:       healthy,
		Running:       max(inflight, l.Running),
		Queued:        l.Waiting + batched,
		Capacity:      capacity,
		KVUsage:       l.KVUsage,
		KVFaultsPerMs: l.KVFaultsPerMs,
		BurstSigma:    sigma,
	}
}

// Generate runs req on this worker: it waits in the batcher if the engine is
// full, then streams the engine's tokens through emit, measuring burstiness.
// batchSize is the size of the batch the request was released with.
func (w *Worker) Generate(ctx context.Context, req *llm.Request, promptTokens int, hashes []uint64, emit llm.Emit) (fin llm.Final, batchSize int, err error) {
	prefilled := w.prefilling(promptTokens, hashes)
	defer prefilled()
	counted := w.counted(emit)
	batchSize, err = w.slot(ctx, promptTokens, hashes, func() error {
		emit, done := tracing.Generation(ctx, func(t llm.Token) error {
			prefilled() // the first token ends the request's pending prefill
			return counted(t)
		})
		var err error
		fin, err = w.eng.Generate(ctx, req, emit)
		done(fin, err)
		return err
	})
	return fin, batchSize, err
}

// counted wraps emit to measure burstiness and count output tokens.
func (w *Worker) counted(emit llm.Emit) llm.Emit {
	return func(t llm.Token) error {
		w.burst.Record(time.Now())
		w.tokens.Add(1)
		return emit(t)
	}
}

// slot runs fn as one of the engine's sequences: after the batcher releases
// it when the engine is full, counted in Inflight while it runs. hashes are
// the prompt's blocks, which the engine will hold afterwards.
func (w *Worker) slot(ctx context.Context, promptTokens int, hashes []uint64, fn func() error) (batchSize int, err error) {
	batchSize = 1
	if w.batch != nil {
		_, span := tracing.Child(ctx, "queueing", queueBatch)
		batchSize, err = w.batch.Wait(ctx, promptTokens)
		tracing.End(span, err)
		if err != nil {
			if err == batch.ErrClosed {
				err = llm.Errorf(llm.CodeUnavailable, "worker %s is shutting down", w.cfg.Name)
			}
			return 0, err
		}
	}
	w.inflight.Add(1)
	defer func() {
		w.inflight.Add(-1)
		if w.batch != nil {
			w.batch.Kick()
		}
	}()
	w.prefix.add(hashes)
	return batchSize, fn()
}

// CanSplit reports whether the worker's engine can take either half of a
// split request (Splitter).
func (w *Worker) CanSplit() bool {
	if _, ok := w.eng.(Splitter); !ok {
		return false
	}
	if s, ok := w.eng.(interface{ SplitSupported() bool }); ok {
		return s.SplitSupported()
	}
	return true
}

// Prefill runs the prefill half of a split on this worker, in its batch,
// and delivers the KV blocks to dst, whose Resume then decodes.
func (w *Worker) Prefill(ctx context.Context, req *llm.Request, promptTokens int, hashes []uint64, dst *Worker) (Handoff, int, error) {
	if !w.CanSplit() {
		return Handoff{}, 0, stageErr(StagePrefill, ErrSplitUnsupported)
	}
	if !dst.CanSplit() {
		return Handoff{}, 0, stageErr(StageTransfer, ErrSplitUnsupported)
	}
	return w.prefillTo(ctx, req, promptTokens, hashes, dst.eng)
}

func (w *Worker) prefillTo(ctx context.Context, req *llm.Request, promptTokens int, hashes []uint64, dst Engine) (Handoff, int, error) {
	sp, ok := w.eng.(Splitter)
	if !ok {
		return Handoff{}, 0, stageErr(StagePrefill, ErrSplitUnsupported)
	}
	var h Handoff
	done := w.prefilling(promptTokens, hashes)
	defer done()
	size, err := w.slot(ctx, promptTokens, hashes, func() error {
		_, span := tracing.Child(ctx, "prefill", splitHalf)
		var err error
		h, err = sp.PrefillTo(ctx, req, dst)
		tracing.End(span, err)
		return err
	})
	if err != nil {
		return Handoff{}, size, stageErr(StagePrefill, err)
	}
	return h, size, nil
}

// Resume runs the decode half of a split on this worker from the blocks
// Prefill delivered, streaming its tokens through emit.
func (w *Worker) Resume(ctx context.Context, req *llm.Request, h Handoff, promptTokens int, hashes []uint64, emit llm.Emit) (fin llm.Final, batchSize int, err error) {
	sp, ok := w.eng.(Splitter)
	if !ok {
		return llm.Final{}, 0, stageErr(StageResume, ErrSplitUnsupported)
	}
	batchSize, err = w.slot(ctx, promptTokens, hashes, func() error {
		_, span := tracing.Child(ctx, "decode", splitHalf)
		var err error
		fin, err = sp.Resume(ctx, req, h, w.counted(emit))
		tracing.End(span, err)
		return err
	})
	if err != nil {
		return fin, batchSize, stageErr(StageResume, err)
	}
	return fin, batchSize, nil
}

// slowProbes is how many probes in a row may time out before the worker
// is marked unhealthy. A busy engine (or a loaded host) can answer one
// /metrics probe late while it serves every request: one late answer took
// a whole simulated pool out of service in a test on a loaded machine.
const slowProbes = 3

// probe refreshes health and load. A probe that fails outright (refused,
// an error status, a bad answer) marks the worker unhealthy at once: the
// scheduler should stop sending work to an engine it cannot reach. One that
// only timed out does after slowProbes in a row. A single success brings it
// back.
func (w *Worker) probe(ctx context.Context) {
	l, err := w.eng.Probe(ctx)
	if err != nil {
		msg := err.Error()
		w.probeErr.Store(&msg)
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil && w.slow.Add(1) < slowProbes {
			return
		}
		w.healthy.Store(false)
		return
	}
	w.slow.Store(0)
	w.probeErr.Store(nil)
	w.load.Store(&l)
	w.healthy.Store(true)
}

// ProbeError is the last probe's error, empty when healthy.
func (w *Worker) ProbeError() string {
	if p := w.probeErr.Load(); p != nil {
		return *p
	}
	return ""
}

// Close stops the batcher and closes the engine. Idempotent.
func (w *Worker) Close() error {
	var err error
	w.closeOnce.Do(func() {
		if w.batch != nil {
			w.batch.Close()
		}
		err = w.eng.Close()
	})
	return err
}
