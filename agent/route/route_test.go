package route

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/predictor"
	"github.com/phaseless/phaseless/models/textfeat"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

func userReq(text string) *llm.Request {
	return &llm.Request{ID: "t1", MaxTokens: 8, Messages: []llm.Message{{Role: "system", Content: "sys"}, {Role: "user", Content: text}}}
}

// fixedPredictor answers whatever p holds (a hand-written fake: the router's
// arithmetic, not the model, is under test).
type fixedPredictor struct {
	p   float64
	err error
}

func (f *fixedPredictor) Predict([]float32) (float64, error) { return f.p, f.err }

var up = Link{Configured: true, Connected: true, RTT: 30 * time.Millisecond}

const (
	lowEntropy  = "turn on the air conditioning please"
	highEntropy = "Zx9#qL@2vR!m8$Kp^3&Wn*7(Yb)5_Tc+1=Hd{6}Je[4]Gf|0;Ua:Os'Ir\"Pq<Mt>Nl,Ek.Dj/Ch?Bg~Af`"
)

func TestEntropyRuleDefault(t *testing.T) {
	r, err := NewRouter(Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := r.Decide(userReq(lowEntropy), up, Load{})
	if d.Path != PathLocal || d.ByteEntropy >= 4.2 || d.ProbSource != "entropy-rule" || d.CloudProb >= 0.5 {
		t.Errorf("low entropy: %+v", d)
	}
	d = r.Decide(userReq(highEntropy), up, Load{})
	if d.Path != PathCloud || d.ByteEntropy <= 4.2 || d.CloudProb <= 0.5 {
		t.Errorf("high entropy (%.2f bits): %s %s", d.ByteEntropy, d.Path, d.Reason)
	}
	if !strings.Contains(d.Reason, "entropy") || len(d.Features) == 0 {
		t.Errorf("reason %q, %d features", d.Reason, len(d.Features))
	}
}

// TestContentScoreHasNoMemory: the same score gets the same path whatever
// came before it, right at and around the threshold (issue 19: "what is the
// capital of Canada" at 0.627 ran locally because the request before it had).
func TestContentScoreHasNoMemory(t *testing.T) {
	p := &fixedPredictor{}
	r, err := NewRouter(Config{Threshold: 0.5, Hysteresis: 0.1}, p)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range []struct {
		p    float64
		want string
	}{
		{0.52, PathCloud}, {0.49, PathLocal}, {0.50, PathCloud}, {0.46, PathLocal},
		{0.99, PathCloud}, {0.49, PathLocal}, {0.01, PathLocal}, {0.52, PathCloud},
	} {
		p.p = s.p
		if d := r.Decide(userReq("x"), up, Load{}); d.Path != s.want || d.ProbSource != "predictor" {
			t.Errorf("step %d p=%.2f: %s (%s), want %s", i, s.p, d.Path, d.Reason, s.want)
		}
	}
	// Shuffled orders of the same requests give the same decisions.
	scores := []float64{0.45, 0.55, 0.499, 0.501, 0.5, 0.3, 0.7}
	want := map[float64]string{}
	for _, sc := range scores {
		p.p = sc
		want[sc] = r.Decide(userReq("x"), up, Load{}).Path
	}
	for k := range 5 {
		for i := range scores {
			sc := scores[(i*3+k)%len(scores)]
			p.p = sc
			if got := r.Decide(userReq("x"), up, Load{}).Path; got != want[sc] {
				t.Errorf("order %d: p=%v went %s, alone %s", k, sc, got, want[sc])
			}
		}
	}
}

// TestLinkHysteresis: a link whose RTT flaps around MaxRTT does not bounce
// cloud-bound traffic; it recovers only below (1-Hysteresis)·MaxRTT, and
// loss works the same way.
func TestLinkHysteresis(t *testing.T) {
	p := &fixedPredictor{p: 0.9}
	r, err := NewRouter(Config{MaxRTT: 400 * time.Millisecond, MaxLoss: 0.05, Hysteresis: 0.1}, p)
	if err != nil {
		t.Fatal(err)
	}
	link := func(rtt time.Duration, loss float64) Link {
		return Link{Configured: true, Connected: true, RTT: rtt, Loss: loss}
	}
	for i, s := range []struct {
		l    Link
		want string
	}{
		{link(390*time.Millisecond, 0), PathCloud}, // below the bound, never degraded
		{link(410*time.Millisecond, 0), PathLocal}, // above: degraded
		{link(390*time.Millisecond, 0), PathLocal}, // inside the band: stays degraded
		{link(370*time.Millisecond, 0), PathLocal},
		{link(410*time.Millisecond, 0), PathLocal},
		{link(350*time.Millisecond, 0), PathCloud}, // below 360 ms: recovered
		{link(390*time.Millisecond, 0), PathCloud}, // inside the band: stays up
		{link(100*time.Millisecond, 0.06), PathLocal},
		{link(100*time.Millisecond, 0.048), PathLocal}, // loss inside the band
		{link(100*time.Millisecond, 0.044), PathCloud},
		{Link{Configured: true}, PathLocal},        // disconnected
		{link(390*time.Millisecond, 0), PathCloud}, // a new connection starts undegraded
	} {
		if d := r.Decide(userReq("x"), s.l, Load{}); d.Path != s.want {
			t.Errorf("step %d (rtt %v, loss %v): %s (%s), want %s", i, s.l.RTT, s.l.Loss, d.Path, d.Reason, s.want)
		}
	}
}

func TestLinkLoadAndOverride(t *testing.T) {
	tests := []struct {
		name     string
		p        float64
		link     Link
		load     Load
		override string
		want     string
		reason   string
	}{
		{"offline only", 0.9, Link{}, Load{}, "", PathLocal, "offline-only"},
		{"cloud unreachable", 0.9, Link{Configured: true}, Load{}, "", PathLocal, "unreachable"},
		{"high rtt", 0.9, Link{Configured: true, Connected: true, RTT: time.Second}, Load{}, "", PathLocal, "link degraded"},
		{"loss", 0.9, Link{Configured: true, Connected: true, Loss: 0.2}, Load{}, "", PathLocal, "link degraded"},
		{"degraded but local overloaded", 0.9, Link{Configured: true, Connected: true, Loss: 0.2}, Load{KVFaultsPerMs: 47}, "", PathCloud, "p="},
		{"kv jitter offloads easy work", 0.1, up, Load{KVFaultsPerMs: 47}, "", PathCloud, "overloaded"},
		{"full queue offloads", 0.1, up, Load{Waiting: 48, Capacity: 64}, "", PathCloud, "overloaded"},
		{"override local", 0.9, up, Load{}, "local", PathLocal, "x-phaseless-route"},
		{"override cloud", 0.1, Link{Configured: true}, Load{}, "cloud", PathCloud, "x-phaseless-route"},
		{"easy work stays", 0.1, up, Load{KVFaultsPerMs: 3}, "", PathLocal, "p="},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := NewRouter(Config{}, &fixedPredictor{p: tt.p})
			req := userReq("x")
			req.Hints.Route = tt.override
			d := r.Decide(req, tt.link, tt.load)
			if d.Path != tt.want || !strings.Contains(d.Reason, tt.reason) {
				t.Errorf("got %s (%s), want %s (%s)", d.Path, d.Reason, tt.want, tt.reason)
			}
		})
	}
}

