package worker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/phaseless/phaseless/cloud/batch"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/lm/chatfmt"
	"github.com/phaseless/phaseless/models/lm/kvcache"
	"github.com/phaseless/phaseless/transport/httpapi"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// tinyConfig keeps the engine fast on two shared cores.
var tinyConfig = lm.Config{Vocab: 258, Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, FFN: 64, ContextLen: 512}

func tinyEngine(t *testing.T) *lm.Engine { return engineOf(t, tinyConfig) }

func engineOf(t *testing.T, cfg lm.Config) *lm.Engine {
	t.Helper()
	m, err := DevModel(cfg, 7)
	if err != nil {
		t.Fatal(err)
	}
	e, err := lm.NewEngine(m, lm.EngineConfig{MaxBatch: 4, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// phaselessServer serves a built-in engine through the real compatible API
// and engine metrics: what `phaseless-cloud` exposes, minus the scheduler.
func phaselessServer(t *testing.T) (*httptest.Server, *Builtin) {
	return phaselessServerWith(t, tinyConfig)
}

func phaselessServerWith(t *testing.T, cfg lm.Config) (*httptest.Server, *Builtin) {
	t.Helper()
	b := NewBuiltin(engineOf(t, cfg))
	reg := metrics.NewRegistry()
	RegisterEngineMetrics(reg, []*Builtin{b})
	h, err := httpapi.NewHandler(b, httpapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", h)
	metrics.Health(mux, reg, nil)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		b.Close()
	})
	return srv, b
}

func collect(t *testing.T, g llm.Generator, req *llm.Request) (string, llm.Final) {
	t.Helper()
	var sb strings.Builder
	fin, err := g.Generate(context.Background(), req, func(tk llm.Token) error {
		sb.WriteString(tk.Text)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sb.String(), fin
}

func chat(text string, n int) *llm.Request {
	return &llm.Request{Model: "auto", Messages: []llm.Message{{Role: "user", Content: text}}, MaxTokens: n, Seed: 1}
}

// TestRemoteAgainstPhaseless: the remote kind streams the same greedy text as
// the engine it fronts, and reads its load from the server's /metrics.
func TestRemoteAgainstPhaseless(t *testing.T) {
	srv, b := phaselessServer(t)
	r, err := NewRemote(RemoteConfig{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	req := chat("hello there, how are you", 12)
	direct, _ := collect(t, b, req)
	remote, fin := collect(t, r, req)
	if remote != direct || remote == "" {
		t.Fatalf("remote streamed %q, engine directly %q", remote, direct)
	}
	if fin.CompletionTokens == 0 || fin.PromptTokens == 0 || fin.TTFT <= 0 || fin.TTFT > fin.Total {
		t.Fatalf("final %+v", fin)
	}
	l, err := r.Probe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if l.Capacity != 4 || l.PromptTokens == 0 {
		t.Fatalf("probed load %+v; want capacity 4 and the prompt tokens run", l)
	}
}

// TestRemoteCancelFreesEngine: a caller that stops reading ends the
// generation on the server: the engine has no sequence running afterwards.
func TestRemoteCancelFreesEngine(t *testing.T) {
	// A model slow enough (about 0.5 ms a token) that 900 tokens outlast
	// the cancellation's trip back to the server.
	srv, b := phaselessServerWith(t, lm.Config{Vocab: 258, Dim: 128, Layers: 2, Heads: 4, KVHeads: 2, FFN: 256, ContextLen: 1024})
	r, _ := NewRemote(RemoteConfig{URL: srv.URL})
	defer r.Close()
	ctx, cancel := context.WithCancel(context.Background())
	got := 0
	_, err := r.Generate(ctx, chat("hello there, how are you", 900), func(llm.Token) error {
		got++
		if got == 3 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	deadline := time.Now().Add(20 * time.Second) // hang guard
	for {
		l, _ := b.Probe(context.Background())
		if l.Running == 0 && l.Waiting == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine still busy after the client left: %+v", l)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if s := b.LM().Stats(); s.KVBlocksUsed != 0 || s.DecodeTokens >= 900 {
		t.Fatalf("after cancel: %d KV blocks held, %d tokens decoded (900 = it ran to the end)", s.KVBlocksUsed, s.DecodeTokens)
	}
}

func TestRemoteErrors(t *testing.T) {
	stall := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/busy/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"error":{"message":"slow down","type":"rate_limit_error"}}`)
	})
	mux.HandleFunc("/stall/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-stall:
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/midfail/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"error\":{\"message\":\"engine overloaded\",\"type\":\"overloaded_error\"}}\n\n")
	})
	mux.HandleFunc("/broken/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer close(stall)
	cases := []struct {
		path string
		want llm.Code
	}{{"/busy", llm.CodeOverloaded}, {"/stall", llm.CodeTimeout}, {"/midfail", llm.CodeOverloaded}, {"/broken", llm.CodeInternal}}
	for _, c := range cases {
		t.Run(c.path, func(t *testing.T) {
			r, _ := NewRemote(RemoteConfig{URL: srv.URL + c.path, TokenTimeout: 100 * time.Millisecond})
			defer r.Close()
			_, err := r.Generate(context.Background(), chat("x", 5), func(llm.Token) error { return nil })
			if llm.CodeOf(err) != c.want {
				t.Fatalf("err %v, want code %s", err, c.want)
			}
			var le *llm.Error
			if c.path == "/busy" && (!errors.As(err, &le) || le.RetryAfter != 3*time.Second) {
				t.Fatalf("Retry-After lost: %v", err)
			}
		})
	}
	// Nothing listening: unavailable, and the probe fails.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	r, _ := NewRemote(RemoteConfig{URL: "http://" + addr})
	defer r.Close()
	if _, err := r.Generate(context.Background(), chat("x", 5), func(llm.Token) error { return nil }); llm.CodeOf(err) != llm.CodeUnavailable {
		t.Fatalf("closed port: %v", err)
	}
	if _, err := r.Probe(context.Background()); err == nil {
		t.Fatal("probe of a closed port succeeded")
	}
}

// vllmMetrics is an excerpt of a vLLM 0.8 /metrics page.
const vllmMetrics = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.42
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 12.0
vllm:prefix_cache_hits_total{model_name="x",weird="a\"}b"} 300 1700000000000
`

func TestProbeVLLMMetrics(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, vllmMetrics) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	r, _ := NewRemote(RemoteConfig{URL: srv.URL})
	defer r.Close()
	l, err := r.Probe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if l.Running != 7 || l.Waiting != 3 || l.KVUsage != 0.42 || l.PrefixHitTokens != 300 {
		t.Fatalf("load %+v", l)
	}
	// A server without /metrics is probed for liveness on /v1/models.
	mux2 := http.NewServeMux()
	mux2.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"data":[]}`) })
	srv2 := httptest.NewServer(mux2)
	defer srv2.Close()
	r2, _ := NewRemote(RemoteConfig{URL: srv2.URL})
	defer r2.Close()
	if _, err := r2.Probe(context.Background()); err != nil {
		t.Fatalf("liveness probe: %v", err)
	}
}

func TestBurstMeter(t *testing.T) {
	m := NewBurstMeter()
	t0 := time.Unix(1000, 0)
	// Steady: 5 tokens in every 100 ms slot for 2 s.
	for s := 0; s < 20; s++ {
		for k := 0; k < 5; k++ {
			m.Record(t0.Add(time.Duration(s)*burstSlot + time.Duration(k)*time.Millisecond))
		}
	}
	if got := m.Sigma(t0.Add(20 * burstSlot)); got != 0 {
		t.Fatalf("steady σ = %v, want 0", got)
	}
	// Bursty: 50 tokens in one slot out of 20 (mean 2.5, σ ≈ 10.9 > 8.3).
	b := NewBurstMeter()
	for k := 0; k < 50; k++ {
		b.Record(t0.Add(5 * burstSlot))
	}
	if got := b.Sigma(t0.Add(20 * burstSlot)); got < 10.8 || got > 11 {
		t.Fatalf("bursty σ = %v, want ≈ 10.9", got)
	}
	// Old slots age out.
	if got := b.Sigma(t0.Add(time.Minute)); got != 0 {
		t.Fatalf("σ a minute later = %v", got)
	}
}

// TestBurstMeterConcurrent: Record takes no lock, and no token is lost
// when every stream of a worker records at once, across a slot boundary.
func TestBurstMeterConcurrent(t *testing.T) {
	m := NewBurstMeter()
	t0 := time.Unix(1000, 0)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for k := range 1000 {
				m.Record(t0.Add(time.Duration((g+k)%2) * burstSlot))
			}
		})
	}
	wg.Wait()
	// 4,000 tokens in each of two slots out of 20: mean 400, σ = √(2·4000²/20 − 400²).
	want := math.Sqrt(2*4000*4000/20.0 - 400*400)
	if got := m.Sigma(t0.Add(20 * burstSlot)); math.Abs(got-want) > 1e-9 {
		t.Fatalf("σ = %v, want %v (tokens lost or doubled)", got, want)
	}
}

func TestPrefixIndex(t *testing.T) {
	p := newPrefixIndex(8)
	p.add([]uint64{11, 22, 33})
	if got := p.match([]uint64{11, 22, 44}); got != 2 {
		t.Fatalf("match = %d, want 2", got)
	}
	if got := p.match([]uint64{22}); got != 1 {
		t.Fatalf("match = %d", got)
	}
	if got := p.match([]uint64{99, 11}); got != 0 {
		t.Fatalf("match must count leading blocks only: %d", got)
	}
}

// TestWorkerSetSignals: a built-in worker reports its cached prefix, a dead
// remote turns unhealthy, and the snapshot carries both.
func TestWorkerSetSignals(t *testing.T) {
	eng := tinyEngine(t)
	bw, err := New(Config{Name: "local", Role: sched.RoleDecode, Batch: &batch.Config{}}, NewBuiltin(eng))
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	rem, _ := NewRemote(RemoteConfig{URL: "http://" + dead, ProbeTimeout: time.Second})
	rw, _ := New(Config{Name: "dead", Role: sched.RolePrefill}, rem)
	set, err := NewSet(context.Background(), time.Hour, bw, rw)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	defer set.Close()

	prompt := strings.Repeat("the same long system prompt. ", 8)
	req := chat(prompt, 4)
	ids := eng.Model().Tokenizer().Encode(chatfmt.Prompt(req.Messages))
	ids = append([]int32{eng.Model().Tokenizer().BOS()}, ids...)
	hashes := kvcache.BlockHashes(ids, 16)
	if len(hashes) < 4 {
		t.Fatalf("only %d blocks", len(hashes))
	}
	var mu sync.Mutex
	n := 0
	_, size, err := bw.Generate(context.Background(), req, len(ids), hashes, func(llm.Token) error {
		mu.Lock()
		n++
		mu.Unlock()
		return nil
	})
	if err != nil || size != 1 || n == 0 {
		t.Fatalf("generate: err %v batch %d tokens %d", err, size, n)
	}
	if bw.OutputTokens() != uint64(n) {
		t.Fatalf("output tokens %d, emitted %d", bw.OutputTokens(), n)
	}
	var snap sched.Snapshot
	set.Snapshot(&snap, hashes)
	if len(snap.Workers) != 2 {
		t.Fatalf("%d workers", len(snap.Workers))
	}
	local, remote := snap.Workers[0], snap.Workers[1]
	if !local.Healthy || local.PrefixBlocks < len(hashes)-1 || local.Capacity != 4 {
		t.Fatalf("local signals %+v (want its cached prefix of ~%d blocks)", local, len(hashes))
	}
	if remote.Healthy || set.Workers()[1].ProbeError() == "" {
		t.Fatalf("dead remote still healthy: %+v", remote)
	}
	if err := set.Ready(); err != nil {
		t.Fatalf("ready with one healthy worker: %v", err)
	}
	allocs := testing.AllocsPerRun(50, func() { set.Snapshot(&snap, hashes) })
	if allocs != 0 {
		t.Fatalf("Snapshot allocates %v per call", allocs)
	}
}
