package coordinator

import (
	"context"
	"sync"
	"time"

	"github.com/phaseless/phaseless/cloud/affinity"
	"github.com/phaseless/phaseless/cloud/place"
	"github.com/phaseless/phaseless/cloud/prefetch"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/semantic"
	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/llm"
)

// CacheConfig is the coordinator's prompt-caching layer: conversation
// affinity, the pinned-prefix directory, semantic grouping and predictive
// prefetch. The zero value turns affinity on and grouping and prefetch off
// (docs/cloud.md, "Prompt caching", has the measurements behind this).
// Where a request goes is cloud/place's decision; this layer holds what
// needs the network and goroutines: the directory and the warm-ups.
type CacheConfig struct {
	// Layers are the layers on (--cache-layers).
	Layers place.Layers
	// Directory records where pinned prefixes live; nil = in memory (one
	// replica). Replicas sharing Redis pass an affinity.Redis.
	Directory     affinity.Directory
	Group         semantic.GroupConfig
	PrefetchModel prefetch.Config
}

// directoryTimeout bounds a directory lookup on the decision path: a local
// Redis answers an MGET in well under a millisecond.
const directoryTimeout = 20 * time.Millisecond

// cacheLayer is the prompt-caching layer's network and goroutines: the
// pinned-prefix directory and the warm-ups, behind the request path's
// extension points (coordinator.go). Where requests and warm-ups go it asks
// the Placer; it reads the workers and runs warm-ups on them itself, and
// never calls back into the Coordinator.
type cacheLayer struct {
	dir     affinity.Directory
	placer  *place.Placer
	workers *worker.Set
	prompts *prompts
	snaps   sync.Pool // *sched.Snapshot for warm-ups
	m       cacheMetrics
	ctx     context.Context // cancelled by close: warm-ups stop
	cancel  context.CancelFunc
	wg      sync.WaitGroup // warm-ups in flight
	warming chan struct{}  // cap 1: one warm-up at a time
	closed  sync.Once
	err     error // of the directory's Close
}

var (
	_ pinLocator        = (*cacheLayer)(nil)
	_ responseCompleter = (*cacheLayer)(nil)
)

type cacheMetrics struct {
	dirLookups, dirRecords, prefetch, warmups *metrics.CounterVec
}

