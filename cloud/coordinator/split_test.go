package coordinator

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/batch"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/sched/schedtest"
	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm"
)

func splitAt(prefill, decode int, pool sched.Role) schedtest.Fixed {
	return schedtest.Fixed{D: sched.Decision{Worker: prefill, Pool: pool, Split: true, DecodeWorker: decode}}
}

// collected is what a client of the coordinator sees of one request.
type collected struct {
	begin llm.Meta
	text  string
	fin   llm.Final
	err   error
}

func collect(c *Coordinator, req *llm.Request) collected {
	var r collected
	r.fin, r.err = c.Generate(context.Background(), req, func(tk llm.Token) error {
		if tk.Meta != nil {
			r.begin = *tk.Meta
			return nil
		}
		r.text += tk.Text
		return nil
	})
	return r
}

func greedy(text string, n int) *llm.Request {
	r := request("alice", text, n)
	r.Temperature = 0
	return r
}

func counterValue(t *testing.T, reg *metrics.Registry, series string) float64 {
	t.Helper()
	var sb strings.Builder
	reg.WriteText(&sb)
	for _, line := range strings.Split(sb.String(), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	return 0
}

// TestSplitMatchesColocated: a Split decision prefills on one built-in
// worker and decodes on another; the client gets the tokens a colocated
// run gives, the begin event names both workers, and the handoff is
// counted.
func TestSplitMatchesColocated(t *testing.T) {
	clk := &clock{t: time.Unix(1e9, 0)}
	prompt := strings.Repeat("the quick brown fox jumps over the lazy dog. ", 4)
	for _, temp := range []float64{0, 0.8} {
		req := greedy(prompt, 24)
		req.Temperature = temp

		solo, _ := builtinWorker(t, "solo", sched.RoleDecode)
		colo, _ := newCoordinatorWith(t, clk, schedtest.Fixed{D: sched.Decision{Worker: 0, Pool: sched.RoleDecode}}, solo)
		want := collect(colo, req)
		if want.err != nil || want.text == "" {
			t.Fatalf("colocated: %+v", want)
		}

		p, pEng := builtinWorker(t, "pre", sched.RolePrefill)
		d, dEng := builtinWorker(t, "dec", sched.RoleDecode)
		c, reg := newCoordinatorWith(t, clk, splitAt(0, 1, sched.RolePrefill), p, d)
		got := collect(c, req)
		if got.err != nil {
			t.Fatal(got.err)
		}
		if got.text != want.text || got.fin.CompletionTokens != want.fin.CompletionTokens {
			t.Fatalf("temperature %v: split %q (%d tokens), colocated %q (%d)", temp, got.text, got.fin.CompletionTokens, want.text, want.fin.CompletionTokens)
		}
		b := got.begin
		if b.Worker != "pre" || b.Pool != "prefill-heavy" || b.Split.DecodeWorker != "dec" || b.Split.DecodePool != "decode-heavy" || b.Split.KVBytes <= 0 {
			t.Fatalf("begin event %+v", b)
		}
		if b.Fallback.Cause != llm.FallbackNone {
			t.Fatalf("fallback %+v on a split that worked", b.Fallback)
		}
		// The engines' share of the TTFT (Server-Timing) counts the
		// prefill and the transfer before the decode's first token.
		stages := counterValue(t, reg, `phaseless_pd_handoff_seconds_sum{stage="prefill"}`) + counterValue(t, reg, `phaseless_pd_handoff_seconds_sum{stage="transfer"}`)
		if b.EngineTTFT.Seconds() <= stages {
			t.Fatalf("engine TTFT %v, but prefill and transfer took %vs", b.EngineTTFT, stages)
		}
		if ps, ds := pEng.Stats(), dEng.Stats(); ps.HandoffsOut != 1 || ds.HandoffsIn != 1 || ps.DecodeTokens != 0 || ds.PrefillTokens != 0 {
			t.Fatalf("prefill engine %+v\ndecode engine %+v", ps, ds)
		}
		if v := counterValue(t, reg, `phaseless_pd_handoff_bytes_total{prefill_pool="prefill-heavy",decode_pool="decode-heavy"}`); v != float64(b.Split.KVBytes) {
			t.Fatalf("handoff bytes counter %v, begin event says %d", v, b.Split.KVBytes)
		}
		if v := counterValue(t, reg, `phaseless_pd_handoffs_total{result="ok"}`); v != 1 {
			t.Fatalf("handoffs ok = %v", v)
		}
		if v := counterValue(t, reg, `phaseless_pd_handoff_prompt_tokens_total{prefill_pool="prefill-heavy",decode_pool="decode-heavy"}`); v != float64(got.fin.PromptTokens) || v == 0 {
			t.Fatalf("handoff prompt tokens %v, final %+v", v, got.fin)
		}
	}
}

// TestSplitFailureRunsColocated: when the handoff cannot complete, the
// request runs on the prefill worker alone, with a typed fallback and the
// failed stage counted.
func TestSplitFailureRunsColocated(t *testing.T) {
	clk := &clock{t: time.Unix(1e9, 0)}
	req := greedy("a prompt that will not be split after all", 12)
	solo, _ := builtinWorker(t, "solo", sched.RoleDecode)
	colo, _ := newCoordinatorWith(t, clk, schedtest.Fixed{D: sched.Decision{Worker: 0, Pool: sched.RoleDecode}}, solo)
	want := collect(colo, req)

	// An OpenAI-compatible server that is not Phaseless: no /v1/kv/.
	var kvCalls atomic.Int32
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		if strings.HasPrefix(r.URL.Path, "/v1/kv/") {
			kvCalls.Add(1)
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(plain.Close)

	for _, tc := range []struct {
		name   string
		decode func(t *testing.T) *worker.Worker
		stage  string
		code   llm.Code
	}{
		{"decode server without kv endpoints", func(t *testing.T) *worker.Worker {
			rem, err := worker.NewRemote(worker.RemoteConfig{URL: plain.URL})
			if err != nil {
				t.Fatal(err)
			}
			w, _ := worker.New(worker.Config{Name: "vllm", Role: sched.RoleDecode}, rem)
			return w
		}, "transfer", llm.CodeUnavailable},
		{"decode engine on another model", func(t *testing.T) *worker.Worker {
			m, err := worker.DevModel(testModelConfig, 2)
			if err != nil {
				t.Fatal(err)
			}
			eng, _ := lm.NewEngine(m, lm.EngineConfig{Threads: 1})
			w, _ := worker.New(worker.Config{Name: "other", Role: sched.RoleDecode, Batch: &batch.Config{}}, worker.NewBuiltin(eng))
			return w
		}, "transfer", llm.CodeInvalid},
		{"decode engine closed", func(t *testing.T) *worker.Worker {
			w, eng := builtinWorker(t, "closed", sched.RoleDecode)
			eng.Close()
			return w
		}, "resume", llm.CodeUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := builtinWorker(t, "pre", sched.RolePrefill)
			dw := tc.decode(t)
			c, reg := newCoordinatorWith(t, clk, splitAt(0, 1, sched.RolePrefill), p, dw)
			got := collect(c, req)
			if got.err != nil {
				t.Fatal(got.err)
			}
			if got.text != want.text {
				t.Fatalf("fallback text %q, colocated %q", got.text, want.text)
			}
			f := got.begin.Fallback
			if f.Cause != llm.FallbackHandoffFailed || f.From != dw.Name() || f.Code != tc.code || got.begin.Split.IsSet() || got.begin.Worker != "pre" {
				t.Fatalf("begin event %+v", got.begin)
			}
			if v := counterValue(t, reg, `phaseless_pd_handoffs_total{result="`+tc.stage+`"}`); v != 1 {
				t.Fatalf("handoffs{result=%s} = %v", tc.stage, v)
			}
			// A second split to the same worker: a server that answered 404
			// is not asked again.
			if got := collect(c, req); got.err != nil || got.begin.Fallback.Cause != llm.FallbackHandoffFailed {
				t.Fatalf("second request %+v", got)
			}
		})
	}
	if n := kvCalls.Load(); n != 1 {
		t.Fatalf("the server without kv endpoints was asked %d times", n)
	}
}

// TestDisaggregatedPolicy: the --dev policy splits from the prefill-heavy
// pool to the decode-heavy one, and runs colocated when no pair exists.
func TestDisaggregatedPolicy(t *testing.T) {
	clk := &clock{t: time.Unix(1e9, 0)}
	st, _ := builtinWorker(t, "st", sched.RoleStream)
	pre, _ := builtinWorker(t, "pre", sched.RolePrefill)
	dec, _ := builtinWorker(t, "dec", sched.RoleDecode)
	c, _ := newCoordinatorConfig(t, clk, Config{AllowPolicyOverride: true}, st, pre, dec)
	req := greedy("split by the dev policy", 6)
	req.Hints.Policy = sched.NameDisaggregated
	got := collect(c, req)
	if got.err != nil || got.begin.Worker != "pre" || got.begin.Split.DecodeWorker != "dec" {
		t.Fatalf("%+v", got)
	}

	lone, _ := builtinWorker(t, "lone", sched.RoleDecode)
	c2, _ := newCoordinatorConfig(t, clk, Config{AllowPolicyOverride: true}, lone)
	if got := collect(c2, req); got.err != nil || got.begin.Split.IsSet() || got.begin.Worker != "lone" {
		t.Fatalf("no prefill pool: %+v", got)
	}
}

// TestSplitNeedsACarriablePrompt: a remote prefill worker gets the prompt
// as plain turns (/v1/kv/prefill), so a request with tools, a response
// format, tool turns or cache breakpoints is not split onto one (its prefill
// would render another prompt, which the decode worker refuses after the
// whole prefill and transfer); a built-in prefill worker takes the request
// itself and splits anything.
func TestSplitNeedsACarriablePrompt(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	rem, err := worker.NewRemote(worker.RemoteConfig{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	rw, _ := worker.New(worker.Config{Name: "remote", Role: sched.RolePrefill}, rem)
	bw, _ := builtinWorker(t, "builtin", sched.RoleDecode)
	c, _ := newCoordinatorWith(t, &clock{t: time.Unix(1e9, 0)}, splitAt(0, 1, sched.RolePrefill), rw, bw)

	tools := greedy("turn the fan up", 4)
	tools.Tools = []llm.Tool{{Name: "set_fan_speed", Parameters: []byte(`{"type":"object"}`)}}
	format := greedy("answer in JSON", 4)
	format.ResponseFormat.Type = llm.FormatJSONObject
	toolTurn := greedy("and now?", 4)
	toolTurn.Messages = append([]llm.Message{{Role: "tool", Content: "ok", ToolTurn: llm.ToolTurn{ToolCallID: "call_1"}}}, toolTurn.Messages...)
	pinned := greedy("a long system prompt", 4)
	pinned.CacheBreakpoints = []llm.CacheBreakpoint{{Message: 0, TTL: 5 * time.Minute}}

	builtinFirst, _ := newCoordinatorWith(t, &clock{t: time.Unix(1e9, 0)}, splitAt(1, 0, sched.RolePrefill), rw, bw)
	split := func(c *Coordinator, req *llm.Request) bool {
		m := c.measure(req)
		placeRequest(req, &m)
		d, err := c.decide(&m, &sched.Snapshot{})
		if err != nil {
			t.Fatal(err)
		}
		return d.Split
	}
	if !split(c, greedy("plain turns", 4)) {
		t.Fatal("a plain request is not split onto the remote prefill worker")
	}
	for name, req := range map[string]*llm.Request{"tools": tools, "response_format": format, "tool turn": toolTurn, "cache breakpoint": pinned} {
		if split(c, req) {
			t.Errorf("%s: split onto a remote prefill worker that cannot render it", name)
		}
		if !split(builtinFirst, req) {
			t.Errorf("%s: not split from a built-in prefill worker", name)
		}
	}
	if split(c, greedy("x", 1)) {
		t.Fatal("a one-token request is split: the prefill samples its only token")
	}
}
