package coordinator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/admit"
	"github.com/phaseless/phaseless/cloud/affinity"
	"github.com/phaseless/phaseless/cloud/place"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/semantic"
	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/internal/metrics/metricstest"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/lm/kvcache"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

// cacheCoordinator is a coordinator over two fresh built-in workers named
// w0 and w1 (same role, so the policy alone sees no difference) with the
// given prompt-caching layer.
func cacheCoordinator(t *testing.T, cc CacheConfig) (*Coordinator, *metrics.Registry, []*lm.Engine) {
	t.Helper()
	w0, e0 := builtinWorker(t, "w0", sched.RoleStream)
	w1, e1 := builtinWorker(t, "w1", sched.RoleStream)
	set, err := worker.NewSet(context.Background(), time.Hour, w0, w1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	a, err := admit.New(admit.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	tok, _ := tokenizer.ByteSpec().Build()
	reg := metrics.NewRegistry()
	c, err := New(Config{Workers: set, Admitter: a, Tokenizer: tok, Metrics: reg, Cache: cc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, reg, []*lm.Engine{e0, e1}
}

// openGroupOn opens a semantic group led by lead (which must take part in
// grouping) on worker w, as if the policy had placed it there, without
// running it: the view offers the policy w alone.
func openGroupOn(t *testing.T, c *Coordinator, lead *llm.Request, w int) {
	t.Helper()
	m := c.measure(lead)
	placeRequest(lead, &m)
	snap := &sched.Snapshot{}
	v := c.view(snap, m.sig.BlockHashes)
	for i := range snap.Workers {
		snap.Workers[i].Healthy = i == w
	}
	if d, err := c.placer.Place(&m.place, v); err != nil || d.Worker != w || d.Path != place.PathPolicy {
		t.Fatalf("lead placed %+v, %v; want worker %d by the policy", d, err, w)
	}
}

const carSystem = "You are the assistant of a family car. Answer in one short sentence about climate, navigation, media and driving."

func conversation(turns ...string) *llm.Request {
	msgs := []llm.Message{{Role: "system", Content: carSystem}}
	for i, t := range turns {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, llm.Message{Role: role, Content: t})
	}
	return &llm.Request{Model: "auto", Tenant: "fleet", MaxTokens: 2, Seed: 1, Messages: msgs}
}

func pinAll(r *llm.Request) *llm.Request {
	last := len(r.Messages) - 1
	r.CacheBreakpoints = []llm.CacheBreakpoint{{Message: last, Chars: len(r.Messages[last].Content), TTL: 5 * time.Minute}}
	return r
}

// TestReplicasRouteToThePinnedConversation: replica A pins a conversation
// on its worker w1; replica B, sharing the directory but not the engines,
// sends the follow-up turn to its w1 as well. Without the directory, B's
// policy has nothing to go on and picks w0.
func TestReplicasRouteToThePinnedConversation(t *testing.T) {
	dir := affinity.NewMemory(nil)
	a, _, _ := cacheCoordinator(t, CacheConfig{Directory: dir})
	// Where a fresh coordinator's policy puts a request of its own accord:
	// B, fresh, would put the follow-up there too.
	natural, _, _, err := generate(t, a, conversation("play some jazz"))
	if err != nil {
		t.Fatal(err)
	}
	other := map[string]int{"w0": 1, "w1": 0}[natural.Worker]
	// A's first turn goes to the other worker (it joins a group opened
	// there), and pins the conversation on it.
	first := pinAll(conversation("turn the heat up to twenty two"))
	first.Hints.BatchThreshold = 0.9
	openGroupOn(t, a, first, other)
	meta, _, fin, err := generate(t, a, first)
	if err != nil {
		t.Fatal(err)
	}
	if fin.CacheWriteTokens == 0 || meta.Worker == natural.Worker {
		t.Fatalf("first turn on %s wrote %d tokens to the cache", meta.Worker, fin.CacheWriteTokens)
	}
	pinnedOn := meta.Worker
	follow := pinAll(conversation("turn the heat up to twenty two", "Done.", "and the seats too"))

	for _, tc := range []struct {
		name string
		dir  affinity.Directory
		want bool // lands where A pinned
	}{
		{"shared directory", dir, true},
		{"own directory", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, reg, _ := cacheCoordinator(t, CacheConfig{Directory: tc.dir})
			meta, _, _, err := generate(t, b, follow)
			if err != nil {
				t.Fatal(err)
			}
			if got := meta.Worker == pinnedOn; got != tc.want {
				t.Fatalf("follow-up on %s, pinned on %s: want same=%v", meta.Worker, pinnedOn, tc.want)
			}
			fams := metricstest.Parse(t, scrape(reg))
			metricstest.CheckConventions(t, fams)
			if v, _ := metricstest.Value(fams, "phaseless_cache_directory_lookups_total", "result=hit"); (v > 0) != tc.want {
				t.Fatalf("directory hits %v", v)
			}
		})
	}
}

// TestSemanticGroupingKnobs: x-batch-threshold opts a request into
// grouping and sets how similar it must be; x-semantic-mode chooses what is
// compared.
func TestSemanticGroupingKnobs(t *testing.T) {
	lead := conversation("book a table for two at an italian place tonight")
	joined := 0.0
	for _, tc := range []struct {
		name      string
		user      string
		threshold float64
		mode      string
		grouped   bool
	}{
		{"no threshold: not grouped", "book a table for two at an italian place tomorrow", 0, "", false},
		{"similar enough", "book a table for two at an italian place tomorrow", 0.3, "", true},
		{"threshold above the similarity", "book a table for four at a sushi bar tomorrow", 0.9, "", false},
		{"threshold below it", "book a table for four at a sushi bar tomorrow", 0.2, "", true},
		{"topic mode: the shared system prompt makes them alike", "play some jazz in the car", 0.5, semantic.ModeTopic, true},
		{"intent mode: the asks differ", "play some jazz in the car", 0.5, semantic.ModeIntent, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A fresh coordinator each time: where the policy puts a request
			// of its own accord, and a group opened on the other worker.
			c, reg, _ := cacheCoordinator(t, CacheConfig{Layers: place.Layers{NoAffinity: true}})
			alone, _, _, err := generate(t, c, conversation("what is the tyre pressure"))
			if err != nil {
				t.Fatal(err)
			}
			other := map[string]int{"w0": 1, "w1": 0}[alone.Worker]
			otherName := []string{"w0", "w1"}[other]
			lead := *lead
			lead.Hints.BatchThreshold, lead.Hints.SemanticMode = 0.5, tc.mode // fingerprinted in the case's mode
			openGroupOn(t, c, &lead, other)
			req := conversation(tc.user)
			req.Hints.BatchThreshold, req.Hints.SemanticMode = tc.threshold, tc.mode
			meta, _, _, err := generate(t, c, req)
			if err != nil {
				t.Fatal(err)
			}
			if got := meta.Worker == otherName; got != tc.grouped {
				t.Fatalf("placed on %s, group on %s: want grouped=%v", meta.Worker, otherName, tc.grouped)
			}
			v, _ := metricstest.Value(metricstest.Parse(t, scrape(reg)), "phaseless_semantic_groups_total", "event=joined")
			joined += v
		})
	}
	if joined != 3 {
		t.Fatalf("joined %v times, want 3", joined)
	}
}

// TestPrefetchWarmsThePredictedPrefix: a tenant that asks the travel desk
// after the bank gets travel's system prompt warmed into an idle worker
// after its next bank request; with x-prefetch-hint: none it does not.
func TestPrefetchWarmsThePredictedPrefix(t *testing.T) {
	bank := llm.Message{Role: "system", Content: "You are the bank's assistant. Answer about accounts and deposits in one sentence."}
	travel := llm.Message{Role: "system", Content: "You are the travel desk. Book flights and hotels and answer in one sentence."}
	ask := func(sys llm.Message, user, hint string) *llm.Request {
		r := &llm.Request{Model: "auto", Tenant: "t", MaxTokens: 1, Seed: 1, Messages: []llm.Message{sys, {Role: "user", Content: user}}}
		r.Hints.Prefetch = hint
		return r
	}
	for _, tc := range []struct {
		hint string
		warm bool
	}{{"high", true}, {"none", false}} {
		t.Run(tc.hint, func(t *testing.T) {
			c, reg, engines := cacheCoordinator(t, CacheConfig{Layers: place.Layers{NoAffinity: true, Prefetch: true}})
			for _, r := range []*llm.Request{
				ask(bank, "set up direct deposit for me", tc.hint),
				ask(travel, "book a flight to boston", tc.hint),
				ask(bank, "how do i set up direct deposit", tc.hint),
			} {
				if _, _, _, err := generate(t, c, r); err != nil {
					t.Fatal(err)
				}
			}
			c.cache.wg.Wait() // the warm-up, if any
			prefix := c.prompts.tokens([]llm.Message{travel})
			hashes := kvcache.BlockHashes(prefix, kvcache.DefaultBlockSize)
			warmed := 0
			for _, e := range engines {
				warmed += e.CachedPrefixBlocks(hashes)
			}
			// Both engines may hold it from the travel request itself; the
			// warm-up adds a pinned copy, which counts in the metrics.
			fams := metricstest.Parse(t, scrape(reg))
			v, _ := metricstest.Value(fams, "phaseless_prefetch_warmups_total", "result=warmed")
			cached, _ := metricstest.Value(fams, "phaseless_prefetch_warmups_total", "result=cached")
			if got := v+cached > 0; got != tc.warm || tc.warm && warmed == 0 {
				t.Fatalf("warmed %v, already cached %v, prefix blocks on the engines %d; want warm=%v", v, cached, warmed, tc.warm)
			}
		})
	}
}

func scrape(reg *metrics.Registry) string {
	var b strings.Builder
	reg.WriteText(&b)
	return b.String()
}

// TestCacheKnobsRefusedWhenOff: a knob whose layer is off is refused,
// naming the header, instead of being ignored.
func TestCacheKnobsRefusedWhenOff(t *testing.T) {
	c, _, _ := cacheCoordinator(t, CacheConfig{})
	for _, tc := range []struct {
		header string
		set    func(*llm.Hints)
		ok     bool
	}{
		{"x-prefetch-hint", func(h *llm.Hints) { h.Prefetch = "high" }, false},
		{"x-prefetch-hint none", func(h *llm.Hints) { h.Prefetch = "none" }, true},
		{"x-semantic-mode", func(h *llm.Hints) { h.SemanticMode = "intent" }, false},
		{"x-semantic-mode with x-batch-threshold", func(h *llm.Hints) { h.SemanticMode = "intent"; h.BatchThreshold = 0.5 }, true},
	} {
		t.Run(tc.header, func(t *testing.T) {
			req := conversation("open the sunroof")
			tc.set(&req.Hints)
			_, _, _, err := generate(t, c, req)
			if tc.ok != (err == nil) || err != nil && (llm.CodeOf(err) != llm.CodeInvalid || !strings.Contains(err.Error(), strings.Fields(tc.header)[0])) {
				t.Fatalf("err %v, want ok=%v or a 400 naming %s", err, tc.ok, tc.header)
			}
		})
	}
}

// TestToolBreakpointInTheDirectory: a breakpoint after the tool
// definitions is recorded where the engine pinned it, as the tools prefix
// the engine renders first (the coordinator hashes the prompt as the
// engines render it), and a request with the same tools under another
// system prompt reads that prefix.
func TestToolBreakpointInTheDirectory(t *testing.T) {
	dir := affinity.NewMemory(nil)
	c, _, _ := cacheCoordinator(t, CacheConfig{Directory: dir})
	withTools := func(r *llm.Request) *llm.Request {
		r.Tools = []llm.Tool{{Name: "set_fan_speed", Parameters: []byte(`{"type":"object"}`)}}
		r.CacheBreakpoints = []llm.CacheBreakpoint{{Tools: 1, TTL: 5 * time.Minute}}
		return r
	}
	first := withTools(conversation("turn the heat up to twenty two"))
	meta, _, fin, err := generate(t, c, first)
	if err != nil {
		t.Fatal(err)
	}
	hashes := c.measure(first).sig.BlockHashes
	name, n, err := dir.Lookup(context.Background(), hashes)
	if err != nil || name != meta.Worker || n == 0 || fin.CacheWriteTokens != n*c.cfg.BlockSize {
		t.Fatalf("directory says %q holds %d blocks (%v); the request ran on %s and wrote %d tokens", name, n, err, meta.Worker, fin.CacheWriteTokens)
	}
	// The blocks the coordinator hashed are the ones the engine holds.
	var snap sched.Snapshot
	c.cfg.Workers.Snapshot(&snap, hashes)
	held := 0
	for i, w := range c.cfg.Workers.Workers() {
		if w.Name() == name {
			held = snap.Workers[i].PrefixBlocks
		}
	}
	if held < n {
		t.Fatalf("%s's engine holds %d of the %d blocks the directory records", name, held, n)
	}
	other := withTools(conversation("play some jazz"))
	other.Messages[0].Content = "You are a terse assistant."
	_, _, fin, err = generate(t, c, other)
	if err != nil {
		t.Fatal(err)
	}
	if fin.PrefixHitTokens < n*c.cfg.BlockSize {
		t.Fatalf("same tools, another system prompt: %d tokens read, want the %d pinned", fin.PrefixHitTokens, n*c.cfg.BlockSize)
	}
}
