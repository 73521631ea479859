package coordinator

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/phaseless/phaseless/cloud/affinity"
	"github.com/phaseless/phaseless/cloud/prefetch"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/semantic"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/chatfmt"
	"github.com/phaseless/phaseless/models/lm/kvcache"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

// CacheConfig is the coordinator's prompt-caching layer: conversation
// affinity, the pinned-prefix directory, semantic grouping and predictive
// prefetch. The zero value turns affinity on and grouping and prefetch off
// (docs/cloud.md, "Prompt caching", has the measurements behind this).
type CacheConfig struct {
	// NoAffinity turns off routing a request to the worker holding the most
	// of its prompt while that worker has room (sched.Affinity).
	NoAffinity bool
	// Directory records where pinned prefixes live; nil = in memory (one
	// replica). Replicas sharing Redis pass an affinity.Redis.
	Directory affinity.Directory
	// Semantic groups similar requests onto one worker for every request;
	// when off, a request opts in by sending x-batch-threshold.
	Semantic bool
	Group    semantic.GroupConfig
	// Prefetch warms predicted clusters' prefixes into idle workers; a
	// request turns it off for itself with x-prefetch-hint: none.
	Prefetch      bool
	PrefetchModel prefetch.Config
}

// directoryTimeout bounds a directory lookup on the decision path: a local
// Redis answers an MGET in well under a millisecond.
const directoryTimeout = 20 * time.Millisecond

// cacheLayer is the coordinator's state for CacheConfig.
type cacheLayer struct {
	cfg     CacheConfig
	dir     affinity.Directory
	groups  *semantic.Grouper
	model   *prefetch.Model
	bs      int
	tok     tokenizer.Tokenizer
	m       cacheMetrics
	ctx     context.Context // cancelled by close: warm-ups stop
	cancel  context.CancelFunc
	wg      sync.WaitGroup // warm-ups in flight
	warming chan struct{}  // cap 1: one warm-up at a time
	now     func() time.Time
	closed  sync.Once
	err     error // of the directory's Close
}

type cacheMetrics struct {
	dirLookups, dirRecords, groups, prefetch, warmups *metrics.CounterVec
}