func TestKVLatch(t *testing.T) {
	r, _ := NewRouter(Config{MaxKVFaultsPerMs: 12, Hysteresis: 0.1}, &fixedPredictor{p: 0.1})
	for i, s := range []struct {
		kv   float64
		want string
	}{{11, PathLocal}, {13, PathCloud}, {11, PathCloud}, {10.7, PathLocal}, {11.5, PathLocal}} {
		if d := r.Decide(userReq("x"), up, Load{KVFaultsPerMs: s.kv}); d.Path != s.want {
			t.Errorf("step %d kv=%g: %s, want %s", i, s.kv, d.Path, s.want)
		}
	}
}

func TestPredictorFailureFallsBackToRule(t *testing.T) {
	r, _ := NewRouter(Config{}, &fixedPredictor{err: errors.New("model file corrupt")})
	d := r.Decide(userReq(highEntropy), up, Load{})
	if d.Path != PathCloud || !strings.Contains(d.ProbSource, "model file corrupt") {
		t.Errorf("%+v", d)
	}
	r, _ = NewRouter(Config{}, &fixedPredictor{p: 7})
	if d := r.Decide(userReq(lowEntropy), up, Load{}); d.Path != PathLocal || !strings.Contains(d.ProbSource, "out of range") {
		t.Errorf("out of range probability: %+v", d)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{Threshold: 1}, {Threshold: -0.1}, {Hysteresis: 1.2}, {EntropyThreshold: 9}, {MaxLoss: 2}, {MaxKVFaultsPerMs: -1}, {MaxQueueFraction: 1.5}, {MaxRTT: -1}} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if err := (Config{}).Validate(); err != nil {
		t.Error(err)
	}
}

