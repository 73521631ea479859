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
	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/transport/llm"
)

// stampedEngine is a built-in engine that notes, per request, when the
// engine got it and when it produced the first token: the engine's own
// time to first token, which the coordinator's added latency excludes.
type stampedEngine struct {
	*worker.Builtin
	mu    sync.Mutex // guards spans
	spans map[*llm.Request]time.Duration
}

func (e *stampedEngine) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	start, first := time.Now(), true
	return e.Builtin.Generate(ctx, req, func(t llm.Token) error {
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

// runStreams starts n streams at once through a coordinator over three
// built-in workers and waits for every one to end.
func runStreams(b *testing.B, n int, fair admit.FairConfig) loadResult {
	b.Helper()
	var engines []*stampedEngine
	var ws []*worker.Worker
	for i, r := range []sched.Role{sched.RolePrefill, sched.RoleDecode, sched.RoleStream} {
		m, err := worker.DevModel(testModelConfig, 1)
		if err != nil {
			b.Fatal(err)
		}
		eng, err := lm.NewEngine(m, lm.EngineConfig{MaxBatch: 16, Threads: 1})
		if err != nil {
			b.Fatal(err)
		}
		se := &stampedEngine{Builtin: worker.NewBuiltin(eng), spans: map[*llm.Request]time.Duration{}}
		w, err := worker.New(worker.Config{Name: fmt.Sprint("w", i), Role: r, Batch: &batch.Config{}}, se)
		if err != nil {
			b.Fatal(err)
		}
		engines, ws = append(engines, se), append(ws, w)
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
			for _, e := range engines {
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
// streams through the coordinator onto three built-in workers and reports
// the coordinator's added time to first token (client TTFT minus the
// engine's own TTFT: admission, fair queueing, placement, batching queue
// and forwarding) at p50 and p95, the peak heap, and how many requests
// were refused. Slots is set to the burst size so the added latency is the
// coordinator's work, not a wait for capacity; "overload" is the cloud's
// defaults with a 256-request queue, where the excess must be refused
// (503 overloaded), not left to time out. Run:
//
//	go test -run '^$' -bench BenchmarkCoordinatorStreams -benchtime 3x ./cloud/coordinator/
func BenchmarkCoordinatorStreams(b *testing.B) {
	levels := []struct {
		name    string
		streams int
		fair    admit.FairConfig
	}{
		{"streams=100", 100, admit.FairConfig{Slots: 100}},
		{"streams=300", 300, admit.FairConfig{Slots: 300}},
		{"streams=1000", 1000, admit.FairConfig{Slots: 1000}},
		{"overload/streams=1000/queue=256", 1000, admit.FairConfig{MaxQueue: 256}},
	}
	for _, l := range levels {
		b.Run(l.name, func(b *testing.B) {
			var added []time.Duration
			var ok, shed, other int
			var peak uint64
			for b.Loop() {
				r := runStreams(b, l.streams, l.fair)
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
