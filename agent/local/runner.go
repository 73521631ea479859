package local

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/phaseless/phaseless/internal/tracing"
	"github.com/phaseless/phaseless/llm"
)

// Config bounds a Runner.
type Config struct {
	// Concurrency is how many generations run on the engine at once
	// (default 4). The built-in engine batches them in its step loop; an
	// external server gets at most this many connections.
	Concurrency int
	// QueueDepth is how many requests may wait for a slot (default 64);
	// further requests fail at once with llm.CodeOverloaded (HTTP 503).
	QueueDepth int
	// KVFaultsPerMs reads the engine's recent KV-cache fault rate; nil = 0.
	KVFaultsPerMs func() float64
}

func (c *Config) fill() {
	if c.Concurrency == 0 {
		c.Concurrency = 4
	}
	if c.QueueDepth == 0 {
		c.QueueDepth = 64
	}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	if c.Concurrency < 0 {
		return fmt.Errorf("local: Concurrency %d must be positive", c.Concurrency)
	}
	if c.QueueDepth < 0 {
		return fmt.Errorf("local: QueueDepth %d must not be negative", c.QueueDepth)
	}
	return nil
}

// Runner is a bounded queue in front of one engine.
type Runner struct {
	eng     llm.Generator
	cfg     Config
	slots   chan struct{} // one token per running generation
	waiting atomic.Int64
	running atomic.Int64
	refused atomic.Uint64
}

var _ llm.Generator = (*Runner)(nil)

// NewRunner returns a Runner over eng.
func NewRunner(eng llm.Generator, cfg Config) (*Runner, error) {
	if eng == nil {
		return nil, errors.New("local: nil engine")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.fill()
	return &Runner{eng: eng, cfg: cfg, slots: make(chan struct{}, cfg.Concurrency)}, nil
}

// Generate waits for a slot (or fails fast when the queue is full) and runs
// req on the engine. ctx ending while it waits or runs cancels it.
func (r *Runner) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	_, queued := tracing.Child(ctx, "queueing", attribute.String("phaseless.queue", "local"))
	if err := r.acquire(ctx); err != nil {
		tracing.End(queued, err)
		return llm.Final{}, err
	}
	queued.End()
	r.running.Add(1)
	defer func() {
		r.running.Add(-1)
		<-r.slots
	}()
	emit, done := tracing.Generation(ctx, emit)
	fin, err := r.eng.Generate(ctx, req, emit)
	done(fin, err)
	return fin, err
}

// acquire takes an engine slot, waiting in the queue when all are busy.
func (r *Runner) acquire(ctx context.Context) error {
	select {
	case r.slots <- struct{}{}: // a free slot: no queueing at all
	default:
		if w := r.waiting.Add(1); w > int64(r.cfg.QueueDepth) {
			r.waiting.Add(-1)
			r.refused.Add(1)
			// Retry-After: a second is a few local answers at the built-in
			// engine's speed; a client that waits it finds the queue moved.
			return &llm.Error{Code: llm.CodeOverloaded, Retryable: true, RetryAfter: time.Second,
				Message: fmt.Sprintf("local engine overloaded: %d running and %d waiting (queue depth %d)", r.running.Load(), w-1, r.cfg.QueueDepth)}
		}
		select {
		case r.slots <- struct{}{}:
			r.waiting.Add(-1)
		case <-ctx.Done():
			r.waiting.Add(-1)
			return context.Cause(ctx)
		}
	}
	return nil
}

// Load is the runner's current state.
type Load struct {
	Waiting, Running, QueueDepth, Concurrency int
	Refused                                   uint64
	KVFaultsPerMs                             float64
}

// Load reports the queue and the engine's KV fault rate.
func (r *Runner) Load() Load {
	l := Load{
		Waiting: int(r.waiting.Load()), Running: int(r.running.Load()),
		QueueDepth: r.cfg.QueueDepth, Concurrency: r.cfg.Concurrency, Refused: r.refused.Load(),
	}
	if r.cfg.KVFaultsPerMs != nil {
		l.KVFaultsPerMs = r.cfg.KVFaultsPerMs()
	}
	return l
}
