package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/httpapi"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a manual clock: Advance moves it; After fires at once,
// moving the clock by the wait and recording it, so retry waits cost no
// real time and are checked exactly.
type fakeClock struct {
	mu    sync.Mutex // guards now, waits
	now   time.Time
	waits []time.Duration
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.waits = append(c.waits, d)
	c.now = c.now.Add(d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	c.mu.Unlock()
	return ch
}

func (c *fakeClock) Waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}

// step is what the test generator does on one attempt.
type step struct {
	err      error         // returned after tokens (before any, when tokens is empty)
	tokens   []string      // emitted in order
	gap      time.Duration // the clock advances by this before each token
	fallback llm.Fallback  // sent in the begin event
}

// scriptGen plays one step per Generate call, the last one repeating. When
// ack is set it waits, before advancing the clock for the next token, until
// the client delivered the previous one, so the client's timestamps are
// deterministic.
type scriptGen struct {
	clock *fakeClock
	ack   chan struct{}

	mu    sync.Mutex // guards steps, calls, reqs
	steps []step
	calls int
	reqs  []*llm.Request
}

func (g *scriptGen) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	g.mu.Lock()
	s := g.steps[min(g.calls, len(g.steps)-1)]
	g.calls++
	g.reqs = append(g.reqs, req)
	g.mu.Unlock()
	st := llm.NewStream(emit)
	st.Meta = llm.Meta{Route: llm.RouteLocal, Fallback: s.fallback, BudgetRemaining: 900, HasBudget: true}
	if len(s.tokens) == 0 && s.err != nil {
		return llm.Final{}, s.err
	}
	for i, t := range s.tokens {
		if i > 0 && g.ack != nil {
			select {
			case <-g.ack:
			case <-ctx.Done():
				return llm.Final{}, ctx.Err()
			}
		}
		g.clock.Advance(s.gap)
		if err := st.Emit(llm.Token{Text: t, ID: int32(i), EngineLatency: 2 * time.Millisecond}); err != nil {
			return llm.Final{}, err
		}
	}
	if s.err != nil {
		return llm.Final{}, s.err
	}
	if g.ack != nil && len(s.tokens) > 0 {
		<-g.ack
	}
	g.clock.Advance(s.gap)
	return llm.Final{PromptTokens: 20, PrefixHitTokens: 5, CompletionTokens: len(s.tokens), FinishReason: "stop"}, nil
}

func (g *scriptGen) Calls() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls
}

// serve runs the real API handler on a loopback httptest server.
func serve(t *testing.T, gen llm.Generator) string {
	t.Helper()
	h, err := httpapi.NewHandler(gen, httpapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func newClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	if cfg.Rand == nil {
		cfg.Rand = func() float64 { return 0.5 }
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cfg.HTTPClient != nil {
			cfg.HTTPClient.CloseIdleConnections()
		}
	})
	return c
}

func hello() *Request {
	return &Request{System: "Be brief.", Messages: []Message{{Role: "user", Content: "hello"}}, MaxTokens: 16}
}