// engine is a scripted generator for dispatcher tests.
type engine struct {
	begin  *llm.Meta // sent ahead of the tokens when set (the cloud's begin event)
	tokens []string
	failAt int // fail with err after this many tokens; -1 never
	err    error
	calls  int
	last   llm.Request // the request of the last call
	mu     sync.Mutex
}

func (e *engine) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	e.mu.Lock()
	e.calls++
	e.last = *req
	e.mu.Unlock()
	if e.begin != nil {
		if err := emit(llm.Token{Meta: e.begin}); err != nil {
			return llm.Final{}, err
		}
	}
	for i, t := range e.tokens {
		if i == e.failAt {
			return llm.Final{}, e.err
		}
		if err := emit(llm.Token{Text: t}); err != nil {
			return llm.Final{}, err
		}
	}
	if e.failAt == len(e.tokens) {
		return llm.Final{}, e.err
	}
	return llm.Final{PromptTokens: 4, CompletionTokens: len(e.tokens), FinishReason: "stop"}, nil
}

// dispatched is what one Dispatcher.Generate call produced.
type dispatched struct {
	out  string
	meta llm.Meta // the begin event
	fin  llm.Final
	rec  fleetwire.RequestRecord
	reg  *metrics.Registry
}

func dispatch(t *testing.T, local, cloud *engine, link Link, text, override string) (dispatched, error) {
	t.Helper()
	return dispatchWith(t, local, cloud, link, text, override, nil)
}

// dispatchWith is dispatch with every token also shown to see.
func dispatchWith(t *testing.T, local, cloud *engine, link Link, text, override string, see func(llm.Token)) (dispatched, error) {
	t.Helper()
	return dispatchReq(t, local, cloud, link, userReq(text), override, see)
}

// dispatchReq is dispatchWith for a request of the caller's (nil: an
// invalid-free high-entropy one).
func dispatchReq(t *testing.T, local, cloud *engine, link Link, req *llm.Request, override string, see func(llm.Token)) (dispatched, error) {
	t.Helper()
	if req == nil {
		req = userReq(highEntropy)
	}
	r, _ := NewRouter(Config{}, nil)
	var recs []fleetwire.RequestRecord
	reg := metrics.NewRegistry()
	cfg := DispatcherConfig{Router: r, Local: local, Link: func() Link { return link }, Metrics: reg,
		Record: func(_ context.Context, rec fleetwire.RequestRecord) error { recs = append(recs, rec); return nil }}
	if cloud != nil {
		cfg.Cloud = cloud
	}
	d, err := NewDispatcher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req.Hints.Route = override
	var out strings.Builder
	var begin llm.Meta
	begins := 0
	fin, gerr := d.Generate(context.Background(), req, func(tok llm.Token) error {
		if see != nil {
			see(tok)
		}
		if tok.Meta != nil {
			if begins++; out.Len() > 0 {
				t.Errorf("begin event after text %q", out.String())
			}
			begin = *tok.Meta
			return nil
		}
		out.WriteString(tok.Text)
		return nil
	})
	if len(recs) != 1 {
		t.Fatalf("%d telemetry records", len(recs))
	}
	if (gerr == nil && begins != 1) || begins > 1 {
		t.Errorf("%d begin events (err %v)", begins, gerr)
	}
	return dispatched{out.String(), begin, fin, recs[0], reg}, gerr
}

