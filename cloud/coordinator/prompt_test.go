package coordinator

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/admit"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

// countingTokenizer counts the texts the coordinator tokenizes.
type countingTokenizer struct {
	tokenizer.Tokenizer
	n atomic.Int64
}

func (c *countingTokenizer) Encode(text string) []int32 { return c.Tokenize(text, false) }

func (c *countingTokenizer) Tokenize(text string, special bool) []int32 {
	c.n.Add(1)
	return c.Tokenizer.Tokenize(text, special)
}

// promptSeen is a built-in engine that counts the requests it was handed
// tokenized (worker.PromptFrom) and those it had to render and tokenize
// itself.
type promptSeen struct {
	*worker.Builtin
	given, rendered atomic.Int64
}

func (e *promptSeen) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	if worker.PromptFrom(ctx) != nil {
		e.given.Add(1)
	} else {
		e.rendered.Add(1)
	}
	return e.Builtin.Generate(ctx, req, emit)
}

// TestOnePromptTokenizationPerRequest: the coordinator renders and
// tokenizes a request's prompt once, and its measurement, the cache
// layer's pins and the engine all read those tokens; each cache breakpoint
// adds its own prefix's one tokenization. Measuring, recording the pins
// and running the request each tokenized the prompt before.
func TestOnePromptTokenizationPerRequest(t *testing.T) {
	var engines []*promptSeen
	var ws []*worker.Worker
	for _, name := range []string{"w0", "w1"} {
		m, err := worker.DevModel(testModelConfig, 1)
		if err != nil {
			t.Fatal(err)
		}
		eng, err := lm.NewEngine(m, lm.EngineConfig{MaxBatch: 4, Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		e := &promptSeen{Builtin: worker.NewBuiltin(eng)}
		w, err := worker.New(worker.Config{Name: name, Role: sched.RoleStream}, e)
		if err != nil {
			t.Fatal(err)
		}
		engines, ws = append(engines, e), append(ws, w)
	}
	set, err := worker.NewSet(context.Background(), time.Hour, ws...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	a, err := admit.New(admit.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	byteTok, _ := tokenizer.ByteSpec().Build()
	tok := &countingTokenizer{Tokenizer: byteTok}
	c, err := New(Config{Workers: set, Admitter: a, Tokenizer: tok})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })

	tools := conversation("turn the heat up to twenty two")
	tools.Tools = []llm.Tool{{Name: "set_fan_speed", Parameters: []byte(`{"type":"object"}`)}}
	tools.CacheBreakpoints = []llm.CacheBreakpoint{{Tools: 1, TTL: 5 * time.Minute}, {Tools: 2, TTL: 5 * time.Minute}}
	for _, tc := range []struct {
		name     string
		req      *llm.Request
		prefixes int64 // breakpoints whose prefix renders
	}{
		{"plain", conversation("play some jazz"), 0},
		{"a pinned conversation", pinAll(conversation("open the sunroof", "Done.", "and the windows")), 1},
		{"pinned tools, one breakpoint past them", tools, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tok.n.Load()
			var given, rendered int64
			for _, e := range engines {
				given, rendered = given-e.given.Load(), rendered-e.rendered.Load()
			}
			_, _, fin, err := generate(t, c, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if n := tok.n.Load() - before; n != 1+tc.prefixes {
				t.Errorf("the coordinator tokenized %d texts, want the prompt once and %d cache prefixes", n, tc.prefixes)
			}
			for _, e := range engines {
				given, rendered = given+e.given.Load(), rendered+e.rendered.Load()
			}
			if given != 1 || rendered != 0 {
				t.Errorf("the engines were handed %d tokenized prompts and rendered %d themselves, want 1 and 0", given, rendered)
			}
			if tc.prefixes > 0 && fin.CacheWriteTokens == 0 {
				t.Errorf("the engine pinned nothing of the request's breakpoint")
			}
		})
	}
}

// BenchmarkBuiltinRequest is one request through Generate on a built-in
// worker whose cache already holds its prompt (one output token): the
// coordinator's own work per request (measurement, admission, placement,
// the cache layer) with the engine's handling of the prompt. pinned adds a
// cache breakpoint on the system prompt. Reported with -benchmem.
func BenchmarkBuiltinRequest(b *testing.B) {
	m, err := worker.DevModel(testModelConfig, 1)
	if err != nil {
		b.Fatal(err)
	}
	eng, err := lm.NewEngine(m, lm.EngineConfig{MaxBatch: 4, Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	w, err := worker.New(worker.Config{Name: "w", Role: sched.RoleStream}, worker.NewBuiltin(eng))
	if err != nil {
		b.Fatal(err)
	}
	set, err := worker.NewSet(context.Background(), time.Hour, w)
	if err != nil {
		b.Fatal(err)
	}
	defer set.Close()
	// A budget the benchmark never runs out of: it measures the path, not
	// the refusal.
	a, err := admit.New(admit.Config{Budget: admit.Bucket{Burst: 1 << 40, PerSecond: 1 << 40}})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	c, err := New(Config{Workers: set, Admitter: a, Tokenizer: m.Tokenizer()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	system := strings.Repeat("You are a helpful in-car assistant. ", 20)
	for _, pinned := range []bool{false, true} {
		b.Run(map[bool]string{false: "plain", true: "pinned"}[pinned], func(b *testing.B) {
			req := &llm.Request{Model: "auto", Tenant: "t", MaxTokens: 1, Seed: 1, Messages: []llm.Message{
				{Role: "system", Content: system}, {Role: "user", Content: "What is the tyre pressure?"}}}
			if pinned {
				req.CacheBreakpoints = []llm.CacheBreakpoint{{Message: 0, Chars: len(system), TTL: 5 * time.Minute}}
			}
			discard := func(llm.Token) error { return nil }
			if _, err := c.Generate(context.Background(), req, discard); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := c.Generate(context.Background(), req, discard); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
