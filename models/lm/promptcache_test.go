package lm

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/phaseless/phaseless/transport/llm"
)

// testClock is a settable clock safe for the step loop to read.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestPromptCachePinsSystemPrefix: a breakpoint after the system prompt
// pins its blocks, so the next turn hits them after traffic that evicts
// every unpinned block; without pinning, the same traffic evicts them; after
// the lifetime, it evicts them too.
func TestPromptCachePinsSystemPrefix(t *testing.T) {
	cfg := tinyConfig()
	cfg.ContextLen = 128
	m, _ := buildModel(t, cfg, F32, 4, false)
	system := "Be terse about cars."
	turn := func(user string) *llm.Request {
		return &llm.Request{
			Tenant: "t1", MaxTokens: 2, Seed: 1,
			Messages: []llm.Message{{Role: "system", Content: system}, {Role: "user", Content: user}},
			CacheRequest: llm.CacheRequest{CacheBreakpoints: []llm.CacheBreakpoint{
				{Message: 0, Chars: len(system), TTL: 5 * time.Minute},
			}},
		}
	}
	flood := func(e *Engine) { // unique prompts that cycle the whole LRU list
		for _, p := range prompts(10, 40, 40) {
			if r := generate(context.Background(), e, p, GenOptions{MaxTokens: 4, IgnoreEOS: true}); r.err != nil {
				t.Fatal(r.err)
			}
		}
	}
	run := func(e *Engine, req *llm.Request) llm.Final {
		fin, err := e.Generate(context.Background(), req, nil)
		if err != nil {
			t.Fatal(err)
		}
		return fin
	}
	const bs = 4
	sysTokens := len(m.Tokenizer().Encode(ChatPrompt([]llm.Message{{Role: "system", Content: system}}))) // + BOS, less the assistant tag
	wantPinned := (sysTokens + 1 - len("<|assistant|>\n")) / bs * bs

	for _, tc := range []struct {
		name    string
		pinned  int64 // EngineConfig.PinnedBytes
		advance time.Duration
		wantHit bool
	}{
		{"pinned", 0, time.Minute, true},
		{"pinning off", -1, time.Minute, false},
		{"lifetime over", 0, 5 * time.Minute, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &testClock{t: time.Unix(1000, 0)}
			e := newEngine(t, m, EngineConfig{BlockSize: bs, MaxBatch: 2, KVBudgetBytes: 64 * blockBytes(m.Config, bs), Now: clk.Now, PinnedBytes: tc.pinned})
			first := run(e, turn("hello"))
			wantWrite := wantPinned
			if tc.pinned < 0 {
				wantWrite = 0
			}
			if first.CacheWriteTokens != wantWrite || wantPinned == 0 {
				t.Fatalf("first turn wrote %d tokens, want %d", first.CacheWriteTokens, wantWrite)
			}
			clk.advance(tc.advance)
			flood(e)
			second := run(e, turn("and the tyres?"))
			if hit := second.PrefixHitTokens >= wantPinned; hit != tc.wantHit {
				t.Fatalf("second turn hit %d tokens (pinned prefix %d), want hit=%v", second.PrefixHitTokens, wantPinned, tc.wantHit)
			}
			if tc.wantHit && second.CacheWriteTokens != 0 {
				t.Fatalf("a hit on a pinned prefix wrote %d tokens", second.CacheWriteTokens)
			}
			st := e.Stats()
			if tc.wantHit && (st.PinnedBlocks != wantPinned/bs || st.PinHits == 0) {
				t.Fatalf("stats: %d pinned blocks, %d pin hits", st.PinnedBlocks, st.PinHits)
			}
		})
	}
}

// TestPromptCacheTenantCap: a tenant over its pinned-memory cap pins only
// up to it, and another tenant still pins.
func TestPromptCacheTenantCap(t *testing.T) {
	cfg := tinyConfig()
	cfg.ContextLen = 128
	m, _ := buildModel(t, cfg, F32, 4, false)
	const bs = 4
	clk := &testClock{t: time.Unix(1000, 0)}
	e := newEngine(t, m, EngineConfig{BlockSize: bs, MaxBatch: 2, KVBudgetBytes: 64 * blockBytes(m.Config, bs), Now: clk.Now,
		PinTenantBytes: 3 * blockBytes(m.Config, bs)})
	req := func(tenant, content string) *llm.Request {
		return &llm.Request{Tenant: tenant, MaxTokens: 1, Messages: []llm.Message{{Role: "user", Content: content}},
			CacheRequest: llm.CacheRequest{CacheBreakpoints: []llm.CacheBreakpoint{{Message: 0, Chars: len(content), TTL: time.Hour}}}}
	}
	a, err := e.Generate(context.Background(), req("a", "a long prompt of many many tokens"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.CacheWriteTokens != 3*bs {
		t.Fatalf("tenant a wrote %d tokens, want its cap of %d", a.CacheWriteTokens, 3*bs)
	}
	b, err := e.Generate(context.Background(), req("b", "another prompt entirely"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b.CacheWriteTokens == 0 {
		t.Fatal("tenant b pinned nothing beside a capped tenant a")
	}
	if st := e.Stats(); st.PinRefusedBlocks == 0 {
		t.Fatal("no refusal counted")
	}
}