func TestDispatchPaths(t *testing.T) {
	ok := func(name string) *engine { return &engine{tokens: []string{name, "!"}, failAt: -1} }
	okCloud := func() *engine {
		e := ok("cloud/p/w")
		e.begin = &llm.Meta{Route: llm.RouteCloud, Pool: "p", Worker: "w", SchedulerHint: "H", BudgetRemaining: 3, HasBudget: true}
		return e
	}
	t.Run("local", func(t *testing.T) {
		r, err := dispatch(t, ok("local"), okCloud(), up, lowEntropy, "")
		if err != nil || r.out != "local!" || r.meta != (llm.Meta{Route: llm.RouteLocal, RouteReason: r.rec.Reason}) || r.rec.Reason == "" || r.rec.Path != PathLocal || r.rec.Decision != PathLocal || r.rec.Outcome != "ok" || r.rec.CompletionTokens != 2 {
			t.Errorf("%q %+v %+v %v %+v", r.out, r.meta, r.fin, err, r.rec)
		}
	})
	t.Run("cloud", func(t *testing.T) {
		r, err := dispatch(t, ok("local"), okCloud(), up, highEntropy, "")
		want := *okCloud().begin
		want.RouteReason = r.rec.Reason // the agent's router's, beside the cloud's placement
		if err != nil || r.out != "cloud/p/w!" || r.meta != want || r.rec.Path != "cloud/p/w" || r.rec.Decision != PathCloud || r.rec.FallbackCause != "" {
			t.Errorf("%q %+v %+v %v %+v", r.out, r.meta, r.fin, err, r.rec)
		}
	})
	t.Run("cloud fails before first token", func(t *testing.T) {
		// The cloud placed it (its begin event) and then failed: the local
		// answer must not claim the cloud's pool and worker.
		cloud := &engine{begin: okCloud().begin, tokens: []string{"x"}, failAt: 0, err: llm.Errorf(llm.CodeUnavailable, "connection refused")}
		r, err := dispatch(t, ok("local"), cloud, up, highEntropy, "")
		f := r.meta.Fallback
		if err != nil || r.out != "local!" || r.meta.Route != PathLocal || r.meta.Pool != "" || f.Cause != llm.FallbackCloudError || f.Code != llm.CodeUnavailable || f.From != PathCloud || !strings.Contains(f.String(), "connection refused") {
			t.Errorf("%q %+v %+v %v", r.out, r.meta, r.fin, err)
		}
		if r.rec.Decision != PathCloud || r.rec.Path != PathLocal || r.rec.FallbackReason != f.String() || r.rec.FallbackCause != "cloud_error" || r.rec.Outcome != "ok" {
			t.Errorf("record %+v", r.rec)
		}
		var b strings.Builder
		r.reg.WriteText(&b)
		if !strings.Contains(b.String(), `phaseless_route_fallbacks_total{cause="cloud_error"} 1`) {
			t.Errorf("fallback metric missing\n%s", b.String())
		}
	})
	t.Run("cloud fails after tokens", func(t *testing.T) {
		// The link did not come back: the device's engine continues from
		// the text delivered, with what is left of the token budget, and
		// the first token it adds says so.
		local := &engine{tokens: []string{"-local", "!"}, failAt: -1}
		cloud := &engine{tokens: []string{"a", "b", "c"}, failAt: 2, err: llm.Errorf(llm.CodeUnavailable, "link lost")}
		var conts []*llm.Continuation
		r, err := dispatchWith(t, local, cloud, up, highEntropy, "", func(tok llm.Token) {
			if tok.Continued != nil {
				conts = append(conts, tok.Continued)
			}
		})
		if err != nil || r.out != "ab-local!" || local.calls != 1 || local.last.Continue != "ab" || local.last.MaxTokens != userReq("").MaxTokens-2 || r.meta.Route != llm.RouteCloud {
			t.Errorf("out %q err %v local calls %d, continued %q with %d tokens", r.out, err, local.calls, local.last.Continue, local.last.MaxTokens)
		}
		if len(conts) != 1 || conts[0].Route != llm.RouteLocal || conts[0].Reason != llm.ContinueCloudLost {
			t.Errorf("continuation events %+v", conts)
		}
		if r.rec.Outcome != "ok" || r.rec.CompletionTokens != 4 || r.rec.ContinuedOn != "local" || r.rec.ContinueReason != llm.ContinueCloudLost || !strings.Contains(r.rec.ContinueDetail, "link lost") {
			t.Errorf("record %+v", r.rec)
		}
		var b strings.Builder
		r.reg.WriteText(&b)
		if !strings.Contains(b.String(), `phaseless_route_continuations_total{reason="cloud_lost"} 1`) {
			t.Errorf("continuation metric missing\n%s", b.String())
		}
	})
	t.Run("cloud fails after tokens, not continued", func(t *testing.T) {
		// A request the device's engine must not answer (invalid) or
		// cannot continue (tools) ends with the cloud's error, as before.
		tools := userReq(highEntropy)
		tools.Tools = []llm.Tool{{Name: "f"}}
		for _, tc := range []struct {
			name string
			req  *llm.Request
			code llm.Code
		}{
			{"invalid", nil, llm.CodeInvalid},
			{"tools", tools, llm.CodeUnavailable},
		} {
			local := &engine{tokens: []string{"x"}, failAt: -1}
			cloud := &engine{tokens: []string{"a", "b", "c"}, failAt: 2, err: llm.Errorf(tc.code, "broke")}
			r, err := dispatchReq(t, local, cloud, up, tc.req, "", nil)
			if llm.CodeOf(err) != tc.code || r.out != "ab" || local.calls != 0 || r.rec.Outcome != "error" || r.rec.ContinuedOn != "" {
				t.Errorf("%s: out %q err %v local calls %d record %+v", tc.name, r.out, err, local.calls, r.rec)
			}
		}
	})
	t.Run("invalid request is not retried locally", func(t *testing.T) {
		local := ok("local")
		cloud := &engine{failAt: 0, err: llm.Errorf(llm.CodeInvalid, "prompt too long")}
		_, err := dispatch(t, local, cloud, up, highEntropy, "")
		if llm.CodeOf(err) != llm.CodeInvalid || local.calls != 0 {
			t.Errorf("err %v local calls %d", err, local.calls)
		}
	})
	t.Run("forced cloud without cloud", func(t *testing.T) {
		r, err := dispatch(t, ok("local"), nil, Link{}, lowEntropy, "cloud")
		if err != nil || r.out != "local!" || r.meta.Fallback.Cause != llm.FallbackNoCloud || r.meta.Fallback.String() != "no cloud configured" {
			t.Errorf("%q %+v %v", r.out, r.meta, err)
		}
	})
	t.Run("local engine refuses, cloud takes it", func(t *testing.T) {
		for _, code := range []llm.Code{llm.CodeContextLength, llm.CodeOverloaded} {
			local := &engine{failAt: 0, err: llm.Errorf(code, "no room")}
			cloud := okCloud()
			r, err := dispatch(t, local, cloud, up, lowEntropy, "")
			f := r.meta.Fallback
			if err != nil || r.out != "cloud/p/w!" || r.meta.RouteHeader() != "cloud/p/w" || r.meta.SchedulerHint != "H" ||
				f.Cause != llm.FallbackLocalRefused || f.Code != code || !strings.Contains(f.String(), "local engine refused") {
				t.Errorf("%s: %q %+v %v", code, r.out, r.meta, err)
			}
			if r.rec.Decision != PathLocal || r.rec.Path != "cloud/p/w" || r.rec.Outcome != "ok" || r.rec.FallbackReason == "" {
				t.Errorf("%s: record %+v", code, r.rec)
			}
		}
	})
	t.Run("no offload when pinned local, cloud down or the request is bad", func(t *testing.T) {
		for _, tc := range []struct {
			name, override string
			link           Link
			code           llm.Code
		}{
			{"pinned local", PathLocal, up, llm.CodeContextLength},
			{"cloud down", "", Link{}, llm.CodeContextLength},
			{"invalid request", "", up, llm.CodeInvalid},
		} {
			local := &engine{failAt: 0, err: llm.Errorf(tc.code, "refused")}
			cloud := ok("cloud/p/w")
			_, err := dispatch(t, local, cloud, tc.link, lowEntropy, tc.override)
			if llm.CodeOf(err) != tc.code || cloud.calls != 0 {
				t.Errorf("%s: err %v, cloud calls %d", tc.name, err, cloud.calls)
			}
		}
	})
	t.Run("local failure", func(t *testing.T) {
		local := &engine{failAt: 0, err: llm.Errorf(llm.CodeOverloaded, "queue full")}
		r, err := dispatch(t, local, nil, Link{}, lowEntropy, "")
		if llm.CodeOf(err) != llm.CodeOverloaded || r.rec.Outcome != "error" {
			t.Errorf("%v %+v", err, r.rec)
		}
	})
}

