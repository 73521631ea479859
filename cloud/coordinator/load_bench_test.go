package coordinator

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/admit"
	"github.com/phaseless/phaseless/cloud/batch"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/sim"
	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/transport/llm"
)

// stampedEngine is a worker's engine that notes, per request, when the
// engine got it and when it produced the first token: the engine's own
// time to first token (for a remote engine, its HTTP round trip included),
// which the coordinator's added latency excludes.
type stampedEngine struct {
	worker.Engine
	mu    sync.Mutex // guards spans
	spans map[*llm.Request]time.Duration
}

func (e *stampedEngine) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	start, first := time.Now(), true
	return e.Engine.Generate(ctx, req, func(t llm.Token) error {
		if first {
			first = false
			e.mu.Lock()
			e.spans[req] = time.Since(start)
			e.mu.Unlock()
		}
		return emit(t)
	})
}

// loadResult is one burst of concurrent streams through a coordinator.
type loadResult struct {
	added    []time.Duration // client TTFT minus engine TTFT, per answered request
	ok, shed int             // answered; refused with 429/503 (overloaded, budget)
	other    int             // any other outcome (errors, timeouts): must stay 0
	peakHeap uint64
}

// builtinEngines is three built-in engines on the test model: they share
// the benchmark's CPUs with the coordinator.
func builtinEngines(b *testing.B) []worker.Engine {
	var out []worker.Engine
	for range 3 {
		m, err := worker.DevModel(testModelConfig, 1)
		if err != nil {
			b.Fatal(err)
		}
		eng, err := lm.NewEngine(m, lm.EngineConfig{MaxBatch: 16, Threads: 1})
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, worker.NewBuiltin(eng))
	}
	return out
}

// simEngines is three simulated H100s serving llama3.1-8b in real time
// (cloud/sim, what --worker sim://h100?model=llama3.1-8b&n=3 starts),
// reached over HTTP as remote workers: the engines' time passes without
// taking the benchmark's CPUs.
func simEngines(b *testing.B) []worker.Engine {
	f, err := sim.StartFleet("sim://h100?model=llama3.1-8b&n=3")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	var out []worker.Engine
	for _, u := range f.URLs() {
		r, err := worker.NewRemote(worker.RemoteConfig{URL: u, Model: f.Spec().Model.Name})
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// runStreams starts n streams at once through a coordinator over three
// workers (prefill, decode and stream pools) and waits for every one to end.
func runStreams(b *testing.B, n int, fair admit.FairConfig, engines func(*testing.B) []worker.Engine) loadResult {
	b.Helper()
	var stamped []*stampedEngine
	var ws []*worker.Worker
	roles := []sched.Role{sched.RolePrefill, sched.RoleDecode, sched.RoleStream}
	for i, e := range engines(b) {
		se := &stampedEngine{Engine: e, spans: map[*llm.Request]time.Duration{}}
		w, err := worker.New(worker.Config{Name: fmt.Sprint("w", i), Role: roles[i%len(roles)], Batch: &batch.Config{}}, se)
		if err != nil {
			b.Fatal(err)
		}
		stamped, ws = append(stamped, se), append(ws, w)
	}
	set, err := worker.NewSet(context.Background(), time.Hour, ws...)
	if err != nil {
		b.Fatal(err)
	}
	defer set.Close()
	a, err := admit.New(admit.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	tok, _ := lm.ByteTokenizerSpec().Build()
	c, err := New(Config{Workers: set, Admitter: a, Tokenizer: tok, Fair: fair})
	if err != nil {
		b.Fatal(err)
	}

	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	type outcome struct {
		req  *llm.Request
		ttft time.Duration
		err  error
	}
	out := make([]outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		req := request(fmt.Sprint("tenant-", i%50), fmt.Sprintf("Stream %d: what is the tyre pressure of car %d?", i, i*7), 4)
		out[i].req = req
		wg.Go(func() {
			start, first := time.Now(), true
			_, err := c.Generate(context.Background(), req, func(llm.Token) error {
				if first {
					first = false
					out[i].ttft = time.Since(start)
				}
				return nil
			})
			out[i].err = err
		})
	}
	wg.Wait()
	close(stop)
	<-sampled
	res := loadResult{peakHeap: peak.Load()}
	for _, o := range out {
		switch code := llm.CodeOf(o.err); {
		case o.err == nil:
			var span time.Duration
			found := false
			for _, e := range stamped {
				e.mu.Lock()
				if s, ok := e.spans[o.req]; ok {
					span, found = s, true
				}
				e.mu.Unlock()
			}
			if !found {
				b.Fatalf("request %p answered but no engine saw it", o.req)
			}
			res.ok++
			res.added = append(res.added, o.ttft-span)
		case code == llm.CodeOverloaded || code == llm.CodeBudget:
			res.shed++
		default:
			res.other++
		}
	}
	return res
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, len(d)*p/100)]
}

// BenchmarkCoordinatorStreams runs bursts of 100, 300 and 1,000 concurrent
// streams through the coordinator onto three workers — simulated H100s
// (sim) and built-in engines (builtin) — and reports the coordinator's
// added time to first token (client TTFT minus the engine's own TTFT:
// admission, fair queueing, placement, the batching window and
// forwarding) at p50 and p95, the peak heap, and the share of requests
// refused. Slots is the burst size, so no request waits for a coordinator
// slot; "overload" is the cloud's default slots with a 256-request queue,
// where the excess must be refused (503 overloaded), not left to time out.
//
//	go test -run '^$' -bench BenchmarkCoordinatorStreams -benchtime 3x ./cloud/coordinator/
func BenchmarkCoordinatorStreams(b *testing.B) {
	for _, eng := range []struct {
		name string
		new  func(*testing.B) []worker.Engine
	}{{"sim", simEngines}, {"builtin", builtinEngines}} {
		for _, l := range []struct {
			name    string
			streams int
			fair    admit.FairConfig
		}{
			{"streams=100", 100, admit.FairConfig{Slots: 100}},
			{"streams=300", 300, admit.FairConfig{Slots: 300}},
			{"streams=1000", 1000, admit.FairConfig{Slots: 1000}},
			{"overload/streams=1000/queue=256", 1000, admit.FairConfig{MaxQueue: 256}},
		} {
			b.Run(eng.name+"/"+l.name, func(b *testing.B) {
				var added []time.Duration
				var ok, shed, other int
				var peak uint64
				for b.Loop() {
					r := runStreams(b, l.streams, l.fair, eng.new)
					added = append(added, r.added...)
					ok, shed, other = ok+r.ok, shed+r.shed, other+r.other
					peak = max(peak, r.peakHeap)
				}
				if other > 0 {
					b.Fatalf("%d requests neither answered nor refused", other)
				}
				b.ReportMetric(float64(pct(added, 50).Microseconds())/1000, "p50-added-ms")
				b.ReportMetric(float64(pct(added, 95).Microseconds())/1000, "p95-added-ms")
				b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
				b.ReportMetric(float64(shed)/float64(ok+shed), "shed-ratio")
			})
		}
	}
}
