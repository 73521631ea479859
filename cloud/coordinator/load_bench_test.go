package coordinator

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/admit"
	"github.com/phaseless/phaseless/cloud/batch"
	"github.com/phaseless/phaseless/cloud/loadgen"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/sim"
	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

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

// coordinatorFor builds a coordinator over three workers (prefill, decode
// and stream pools) on the given engines.
func coordinatorFor(b *testing.B, fair admit.FairConfig, engines []worker.Engine) *Coordinator {
	b.Helper()
	var ws []*worker.Worker
	roles := []sched.Role{sched.RolePrefill, sched.RoleDecode, sched.RoleStream}
	for i, e := range engines {
		w, err := worker.New(worker.Config{Name: fmt.Sprint("w", i), Role: roles[i%len(roles)], Batch: &batch.Config{}}, e)
		if err != nil {
			b.Fatal(err)
		}
		ws = append(ws, w)
	}
	set, err := worker.NewSet(context.Background(), time.Hour, ws...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { set.Close() })
	a, err := admit.New(admit.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close() })
	tok, _ := tokenizer.ByteSpec().Build()
	c, err := New(Config{Workers: set, Admitter: a, Tokenizer: tok, Fair: fair})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// generateSend is loadgen's Send in process: one streamed request through
// c.Generate, its engine TTFT read from the begin event as the HTTP API
// would write it (Server-Timing).
func generateSend(c *Coordinator, maxTokens int) loadgen.Send {
	return func(ctx context.Context, stream, seq int) loadgen.Sample {
		req := request(fmt.Sprint("tenant-", stream%50), fmt.Sprintf("Stream %d, request %d: what is the tyre pressure of car %d?", stream, seq, stream*7+seq), maxTokens)
		var s loadgen.Sample
		start := time.Now()
		_, err := c.Generate(ctx, req, func(t llm.Token) error {
			switch {
			case t.Meta != nil:
				s.EngineTTFT = t.Meta.EngineTTFT
			case s.TTFT == 0:
				s.TTFT = time.Since(start)
			}
			return nil
		})
		switch code := llm.CodeOf(err); {
		case err == nil:
		case code == llm.CodeOverloaded || code == llm.CodeBudget:
			s.Outcome, s.Err = loadgen.Shed, err.Error()
		default:
			s.Outcome, s.Err = loadgen.Failed, err.Error()
		}
		return s
	}
}

// peakHeap samples the heap until stop is closed and returns its peak.
func peakHeap(stop <-chan struct{}) <-chan uint64 {
	out := make(chan uint64, 1)
	go func() {
		var ms runtime.MemStats
		var peak uint64
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-stop:
				out <- peak
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return out
}

// BenchmarkCoordinatorStreams keeps 100, 300 and 1,000 streams open at once
// through the coordinator onto three workers — simulated H100s (sim) and
// built-in engines (builtin) — on loadgen's schedule (the streams' starts
// spread over a second, each then sending its requests back to back), and
// reports the coordinator's added time to first token (client TTFT minus
// the engine's own, which the coordinator reports in the begin event:
// admission, fair queueing, placement, the batching window and forwarding)
// at p50 and p95, the peak heap, and the share of requests refused. Slots
// is the stream count, so no request waits for a coordinator slot;
// "overload" is the cloud's default 64 slots with a 256-request queue,
// where the excess must be refused (503 overloaded), not left to time out;
// "burst" starts all 300 streams in the same instant (see
// docs/reliability.md for why that one grows with the stream count).
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
			ramp    time.Duration
		}{
			{"streams=100", 100, admit.FairConfig{Slots: 100}, time.Second},
			{"streams=300", 300, admit.FairConfig{Slots: 300}, time.Second},
			{"streams=1000", 1000, admit.FairConfig{Slots: 1000}, time.Second},
			{"overload/streams=1000/queue=256", 1000, admit.FairConfig{MaxQueue: 256}, time.Second},
			{"burst/streams=300", 300, admit.FairConfig{Slots: 300}, time.Nanosecond},
		} {
			b.Run(eng.name+"/"+l.name, func(b *testing.B) {
				res := &loadgen.Result{}
				var peak uint64
				for b.Loop() {
					c := coordinatorFor(b, l.fair, eng.new(b))
					stop := make(chan struct{})
					heap := peakHeap(stop)
					r, err := loadgen.Run(context.Background(), loadgen.Config{Streams: l.streams, Requests: 2, Ramp: l.ramp}, generateSend(c, 8))
					close(stop)
					if err != nil {
						b.Fatal(err)
					}
					res.Samples = append(res.Samples, r.Samples...)
					peak = max(peak, <-heap)
				}
				if n := res.Count(loadgen.Failed); n > 0 {
					var buf strings.Builder
					res.WriteText(&buf)
					b.Fatalf("%d requests neither answered nor refused:\n%s", n, buf.String())
				}
				added := res.Added()
				b.ReportMetric(float64(loadgen.Percentile(added, 50))/1e6, "p50-added-ms")
				b.ReportMetric(float64(loadgen.Percentile(added, 95))/1e6, "p95-added-ms")
				b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
				b.ReportMetric(float64(res.Count(loadgen.Shed))/float64(len(res.Samples)), "shed-ratio")
			})
		}
	}
}