// hungEngine accepts a request and never answers, like a half-open uplink.
type hungEngine struct{ cause error }

func (h *hungEngine) Generate(ctx context.Context, _ *llm.Request, _ llm.Emit) (llm.Final, error) {
	<-ctx.Done()
	h.cause = context.Cause(ctx)
	return llm.Final{}, ctx.Err()
}

// TestCloudWithoutFirstTokenFallsBack runs in a synctest bubble, so the
// default 15 s first-token bound passes in fake time.
func TestCloudWithoutFirstTokenFallsBack(t *testing.T) {
	synctest.Test(t, testCloudWithoutFirstTokenFallsBack)
}

func testCloudWithoutFirstTokenFallsBack(t *testing.T) {
	r, _ := NewRouter(Config{}, nil)
	hung := &hungEngine{}
	d, err := NewDispatcher(DispatcherConfig{Router: r, Local: &engine{tokens: []string{"here"}, failAt: -1}, Cloud: hung})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	var begin llm.Meta
	_, err = d.Generate(context.Background(), userReq(highEntropy), func(tok llm.Token) error {
		if tok.Meta != nil {
			begin = *tok.Meta
		}
		out.WriteString(tok.Text)
		return nil
	})
	f := begin.Fallback
	if err != nil || out.String() != "here" || f.Cause != llm.FallbackCloudTimeout || !strings.Contains(f.String(), "no token within 15s") || !errors.Is(hung.cause, errNoFirstToken) {
		t.Errorf("out %q err %v begin %+v cause %v", out.String(), err, begin, hung.cause)
	}
}