func newCacheLayer(cfg CacheConfig, workers *worker.Set, p *prompts, placer *place.Placer, reg *metrics.Registry) (*cacheLayer, error) {
	l := &cacheLayer{dir: cfg.Directory, placer: placer, workers: workers, prompts: p, warming: make(chan struct{}, 1)}
	l.snaps.New = func() any { return &sched.Snapshot{} }
	if l.dir == nil {
		l.dir = affinity.NewMemory(nil)
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.m = cacheMetrics{
		dirLookups: reg.CounterVec("phaseless_cache_directory_lookups_total", "pinned-prefix directory lookups by result (hit: a worker holds part of the prompt pinned)", "result"),
		dirRecords: reg.CounterVec("phaseless_cache_directory_records_total", "pinned prefixes written to the directory by result (error: the directory, e.g. Redis, refused or was unreachable, so other replicas will not find the pin)", "result"),
		prefetch:   reg.CounterVec("phaseless_prefetch_predictions_total", "requests scored against their tenant's previous prediction: hit (its cluster was predicted) or miss", "result"),
		warmups:    reg.CounterVec("phaseless_prefetch_warmups_total", "predicted prefixes warmed into an idle worker's cache, by result", "result"),
	}
	return l, nil
}

// locatePins is where the directory says the prompt is pinned: another
// replica may have placed the conversation, and a remote engine's cache
// cannot be probed. The Placer raises that worker's prefix to it.
func (l *cacheLayer) locatePins(m *measured) place.Pin {
	// A slow directory (Redis under strain) must not hold up placement:
	// without an answer the request is placed on the engines' own tables.
	// The layer's own context: the lookup ends with the layer, not with a
	// request, whose placement never waits past directoryTimeout anyway.
	ctx, cancel := context.WithTimeout(l.ctx, directoryTimeout)
	defer cancel()
	pin, res := affinity.Locate(ctx, l.dir, m.sig.BlockHashes, l.workerIndex)
	l.m.dirLookups.With(res.String()).Inc()
	return pin
}

// workerIndex is the index of the worker named name, -1 for one this
// replica does not have.
func (l *cacheLayer) workerIndex(name string) int {
	for i, w := range l.workers.Workers() {
		if w.Name() == name {
			return i
		}
	}
	return -1
}

// completeResponse is the layer's part of a request that succeeded on
// worker: record its pins, learn from it and warm what it predicts.
func (l *cacheLayer) completeResponse(ctx context.Context, req *llm.Request, m *measured, worker string) {
	l.pinned(context.WithoutCancel(ctx), req, m, worker)
	l.predict(m)
}

// pinned records in the directory the prefixes req asked to pin, now on
// worker: each breakpoint's last full block, until its lifetime ends (a
// hit records it again, as the engine refreshes the pin). The prefixes'
// lengths are measure's, the same the engine pinned.
func (l *cacheLayer) pinned(ctx context.Context, req *llm.Request, m *measured, worker string) {
	for i, bp := range req.CacheBreakpoints {
		if h, ok := affinity.PinnedBlock(m.sig.BlockHashes, m.prompt.Pins[i], l.prompts.bs); ok {
			l.record(ctx, h, worker, bp.TTL)
		}
	}
}

// record writes a pin to the directory, counting the writes that fail:
// a pin is still served by its worker, but other replicas will not send
// its follow-ups there.
func (l *cacheLayer) record(ctx context.Context, h uint64, worker string, ttl time.Duration) {
	if err := l.dir.Record(ctx, h, worker, ttl); err != nil {
		l.m.dirRecords.With("error").Inc()
		return
	}
	l.m.dirRecords.With("ok").Inc()
}

// predict scores req against its tenant's last prediction and warms the
// next predicted clusters' prefixes into idle workers, within the budget
// of req's x-prefetch-hint (place.Placer.Learn).
func (l *cacheLayer) predict(m *measured) {
	w := l.placer.Learn(time.Now(), &m.place)
	switch w.Score {
	case prefetch.Hit:
		l.m.prefetch.With("hit").Inc()
	case prefetch.Miss:
		l.m.prefetch.With("miss").Inc()
	}
	for _, p := range w.Predictions {
		l.warm(m.tenant, p.Prefix, w.MaxLoad)
	}
}

// warm runs the prefix through the worker the Placer picks (the least
// loaded under maxLoad, unless one holds it already), generating one
// token, so its KV blocks are cached (and pinned for the shortest
// lifetime) before the predicted request comes. One warm-up runs at a
// time; the rest are skipped.
func (l *cacheLayer) warm(tenant string, prefix []llm.Message, maxLoad float64) {
	msgs := append(append([]llm.Message(nil), prefix...), llm.Message{Role: "user", Content: ""})
	ids := l.prompts.tokens(msgs)
	hashes := l.prompts.hashes(ids)
	common := commonLen(l.prompts.tokens(prefix), ids)
	want := common / l.prompts.bs
	if want == 0 {
		return
	}
	snap := l.snaps.Get().(*sched.Snapshot)
	defer l.snaps.Put(snap)
	l.workers.Snapshot(snap, hashes)
	best, res := l.placer.WarmTarget(snap, want, maxLoad)
	if res != place.WarmOn {
		l.m.warmups.With(res.String()).Inc()
		return
	}
	select {
	case l.warming <- struct{}{}:
	default:
		l.m.warmups.With("skipped").Inc()
		return
	}
	w := l.workers.Workers()[best]
	last := len(prefix) - 1
	req := &llm.Request{
		ID: "prefetch", Model: "auto", Messages: msgs, MaxTokens: 1, Tenant: tenant,
		CacheRequest: llm.CacheRequest{CacheBreakpoints: []llm.CacheBreakpoint{{Message: last, Chars: len(prefix[last].Content), TTL: llm.MinCacheTTL}}},
	}
	// The breakpoint's prefix is prefix itself: its pin is their common
	// tokens, already counted.
	ctx := l.prompts.context(l.ctx, best, &worker.Prompt{IDs: ids, Pins: []int{common}})
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer func() { <-l.warming }()
		_, _, err := w.Generate(ctx, req, len(ids), hashes, func(llm.Token) error { return nil })
		if err != nil {
			l.m.warmups.With("failed").Inc()
			return
		}
		l.m.warmups.With("warmed").Inc()
		if h, ok := affinity.PinnedBlock(hashes, want*l.prompts.bs, l.prompts.bs); ok {
			l.record(l.ctx, h, w.Name(), llm.MinCacheTTL)
		}
	}()
}

// close stops warm-ups and waits for them, then closes the directory.
func (l *cacheLayer) close() error {
	l.closed.Do(func() {
		l.cancel()
		l.wg.Wait()
		l.err = l.dir.Close()
	})
	return l.err
}