// TestStreamMeasures streams from the real handler in both APIs and checks
// the text, usage, headers and the client-side measurements, taken on the
// injected clock.
func TestStreamMeasures(t *testing.T) {
	for _, api := range []API{OpenAI, Anthropic} {
		t.Run(string(api), func(t *testing.T) {
			clock := newFakeClock()
			gen := &scriptGen{clock: clock, ack: make(chan struct{}), steps: []step{{tokens: []string{"Hel", "lo", " there"}, gap: 100 * time.Millisecond}}}
			reg := metrics.NewRegistry()
			c := newClient(t, Config{URL: serve(t, gen), API: api, Clock: clock, Metrics: NewCollectors(reg), HTTPClient: &http.Client{}})
			var pieces []string
			resp, err := c.Stream(context.Background(), hello(), func(s string) error {
				pieces = append(pieces, s)
				gen.ack <- struct{}{}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Text != "Hello there" || strings.Join(pieces, "|") != "Hel|lo| there" || resp.FinishReason != "stop" {
				t.Errorf("text %q pieces %q finish %q", resp.Text, pieces, resp.FinishReason)
			}
			if resp.Usage != (Usage{PromptTokens: 20, CompletionTokens: 3, CachedTokens: 5}) {
				t.Errorf("usage %+v", resp.Usage)
			}
			if resp.Route != "local" || !resp.HasBudget || resp.Budget != 900 || resp.RequestID == "" || resp.Attempts != 1 {
				t.Errorf("headers: %+v", resp)
			}
			want := Stats{TTFT: 100 * time.Millisecond, ITLMean: 100 * time.Millisecond, ITLMax: 100 * time.Millisecond,
				Total: 400 * time.Millisecond, Chunks: 3, TokensPerSecond: 7.5,
				ServerGenMean: 2 * time.Millisecond, PrefixCacheEfficiency: 0.25, HasPrefixCache: true}
			if resp.Stats != want {
				t.Errorf("stats\n got %+v\nwant %+v", resp.Stats, want)
			}
			var sb strings.Builder
			reg.WriteText(&sb)
			for _, line := range []string{
				`phaseless_client_requests_total{outcome="ok"} 1`, "phaseless_client_ttft_seconds_count 1",
				`phaseless_client_ttft_seconds_bucket{le="0.1"} 1`, "phaseless_client_tokens_per_second_sum 7.5",
			} {
				if !strings.Contains(sb.String(), line) {
					t.Errorf("metrics lack %q:\n%s", line, sb.String())
				}
			}
		})
	}
}

// TestRetryAfterBudget: a budget refusal with Retry-After is retried after
// exactly that wait plus jitter, OnBudget sees the remaining budget, and
// OnRetry the wait; without Retry-After (the request exceeds the whole
// budget) or with one over MaxWait it is not retried.
func TestRetryAfterBudget(t *testing.T) {
	refusal := func(retryAfter time.Duration) error {
		e := llm.Errorf(llm.CodeBudget, "token budget exhausted")
		e.RetryAfter, e.BudgetRemaining, e.HasBudget = retryAfter, 12, true
		return e
	}
	for _, c := range []struct {
		name      string
		first     error
		maxWait   time.Duration
		wantCalls int
		wantWaits []time.Duration
	}{
		{"retry-after", refusal(2 * time.Second), 0, 2, []time.Duration{2*time.Second + 125*time.Millisecond}},
		{"over-whole-budget", refusal(0), 0, 1, nil},
		{"over-max-wait", refusal(60 * time.Second), 10 * time.Second, 1, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := newFakeClock()
			gen := &scriptGen{clock: clock, steps: []step{{err: c.first}, {tokens: []string{"ok"}}}}
			var budgets []Budget
			var retries []Retry
			cl := newClient(t, Config{URL: serve(t, gen), Clock: clock, MaxWait: c.maxWait, HTTPClient: &http.Client{},
				OnBudget: func(b Budget) { budgets = append(budgets, b) },
				OnRetry:  func(r Retry) { retries = append(retries, r) }})
			resp, err := cl.Complete(context.Background(), hello())
			if gen.Calls() != c.wantCalls {
				t.Fatalf("%d calls, want %d", gen.Calls(), c.wantCalls)
			}
			if len(budgets) == 0 || budgets[0].Remaining != 12 || budgets[0].RetryAfter != c.first.(*llm.Error).RetryAfter.Round(time.Second) {
				t.Errorf("budgets %+v", budgets)
			}
			if got := clock.Waits(); len(got) != len(c.wantWaits) || (len(got) > 0 && got[0] != c.wantWaits[0]) {
				t.Errorf("waits %v, want %v", got, c.wantWaits)
			}
			if c.wantCalls == 1 {
				var e *Error
				if !errors.As(err, &e) || e.Status != http.StatusTooManyRequests || !e.HasBudget || e.Budget != 12 || e.Type != "rate_limit_error" {
					t.Fatalf("err %v (%+v)", err, e)
				}
				return
			}
			if err != nil || resp.Text != "ok" || resp.Attempts != 2 || len(retries) != 1 || retries[0].Err.Status != 429 || retries[0].Wait != c.wantWaits[0] {
				t.Fatalf("resp %+v err %v retries %+v", resp, err, retries)
			}
			if len(budgets) != 2 || budgets[1].Remaining != 900 {
				t.Errorf("the answer's budget not reported: %+v", budgets)
			}
		})
	}
}

// TestRetryBackoff: overloads without Retry-After wait the jittered
// backoff schedule; MaxAttempts bounds the tries.
func TestRetryBackoff(t *testing.T) {
	clock := newFakeClock()
	over := llm.Errorf(llm.CodeOverloaded, "queue full")
	gen := &scriptGen{clock: clock, steps: []step{{err: over}, {err: over}, {tokens: []string{"x"}}}}
	c := newClient(t, Config{URL: serve(t, gen), Clock: clock, HTTPClient: &http.Client{}})
	resp, err := c.Complete(context.Background(), hello())
	if err != nil || resp.Attempts != 3 {
		t.Fatalf("resp %+v err %v", resp, err)
	}
	// Rand 0.5: 3/4 of 250 ms, then of 500 ms.
	if w := clock.Waits(); len(w) != 2 || w[0] != 187500*time.Microsecond || w[1] != 375*time.Millisecond {
		t.Errorf("waits %v", w)
	}
	gen = &scriptGen{clock: clock, steps: []step{{err: over}}}
	c = newClient(t, Config{URL: serve(t, gen), Clock: clock, MaxAttempts: 2, HTTPClient: &http.Client{}})
	if _, err := c.Complete(context.Background(), hello()); err == nil || gen.Calls() != 2 {
		t.Fatalf("err %v after %d calls", err, gen.Calls())
	}
}

// TestFallbackURL: an unreachable primary is tried MaxAttempts times, then
// the fallback answers and OnFallback says so; a server-side fallback
// (x-fallback-reason) reaches the hook too.
func TestFallbackURL(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused
	clock := newFakeClock()
	gen := &scriptGen{clock: clock, steps: []step{{tokens: []string{"from", " cloud"},
		fallback: llm.Fallback{Cause: llm.FallbackLocalRefused, From: "local", Detail: "local engine refused: queue full"}}}}
	var fbs []Fallback
	c := newClient(t, Config{URL: dead, FallbackURL: serve(t, gen) + "/v1", Clock: clock, MaxAttempts: 2, HTTPClient: &http.Client{},
		OnFallback: func(f Fallback) { fbs = append(fbs, f) }})
	resp, err := c.Complete(context.Background(), hello())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != "from cloud" || resp.Attempts != 3 || strings.HasSuffix(resp.URL, "/v1") || resp.FallbackReason == "" {
		t.Errorf("resp %+v", resp)
	}
	if len(fbs) != 2 || !fbs[0].ByClient || fbs[0].From != dead || fbs[1].ByClient || fbs[1].Reason != "local engine refused: queue full" {
		t.Errorf("fallbacks %+v", fbs)
	}
	// A request the app pinned to the device never reaches the fallback.
	local := hello()
	local.Route = "local"
	calls := gen.Calls()
	if _, err := c.Complete(context.Background(), local); err == nil || gen.Calls() != calls {
		t.Fatalf("route local: err %v, the fallback answered %d more", err, gen.Calls()-calls)
	}
}

// TestMidStreamFailureNotRetried: once text reached the app a failure is
// returned, marked MidStream, with no second try.
func TestMidStreamFailureNotRetried(t *testing.T) {
	for _, api := range []API{OpenAI, Anthropic} {
		t.Run(string(api), func(t *testing.T) {
			clock := newFakeClock()
			gen := &scriptGen{clock: clock, steps: []step{{tokens: []string{"a", "b"}, err: llm.Errorf(llm.CodeUnavailable, "link lost")}}}
			c := newClient(t, Config{URL: serve(t, gen), API: api, Clock: clock, HTTPClient: &http.Client{}})
			var got string
			_, err := c.Stream(context.Background(), hello(), func(s string) error { got += s; return nil })
			var e *Error
			if !errors.As(err, &e) || !e.MidStream || !strings.Contains(e.Message, "link lost") || got != "ab" || gen.Calls() != 1 {
				t.Fatalf("err %v (%+v) text %q calls %d", err, e, got, gen.Calls())
			}
		})
	}
}

// TestCallbackErrorStops: onText's own error ends the call as is.
func TestCallbackErrorStops(t *testing.T) {
	clock := newFakeClock()
	gen := &scriptGen{clock: clock, steps: []step{{tokens: []string{"a", "b", "c"}}}}
	c := newClient(t, Config{URL: serve(t, gen), Clock: clock, HTTPClient: &http.Client{}})
	stop := errors.New("user closed the window")
	if _, err := c.Stream(context.Background(), hello(), func(string) error { return stop }); err != stop {
		t.Fatalf("err %v", err)
	}
}

// TestConfigAndRequestErrors: bad config fields and requests are named.
func TestConfigAndRequestErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{URL: "ftp://x"}, "Config.URL"},
		{Config{URL: "http://x", FallbackURL: "nope"}, "Config.FallbackURL"},
		{Config{URL: "http://x", API: "grpc"}, "Config.API"},
		{Config{URL: "http://x", MaxAttempts: -1}, "Config.MaxAttempts"},
	} {
		if _, err := New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %s", c.cfg, err, c.want)
		}
	}
	c := newClient(t, Config{URL: "http://127.0.0.1:1"})
	if _, err := c.Complete(context.Background(), &Request{Messages: []Message{{Role: "user", Content: "x"}}}); err == nil || !strings.Contains(err.Error(), "MaxTokens") {
		t.Errorf("missing MaxTokens: %v", err)
	}
}