func BenchmarkDecide(b *testing.B) {
	r, _ := NewRouter(Config{}, nil)
	req := userReq("Summarise the last three service reports and tell me whether the brake pads need replacing soon.")
	b.ReportAllocs()
	for b.Loop() {
		r.Decide(req, up, Load{})
	}
}

// thresholdPredictor is fixedPredictor plus the threshold a trained model
// carries in its metadata.
type thresholdPredictor struct {
	fixedPredictor
	th float64
	ok bool
}

func (t *thresholdPredictor) Threshold() (float64, bool) { return t.th, t.ok }

func TestModelThreshold(t *testing.T) {
	decide := func(r *Router, p *thresholdPredictor, v float64) Decision {
		p.p = v
		return r.Decide(userReq("x"), up, Load{})
	}
	// Unset Config.Threshold: the model's 0.7 decides, band ±0.05.
	p := &thresholdPredictor{th: 0.7, ok: true}
	r, err := NewRouter(Config{}, p)
	if err != nil {
		t.Fatal(err)
	}
	if d := decide(r, p, 0.6); d.Path != PathLocal || d.Threshold != 0.7 || d.ThresholdSource != "model" || !strings.Contains(d.Reason, "model threshold 0.70") {
		t.Errorf("p=0.6 with model threshold 0.7: %s (%s), threshold %v from %s", d.Path, d.Reason, d.Threshold, d.ThresholdSource)
	}
	if d := decide(r, p, 0.76); d.Path != PathCloud {
		t.Errorf("p=0.76 with model threshold 0.7: %s (%s)", d.Path, d.Reason)
	}

	// A configured threshold wins over the model's.
	p = &thresholdPredictor{th: 0.7, ok: true}
	r, _ = NewRouter(Config{Threshold: 0.5}, p)
	if d := decide(r, p, 0.6); d.Path != PathCloud || d.Threshold != 0.5 || d.ThresholdSource != "config" {
		t.Errorf("configured 0.5 over model 0.7, p=0.6: %s, threshold %v from %s", d.Path, d.Threshold, d.ThresholdSource)
	}

	// A model without a threshold, or with one outside (0,1): 0.5.
	for _, bad := range []*thresholdPredictor{{th: 0.7, ok: false}, {th: 1.5, ok: true}} {
		r, _ = NewRouter(Config{}, bad)
		if d := decide(r, bad, 0.6); d.Path != PathCloud || d.Threshold != 0.5 || d.ThresholdSource != "default" {
			t.Errorf("model threshold %v/%v, p=0.6: %s, threshold %v from %s", bad.th, bad.ok, d.Path, d.Threshold, d.ThresholdSource)
		}
	}

	// When the predictor fails the entropy rule stands in, and its
	// probabilities are centred on 0.5, not on the model's threshold.
	p = &thresholdPredictor{th: 0.05, ok: true, fixedPredictor: fixedPredictor{err: errors.New("boom")}}
	r, _ = NewRouter(Config{}, p)
	if d := r.Decide(userReq(lowEntropy), up, Load{}); d.Path != PathLocal || d.Threshold != 0.5 || !strings.HasPrefix(d.ProbSource, "entropy-rule") {
		t.Errorf("failed predictor: %s, threshold %v, %s", d.Path, d.Threshold, d.ProbSource)
	}

	// Around a model threshold near 1 there is no band either.
	p = &thresholdPredictor{th: 0.95, ok: true}
	r, _ = NewRouter(Config{Hysteresis: 0.1}, p)
	for i, s := range []struct {
		p    float64
		want string
	}{{0.96, PathCloud}, {0.94, PathLocal}, {0.95, PathCloud}, {0.949, PathLocal}} {
		if d := decide(r, p, s.p); d.Path != s.want {
			t.Errorf("step %d p=%.3f around model threshold 0.95: %s (%s), want %s", i, s.p, d.Path, d.Reason, s.want)
		}
	}
}