func newCacheLayer(cfg CacheConfig, tok tokenizer.Tokenizer, bs int, reg *metrics.Registry) (*cacheLayer, error) {
	l := &cacheLayer{cfg: cfg, dir: cfg.Directory, bs: bs, tok: tok, warming: make(chan struct{}, 1), now: time.Now}
	if cfg.Group.Now != nil {
		l.now = cfg.Group.Now
	}
	if l.dir == nil {
		l.dir = affinity.NewMemory(l.now)
	}
	var err error
	if l.groups, err = semantic.NewGrouper(cfg.Group); err != nil {
		return nil, err
	}
	if l.model, err = prefetch.New(cfg.PrefetchModel); err != nil {
		return nil, err
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.m = cacheMetrics{
		dirLookups: reg.CounterVec("phaseless_cache_directory_lookups_total", "pinned-prefix directory lookups by result (hit: a worker holds part of the prompt pinned)", "result"),
		dirRecords: reg.CounterVec("phaseless_cache_directory_records_total", "pinned prefixes written to the directory by result (error: the directory, e.g. Redis, refused or was unreachable, so other replicas will not find the pin)", "result"),
		groups:     reg.CounterVec("phaseless_semantic_groups_total", "semantic grouping events: formed (a group reached its minimum size), joined (a request placed with its group), conflict (similar, but its prompt diverged)", "event"),
		prefetch:   reg.CounterVec("phaseless_prefetch_predictions_total", "requests scored against their tenant's previous prediction: hit (its cluster was predicted) or miss", "result"),
		warmups:    reg.CounterVec("phaseless_prefetch_warmups_total", "predicted prefixes warmed into an idle worker's cache, by result", "result"),
	}
	reg.CounterVecFunc("phaseless_semantic_group_closed_total", "semantic groups closed, by final size (the batch a group made)", []string{"size"}, func(emit metrics.Emit) {
		for size, n := range l.groups.Stats().Sizes {
			if n > 0 {
				emit(float64(n), strconv.Itoa(size))
			}
		}
	})
	return l, nil
}

// policy wraps the coordinator's policy in the affinity layer unless off.
func (l *cacheLayer) policy(p sched.Policy) (sched.Policy, error) {
	if l.cfg.NoAffinity {
		return p, nil
	}
	return sched.NewAffinity(p, sched.AffinityConfig{})
}

// mergePins raises each worker's PrefixBlocks to what the directory says
// it holds pinned: another replica may have placed the conversation, and a
// remote engine's cache cannot be probed.
func (l *cacheLayer) mergePins(ctx context.Context, c *Coordinator, snap *sched.Snapshot, hashes []uint64) {
	// A slow directory (Redis under strain) must not hold up placement:
	// without an answer the request is placed on the engines' own tables.
	ctx, cancel := context.WithTimeout(ctx, directoryTimeout)
	defer cancel()
	name, n, err := l.dir.Lookup(ctx, hashes)
	switch {
	case err != nil:
		l.m.dirLookups.With("error").Inc()
		return
	case n == 0:
		l.m.dirLookups.With("miss").Inc()
		return
	}
	l.m.dirLookups.With("hit").Inc()
	for i, w := range c.cfg.Workers.Workers() {
		if w.Name() == name && i < len(snap.Workers) && snap.Workers[i].PrefixBlocks < n {
			snap.Workers[i].PrefixBlocks = n
		}
	}
}

// grouping reports whether req takes part in semantic grouping.
func (l *cacheLayer) grouping(req *llm.Request) bool {
	return l.cfg.Semantic || req.Hints.BatchThreshold > 0
}

// fingerprints says whether req's semantic fingerprint is read at all: by
// grouping or the prefetcher; otherwise it is not worth its hashing.
func (l *cacheLayer) fingerprints(req *llm.Request) bool {
	return l.grouping(req) || l.cfg.Prefetch
}

// join places req with an open group of similar requests on a worker that
// has room; ok is false when there is none.
func (l *cacheLayer) join(req *llm.Request, fp *semantic.Fingerprint, m *measured, snap *sched.Snapshot) (sched.Decision, bool) {
	if !l.grouping(req) {
		return sched.Decision{}, false
	}
	before := l.groups.Stats()
	w, ok := l.groups.Join(fp, firstBlock(m.sig.BlockHashes), req.Hints.BatchThreshold)
	after := l.groups.Stats()
	if after.Conflicts > before.Conflicts {
		l.m.groups.With("conflict").Inc()
	}
	if after.Formed > before.Formed {
		l.m.groups.With("formed").Inc()
	}
	if !ok || w >= len(snap.Workers) || !snap.Workers[w].Healthy || snap.Workers[w].Load() >= 1 {
		return sched.Decision{}, false
	}
	l.m.groups.With("joined").Inc()
	return sched.Place(&m.sig, snap, w, sched.ReasonPrefix), true
}

// opened starts a group led by req on the worker the policy chose.
func (l *cacheLayer) opened(req *llm.Request, fp *semantic.Fingerprint, m *measured, worker int) {
	if l.grouping(req) {
		l.groups.Open(fp, firstBlock(m.sig.BlockHashes), worker)
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

func firstBlock(hashes []uint64) uint64 {
	if len(hashes) == 0 {
		return 0
	}
	return hashes[0]
}

// pinned records in the directory the prefixes req asked to pin, now on
// worker: each breakpoint's last full block, until its lifetime ends (a
// hit records it again, as the engine refreshes the pin).
func (l *cacheLayer) pinned(ctx context.Context, req *llm.Request, m *measured, worker string) {
	whole := l.promptTokens(chatfmt.Messages(req, false))
	for _, bp := range req.CacheBreakpoints {
		msgs := chatfmt.CachePrefix(req, bp, false)
		if msgs == nil {
			continue
		}
		n := commonLen(l.promptTokens(msgs), whole) / l.bs
		if n == 0 || n > len(m.sig.BlockHashes) {
			continue
		}
		l.record(ctx, m.sig.BlockHashes[n-1], worker, bp.TTL)
	}
}

// promptTokens renders msgs as measure does.
func (l *cacheLayer) promptTokens(msgs []llm.Message) []int32 {
	ids := l.tok.Encode(chatfmt.Prompt(msgs))
	if l.tok.AddBOS() {
		ids = append([]int32{l.tok.BOS()}, ids...)
	}
	return ids
}

func commonLen(a, b []int32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// predict scores req against its tenant's last prediction and warms the
// next predicted clusters' prefixes into idle workers, within the budget
// of req's x-prefetch-hint.
func (l *cacheLayer) predict(c *Coordinator, req *llm.Request, fp *semantic.Fingerprint, m *measured) {
	if !l.cfg.Prefetch {
		// Off, the model learns nothing: it would keep a cluster (and a
		// copy of its prompt prefix) per tenant that nothing reads.
		return
	}
	hint := prefetch.Hint(req.Hints.Prefetch)
	n, maxLoad := hint.Budget()
	if req.Hints.SemanticMode == "" {
		// A tenant's kinds of request are its conversations' topics; the
		// hybrid default, half the user's wording, splits one kind in many.
		topic := semantic.Of(req.Messages, semantic.ModeTopic)
		fp = &topic
	}
	before := l.model.Stats()
	preds := l.model.Observe(m.tenant, fp, req.Messages, n)
	after := l.model.Stats()
	if after.Hits > before.Hits {
		l.m.prefetch.With("hit").Inc()
	}
	if after.Misses > before.Misses {
		l.m.prefetch.With("miss").Inc()
	}
	for _, p := range preds {
		l.warm(c, m.tenant, p.Prefix, maxLoad)
	}
}

// warm runs the prefix through the least loaded worker under maxLoad that
// does not already hold it, generating one token, so its KV blocks are
// cached (and pinned for the shortest lifetime) before the predicted
// request comes. One warm-up runs at a time; the rest are skipped.
func (l *cacheLayer) warm(c *Coordinator, tenant string, prefix []llm.Message, maxLoad float64) {
	msgs := append(append([]llm.Message(nil), prefix...), llm.Message{Role: "user", Content: ""})
	ids := l.promptTokens(msgs)
	hashes := kvcache.BlockHashes(ids, l.bs)
	want := commonLen(l.promptTokens(prefix), ids) / l.bs
	if want == 0 {
		return
	}
	snap := c.snaps.Get().(*sched.Snapshot)
	defer c.snaps.Put(snap)
	c.cfg.Workers.Snapshot(snap, hashes)
	best := -1
	for i := range snap.Workers {
		w := &snap.Workers[i]
		if w.PrefixBlocks >= want {
			l.m.warmups.With("cached").Inc()
			return // someone holds it already: the request will go there
		}
		if w.Healthy && w.Load() <= maxLoad && (best < 0 || w.Load() < snap.Workers[best].Load()) {
			best = i
		}
	}
	if best < 0 {
		l.m.warmups.With("busy").Inc()
		return
	}
	select {
	case l.warming <- struct{}{}:
	default:
		l.m.warmups.With("skipped").Inc()
		return
	}
	w := c.cfg.Workers.Workers()[best]
	last := len(prefix) - 1
	req := &llm.Request{
		ID: "prefetch", Model: "auto", Messages: msgs, MaxTokens: 1, Tenant: tenant,
		CacheRequest: llm.CacheRequest{CacheBreakpoints: []llm.CacheBreakpoint{{Message: last, Chars: len(prefix[last].Content), TTL: llm.MinCacheTTL}}},
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer func() { <-l.warming }()
		_, _, err := w.Generate(l.ctx, req, len(ids), hashes, func(llm.Token) error { return nil })
		if err != nil {
			l.m.warmups.With("failed").Inc()
			return
		}
		l.m.warmups.With("warmed").Inc()
		l.record(l.ctx, hashes[want-1], w.Name(), llm.MinCacheTTL)
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

// after is the layer's part of a request that succeeded on worker: record
// its pins, learn from it and warm what it predicts.
func (l *cacheLayer) after(ctx context.Context, c *Coordinator, req *llm.Request, m *measured, worker string) {
	l.pinned(context.WithoutCancel(ctx), req, m, worker)
	l.predict(c, req, &m.fp, m)
}

// Close stops the prompt-caching layer's warm-ups, waiting for them, and
// closes its directory. Requests still in flight are not waited for.
func (c *Coordinator) Close() error { return c.cache.close() }

// check refuses the x-* knobs of this layer that would change nothing
// here: no header is accepted and then ignored (DESIGN.md §4).
func (l *cacheLayer) check(req *llm.Request) error {
	h := &req.Hints
	prefetching := l.cfg.Prefetch
	switch {
	case h.Prefetch != "" && h.Prefetch != string(prefetch.None) && !prefetching:
		return llm.Errorf(llm.CodeInvalid, "header x-prefetch-hint: prefetch is off on this coordinator (--cache-layers)")
	case h.SemanticMode != "" && !prefetching && !l.grouping(req):
		return llm.Errorf(llm.CodeInvalid, "header x-semantic-mode: neither semantic grouping (x-batch-threshold, --cache-layers semantic) nor prefetch is on for this request")
	}
	return nil
}
