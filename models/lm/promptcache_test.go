package lm

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/chatfmt"
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
	sysTokens := len(m.Tokenizer().Encode(chatfmt.Prompt([]llm.Message{{Role: "system", Content: system}}))) // + BOS, less the assistant tag
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

// TestPromptCachePinsToolDefinitions: a breakpoint after a tool pins the
// rendered tool definitions up to it and nothing after them, so a request
// that shares those tools (and not the next tool, the system prompt or the
// question) hits exactly that prefix after traffic that evicted every
// unpinned block. With a chat template the definitions are listed one a
// line and the breakpoint cuts after the first; a byte-level model's one
// ToolsSystemPrompt line stands for all its tools.
func TestPromptCachePinsToolDefinitions(t *testing.T) {
	const bs = 4
	cfg := Config{Vocab: 300, Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, FFN: 64, ContextLen: 384}
	w, err := RandomWeights(cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	tool := func(name string) llm.Tool { return llm.Tool{Name: name, Parameters: []byte(`{"type":"object"}`)} }
	req := func(second, system, user string) *llm.Request {
		return &llm.Request{
			Tenant: "t1", MaxTokens: 1, Seed: 1,
			Messages:     []llm.Message{{Role: "system", Content: system}, {Role: "user", Content: user}},
			ToolRequest:  llm.ToolRequest{Tools: []llm.Tool{tool("set_fan_speed"), tool(second)}},
			CacheRequest: llm.CacheRequest{CacheBreakpoints: []llm.CacheBreakpoint{{Tools: 1, TTL: 5 * time.Minute}}},
		}
	}
	for _, templated := range []bool{false, true} {
		t.Run(map[bool]string{false: "byte-level", true: "chat template"}[templated], func(t *testing.T) {
			if templated && !rendersTemplates {
				t.Skip("built with lm_nojinja")
			}
			spec := chatMLSpec(t)
			if !templated {
				spec.ChatTemplate = ""
			}
			m := writeAndRead(t, cfg, spec, w)
			clk := &testClock{t: time.Unix(1000, 0)}
			e := newEngine(t, m, EngineConfig{BlockSize: bs, MaxBatch: 2, KVBudgetBytes: 200 * blockBytes(m.Config, bs), Now: clk.Now,
				PinnedBytes: 64 * blockBytes(m.Config, bs), PinTenantBytes: 64 * blockBytes(m.Config, bs)})
			first := req("open_window", "Be terse about cars.", "hello")
			// The prefix the breakpoint stands for, rendered alone.
			r := chatfmt.Render(first, templated)
			prefix, err := m.ChatPromptTokens(r.Prefix(first.CacheBreakpoints[0]))
			if err != nil {
				t.Fatal(err)
			}
			prompt, _ := m.ChatPromptTokens(r.Messages)
			common := 0
			for common < len(prefix) && prefix[common] == prompt[common] {
				common++
			}
			want := common / bs * bs
			if want < 2*bs {
				t.Fatalf("tool prefix of %d tokens: too short to test", common)
			}
			fin, err := e.Generate(context.Background(), first, nil)
			if err != nil {
				t.Fatal(err)
			}
			if fin.CacheWriteTokens != want {
				t.Fatalf("wrote %d tokens, want the tool prefix's %d", fin.CacheWriteTokens, want)
			}
			for _, p := range prompts(30, 40, 40) { // cycle every unpinned block out
				if r := generate(context.Background(), e, p, GenOptions{MaxTokens: 4, IgnoreEOS: true}); r.err != nil {
					t.Fatal(r.err)
				}
			}
			clk.advance(time.Minute)
			again, err := e.Generate(context.Background(), req("close_window", "Answer in French.", "and the tyres?"), nil)
			if err != nil {
				t.Fatal(err)
			}
			if again.PrefixHitTokens != want {
				t.Fatalf("second request hit %d tokens, want exactly the pinned tool prefix's %d", again.PrefixHitTokens, want)
			}
		})
	}
}