// The shipped predictor, hot-swappable as the agent holds it, brings its
// own threshold: a car command stays on the device and an exam question
// goes to the cloud without any threshold configured.
func TestShippedPredictorThreshold(t *testing.T) {
	m, err := predictor.Default()
	if err != nil {
		t.Fatal(err)
	}
	want, ok := m.Threshold()
	if !ok {
		t.Fatal("the shipped predictor carries no threshold")
	}
	r, err := NewRouter(Config{}, predictor.NewSwappable(m))
	if err != nil {
		t.Fatal(err)
	}
	d := r.Decide(userReq("set the temperature to 21 degrees"), up, Load{})
	if d.Path != PathLocal || d.Threshold != want || d.ThresholdSource != "model" {
		t.Errorf("car command: %s (%s)", d.Path, d.Reason)
	}
	q := "Which of the following best explains the photoelectric effect?\nA. waves\nB. photons\nC. heat\nD. sound\nAnswer:"
	if d := r.Decide(userReq(q), up, Load{}); d.Path != PathCloud || d.ThresholdSource != "model" {
		t.Errorf("exam question: %s (%s)", d.Path, d.Reason)
	}
}

// TestProbeFillsFeatures: the router measures each request with Config.Probe
// before asking the predictor, and skips it where the score cannot matter.
func TestProbeFillsFeatures(t *testing.T) {
	var probed []string
	probe := func(text string) textfeat.Probe {
		probed = append(probed, text)
		return textfeat.Probe{PromptNLL: 3, Entropy: []float64{2, 1, 1, 1}, TopProb: []float64{0.3, 0.9, 0.9, 0.9}}
	}
	seen := &featurePredictor{}
	r, err := NewRouter(Config{Probe: probe}, seen)
	if err != nil {
		t.Fatal(err)
	}
	d := r.Decide(userReq("who wrote hamlet"), up, Load{})
	if !d.Probed || len(probed) != 1 || probed[0] != "who wrote hamlet" {
		t.Fatalf("probed %v, decision %+v", probed, d.Inputs)
	}
	if seen.last[textfeat.IdxProbed] != 1 || seen.last[textfeat.IdxEntropyFirst] != 2 || seen.last[textfeat.IdxPromptNLL] != 3 {
		t.Fatalf("predictor saw probe block %v", seen.last[textfeat.ProbeOffset:textfeat.V2Dim])
	}
	req := userReq("who wrote hamlet")
	req.Hints.Route = PathLocal
	for _, c := range []struct {
		req  *llm.Request
		link Link
	}{{req, up}, {userReq("x"), Link{}}, {userReq("x"), Link{Configured: true}}} {
		if d := r.Decide(c.req, c.link, Load{}); d.Probed || seen.last[textfeat.IdxProbed] != 0 {
			t.Errorf("probed with override %q, link %+v", c.req.Hints.Route, c.link)
		}
	}
	if len(probed) != 1 {
		t.Errorf("probe ran %d times, want once", len(probed))
	}
	// A predictor that does not read the block (the shipped one) is not
	// probed for: the probe would cost a prefill for nothing.
	blind := &featurePredictor{noProbe: true}
	r, err = NewRouter(Config{Probe: probe}, predictor.NewSwappable(blind))
	if err != nil {
		t.Fatal(err)
	}
	if d := r.Decide(userReq("who wrote hamlet"), up, Load{}); d.Probed || len(probed) != 1 || blind.last[textfeat.IdxProbed] != 0 {
		t.Errorf("probed for a predictor that does not read the probe: %d probes", len(probed))
	}
}

// featurePredictor records the vector it was asked about.
type featurePredictor struct {
	last    []float32
	noProbe bool // ReadsProbe answers false
}

func (p *featurePredictor) ReadsProbe() bool { return !p.noProbe }

func (p *featurePredictor) Predict(f []float32) (float64, error) {
	p.last = slices.Clone(f)
	return 0.5, nil
}

// TestEntropyRuleAsPredictor: the rule behind a Swappable decides exactly
// as the router's own stand-in does, and says it is the rule.
func TestEntropyRuleAsPredictor(t *testing.T) {
	alone, _ := NewRouter(Config{}, nil)
	swapped, _ := NewRouter(Config{}, predictor.NewSwappable(predictor.EntropyRule{}))
	for _, text := range []string{lowEntropy, highEntropy} {
		a, s := alone.Decide(userReq(text), up, Load{}), swapped.Decide(userReq(text), up, Load{})
		if a.CloudProb != s.CloudProb || a.Path != s.Path || s.ProbSource != "entropy-rule" || a.ProbSource != "entropy-rule" {
			t.Errorf("%q: alone %v %s %s, swappable %v %s %s", text, a.CloudProb, a.Path, a.ProbSource, s.CloudProb, s.Path, s.ProbSource)
		}
	}
}
