package coordinator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/admit"
	"github.com/phaseless/phaseless/cloud/batch"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
	"github.com/phaseless/phaseless/transport/schedhint"
)

var testModelConfig = lm.Config{Vocab: 258, Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, FFN: 128, ContextLen: 1024}

func builtinWorker(t *testing.T, name string, role sched.Role) (*worker.Worker, *lm.Engine) {
	t.Helper()
	m, err := worker.DevModel(testModelConfig, 1)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := lm.NewEngine(m, lm.EngineConfig{MaxBatch: 4, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(worker.Config{Name: name, Role: role, Batch: &batch.Config{}}, worker.NewBuiltin(eng))
	if err != nil {
		t.Fatal(err)
	}
	return w, eng
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newCoordinator(t *testing.T, clk *clock, workers ...*worker.Worker) (*Coordinator, *metrics.Registry) {
	t.Helper()
	return newCoordinatorWith(t, clk, nil, workers...)
}

// newCoordinatorWith is newCoordinator with a policy of the test's (nil:
// the rules).
func newCoordinatorWith(t testing.TB, clk *clock, policy sched.Policy, workers ...*worker.Worker) (*Coordinator, *metrics.Registry) {
	t.Helper()
	return newCoordinatorConfig(t, clk, Config{Policy: policy}, workers...)
}

// newCoordinatorConfig is newCoordinator built from cfg, whose Workers,
// Admitter, Tokenizer, Metrics and Breaker it fills.
func newCoordinatorConfig(t testing.TB, clk *clock, cfg Config, workers ...*worker.Worker) (*Coordinator, *metrics.Registry) {
	t.Helper()
	set, err := worker.NewSet(context.Background(), time.Hour, workers...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	a, err := admit.New(admit.Config{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	tok, _ := tokenizer.ByteSpec().Build()
	reg := metrics.NewRegistry()
	cfg.Workers, cfg.Admitter, cfg.Tokenizer, cfg.Metrics = set, a, tok, reg
	cfg.Breaker = admit.BreakerConfig{Window: 10 * time.Second, MinRequests: 10, Now: clk.Now}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, reg
}

// generate runs req and returns its begin event, checking that the stream
// starts with exactly one, and the number of text tokens after it.
func generate(t *testing.T, c *Coordinator, req *llm.Request) (begin llm.Meta, tokens int, fin llm.Final, err error) {
	t.Helper()
	seen := false
	fin, err = c.Generate(context.Background(), req, func(tk llm.Token) error {
		if tk.Meta != nil {
			if seen || tokens > 0 {
				t.Errorf("begin event %+v after %d tokens (seen before: %v)", tk.Meta, tokens, seen)
			}
			seen, begin = true, *tk.Meta
			return nil
		}
		if !seen {
			t.Errorf("token %q before the begin event", tk.Text)
		}
		tokens++
		return nil
	})
	if err == nil && !seen {
		t.Errorf("a successful stream without a begin event")
	}
	return begin, tokens, fin, err
}

func request(tenant, text string, n int) *llm.Request {
	return &llm.Request{Model: "auto", Tenant: tenant, MaxTokens: n, Seed: 1, Messages: []llm.Message{{Role: "user", Content: text}}}
}

// TestFallbackToConservative: a pool answering 429 (an upstream Phaseless
// whose key is over budget) sends the request to the conservative pool,
// at most twice per user per 10 minutes.
func TestFallbackToConservative(t *testing.T) {
	// The upstream answers every completion the way an over-budget
	// Phaseless does: 429 in OpenAI's error shape.
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			return // health and /metrics: up, with nothing to report
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"error":{"message":"token budget exhausted","type":"rate_limit_error","code":"budget_exceeded"}}`)
	}))
	t.Cleanup(upstream.Close)
	rem, err := worker.NewRemote(worker.RemoteConfig{URL: upstream.URL, APIKey: "sk-poor-key-1"})
	if err != nil {
		t.Fatal(err)
	}
	busy, _ := worker.New(worker.Config{Name: "busy", Role: sched.RoleStream}, rem)
	spare, spareEng := builtinWorker(t, "spare", sched.RoleConservative)
	clk := &clock{t: time.Unix(1e9, 0)}
	c, reg := newCoordinator(t, clk, busy, spare)

	for i := 0; i < 3; i++ {
		s, n, fin, err := generate(t, c, request("alice", "hi", 8))
		if i < 2 {
			if err != nil || n == 0 {
				t.Fatalf("request %d: err %v after %d tokens", i, err, n)
			}
			f := s.Fallback
			if f.Cause != llm.FallbackPoolOverloaded || f.From != "busy" || f.Code != llm.CodeOverloaded || !strings.HasPrefix(f.String(), "overloaded on busy") ||
				s.RouteHeader() != "cloud/conservative/spare" || !s.HasBudget || s.EngineTTFT <= 0 {
				t.Fatalf("request %d: begin %+v final %+v", i, s, fin)
			}
			if h, _ := schedhint.Parse(s.SchedulerHint); h.Reason != sched.ReasonFallback {
				t.Fatalf("hint reason %v", h.Reason)
			}
			continue
		}
		// The third within 10 minutes is not retried.
		if llm.CodeOf(err) != llm.CodeOverloaded {
			t.Fatalf("third request: %v", err)
		}
	}
	var sb strings.Builder
	reg.WriteText(&sb)
	for _, want := range []string{`phaseless_admit_fallbacks_total{reason="overloaded"} 2`, "phaseless_admit_fallbacks_denied_total 1"} {
		if !strings.Contains(sb.String(), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if spareEng.Stats().Completed != 2 {
		t.Fatalf("conservative engine completed %d", spareEng.Stats().Completed)
	}
	// Another user still has both fallbacks; and after the window alice does too.
	if _, err := c.Generate(context.Background(), request("bob", "hi", 4), func(llm.Token) error { return nil }); err != nil {
		t.Fatalf("bob: %v", err)
	}
	clk.Advance(10 * time.Minute)
	if _, err := c.Generate(context.Background(), request("alice", "hi", 4), func(llm.Token) error { return nil }); err != nil {
		t.Fatalf("alice after the window: %v", err)
	}
}

// TestCancelFreesSequence: a client that leaves mid-stream frees the
// engine's sequence, its KV blocks and the fair-queue slot.
func TestCancelFreesSequence(t *testing.T) {
	w, eng := builtinWorker(t, "b", sched.RoleDecode)
	c, _ := newCoordinator(t, &clock{t: time.Unix(1e9, 0)}, w)
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	_, err := c.Generate(ctx, request("t", "tell me a long story", 1000), func(llm.Token) error {
		n++
		if n == 3 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) && llm.CodeOf(err) != llm.CodeCancelled {
		t.Fatalf("err %v after %d tokens", err, n)
	}
	deadline := time.Now().Add(20 * time.Second) // hang guard
	for {
		s := eng.Stats()
		if s.Running == 0 && s.Waiting == 0 && s.KVBlocksUsed == 0 {
			if s.DecodeTokens >= 1000 {
				t.Fatalf("the engine ran to the end (%d tokens)", s.DecodeTokens)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine still holds the sequence: %+v", s)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if st := c.fair.Stats(); st.Running != 0 || st.Waiting != 0 {
		t.Fatalf("fair queue still holds %+v", st)
	}
}

// TestBreakerFallsBackToFIFO: after a window with too many 5xx the
// coordinator stops using its scheduler (the default, priced-pd) and places
// requests FIFO, then returns.
func TestBreakerFallsBackToFIFO(t *testing.T) {
	w, _ := builtinWorker(t, "b", sched.RoleDecode)
	clk := &clock{t: time.Unix(1e9, 0)}
	c, _ := newCoordinator(t, clk, w)
	policyOf := func() sched.PolicyID {
		s, _, _, err := generate(t, c, request("t", "hello", 2))
		if err != nil {
			t.Fatal(err)
		}
		h, err := schedhint.Parse(s.SchedulerHint)
		if err != nil {
			t.Fatal(err)
		}
		return h.Policy
	}
	if p := policyOf(); p != sched.PolicyPriced {
		t.Fatalf("policy %v before any error, want the default scheduler's (priced)", p)
	}
	for range 20 {
		c.breaker.Record(true, 0) // what finish records for a 5xx
	}
	clk.Advance(10 * time.Second)
	if p := policyOf(); p != sched.PolicyFIFO || !c.Breaker().Open {
		t.Fatalf("policy %v with the breaker %+v", p, c.Breaker())
	}
	clk.Advance(time.Minute)
	if p := policyOf(); p != sched.PolicyPriced {
		t.Fatalf("policy %v after the breaker closed", p)
	}
}

// BenchmarkDecisionPath is the whole per-request decision on real workers:
// reading three built-in engines' signals (their prefix caches included)
// and deciding. Reported with -benchmem; p99 from the samples.
func BenchmarkDecisionPath(b *testing.B) {
	var ws []*worker.Worker
	for i, r := range []sched.Role{sched.RolePrefill, sched.RoleDecode, sched.RoleStream} {
		m, _ := worker.DevModel(testModelConfig, 1)
		eng, _ := lm.NewEngine(m, lm.EngineConfig{MaxBatch: 4, Threads: 1})
		w, _ := worker.New(worker.Config{Name: string(rune('a' + i)), Role: r, Batch: &batch.Config{}}, worker.NewBuiltin(eng))
		ws = append(ws, w)
	}
	set, _ := worker.NewSet(context.Background(), time.Hour, ws...)
	defer set.Close()
	a, _ := admit.New(admit.Config{})
	defer a.Close()
	tok, _ := tokenizer.ByteSpec().Build()
	c, err := New(Config{Workers: set, Admitter: a, Tokenizer: tok})
	if err != nil {
		b.Fatal(err)
	}
	// Warm one engine's cache with the prompt so prefix matching does work.
	req := request("t", strings.Repeat("You are a helpful in-car assistant. ", 20)+"What is the tyre pressure?", 4)
	if _, _, err := ws[1].Generate(context.Background(), req, 0, nil, func(llm.Token) error { return nil }); err != nil {
		b.Fatal(err)
	}
	m := c.measure(req)
	placeRequest(req, &m)
	snap := &sched.Snapshot{}
	lat := make([]time.Duration, 1<<16)
	n := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		d, err := c.decide(&m, snap)
		lat[n%len(lat)] = time.Since(t0)
		n++
		if err != nil || d.PrefixBlocks == 0 {
			b.Fatalf("decision %+v %v", d, err)
		}
	}
	b.StopTimer()
	lat = lat[:min(n, len(lat))]
	slicesSort(lat)
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(len(m.sig.BlockHashes)), "prompt-blocks")
}

func slicesSort(d []time.Duration) { slices.Sort(d) }

// TestOutputBilledInFull: output is charged to the fair queue in batches of
// outputBillEvery tokens, and the remainder when the request ends, so the
// tenant's virtual counter ends at exactly prompt + 2 × output (the default
// weights) whatever the batch boundaries.
func TestOutputBilledInFull(t *testing.T) {
	w, _ := builtinWorker(t, "w", sched.RoleStream)
	c, _ := newCoordinator(t, &clock{t: time.Unix(1e9, 0)}, w)
	for _, n := range []int{1, outputBillEvery, outputBillEvery + 3} {
		tenant := fmt.Sprint("t", n)
		req := request(tenant, "count the tokens", n)
		req.Temperature = 0
		_, tokens, fin, err := generate(t, c, req)
		if err != nil || tokens == 0 {
			t.Fatalf("%d tokens: %v after %d", n, err, tokens)
		}
		want := float64(fin.PromptTokens) + 2*float64(tokens)
		if got := c.fair.Counter(tenant); got != want {
			t.Fatalf("max %d: counter %v after %d prompt and %d output tokens, want %v", n, got, fin.PromptTokens, tokens, want)
		}
	}
}
