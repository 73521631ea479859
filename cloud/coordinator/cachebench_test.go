package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/admit"
	"github.com/phaseless/phaseless/cloud/batch"
	"github.com/phaseless/phaseless/cloud/place"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/cloudmodel"
	"github.com/phaseless/phaseless/models/lm"
)

// BenchmarkCacheLayersLive measures the prompt-caching layers live, on
// built-in engines serving the shipped cloud model: multi-turn
// conversations of CLINC150 utterances (clinc/oos-eval, CC BY 3.0;
// /work/shared/data) behind one short system prompt per CLINC domain, each
// domain its own tenant. Each configuration is a sub-benchmark reporting
// the prefix-hit share (hit-%) and the TTFT p50/p99 (p50-ms, p99-ms) of its
// last run. About a minute of CPU per configuration:
//
//	go test -run '^$' -bench CacheLayersLive -benchtime 1x ./cloud/coordinator
//
// The engine rows give every engine a host KV tier of 4× its blocks
// (`phaseless-cloud --host-kv 4`) and the cache-aware admission order at
// 2,000 tokens/s (`--aging-rate 2000`, about this machine's prefill rate
// for the shipped cloud model), alone and together, under Rules placement.
// The rows under many-open/ are the same workload with each client
// holding eight conversations open instead of two: 48 open conversations
// need about three times the three engines' KV, so what the engines keep
// decides the hits, as with many users of one deployment.
func BenchmarkCacheLayersLive(b *testing.B) {
	convs := clincConversations(b, 96)
	rules := CacheConfig{Layers: place.Layers{NoAffinity: true}}
	host, aging := lm.EngineConfig{HostKV: 4}, lm.EngineConfig{AgingRate: 2000}
	both := lm.EngineConfig{HostKV: 4, AgingRate: 2000}
	for _, v := range []cacheRun{
		{"rules", rules, false, lm.EngineConfig{}, 2},
		{"pin", rules, true, lm.EngineConfig{}, 2},
		{"pin+affinity", CacheConfig{}, true, lm.EngineConfig{}, 2},
		{"pin+affinity+prefetch", CacheConfig{Layers: place.Layers{Prefetch: true}}, true, lm.EngineConfig{}, 2},
		{"pin+affinity+prefetch+semantic", CacheConfig{Layers: place.Layers{Prefetch: true, Semantic: true}}, true, lm.EngineConfig{}, 2},
		{"affinity", CacheConfig{}, false, lm.EngineConfig{}, 2},
		{"host-kv", rules, false, host, 2},
		{"aging", rules, false, aging, 2},
		{"host-kv+aging", rules, false, both, 2},
		{"many-open/rules", rules, false, lm.EngineConfig{}, 8},
		{"many-open/pin", rules, true, lm.EngineConfig{}, 8},
		{"many-open/host-kv", rules, false, host, 8},
		{"many-open/aging", rules, false, aging, 8},
		{"many-open/host-kv+aging", rules, false, both, 8},
	} {
		b.Run(v.name, func(b *testing.B) {
			var hit, p50, p99 float64
			for b.Loop() {
				hit, p50, p99 = runCacheWorkload(b, v, convs)
			}
			b.ReportMetric(100*hit, "hit-%")
			b.ReportMetric(p50, "p50-ms")
			b.ReportMetric(p99, "p99-ms")
		})
	}
}

// cacheRun is one configuration of the live cache workload: the
// coordinator's caching layers, whether the system prompt is pinned, the
// engines' host tier and admission order, and how many conversations each
// client holds open.
type cacheRun struct {
	name string
	cc   CacheConfig
	pin  bool
	eng  lm.EngineConfig
	open int
}

// clincConversations makes n two-turn conversations, domains in turn,
// from CLINC150 test utterances of each domain's intents.
func clincConversations(t testing.TB, n int) [][]llm.Message {
	dir := "/work/shared/data/routing/"
	var small struct {
		Test [][2]string `json:"test"`
	}
	var domains map[string][]string
	for f, v := range map[string]any{"clinc150-small.json": &small, "clinc150-domains.json": &domains} {
		b, err := os.ReadFile(dir + f)
		if err != nil {
			t.Skipf("CLINC150 data: %v", err)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatal(err)
		}
	}
	// Short system prompts: the cloud model's context is 256 bytes.
	systems := map[string]string{
		"banking":          "You are the bank assistant. Be brief and exact about accounts.",
		"travel":           "You are the travel desk. Be brief about flights, hotels, visas.",
		"auto_and_commute": "You are the car assistant. Be brief about the car and the road.",
		"utility":          "You are a helpful utility bot. Be brief: time, weather, timers.",
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range systems {
			if !yield(k) {
				return
			}
		}
	})
	byDomain := map[string][]string{}
	for _, d := range names {
		for _, ex := range small.Test {
			if slices.Contains(domains[d], ex[1]) && len(ex[0]) <= 60 {
				byDomain[d] = append(byDomain[d], ex[0])
			}
		}
	}
	out := make([][]llm.Message, n)
	for i := range out {
		d := names[i%len(names)]
		u := byDomain[d]
		k := i / len(names)
		out[i] = []llm.Message{
			{Role: "system", Content: systems[d]},
			{Role: "user", Content: u[(2*k)%len(u)]},
			{Role: "user", Content: u[(2*k+1)%len(u)]}, // the follow-up; the reply goes before it
		}
	}
	return out
}

// runCacheWorkload plays the conversations on three fresh built-in
// workers (their engines with v.eng's host tier and admission order), six
// clients at a time, each holding v.open conversations open and running
// all their first turns before the follow-ups (so a follow-up comes after
// other traffic), and returns the prefix-hit share and TTFT p50/p99 in ms.
func runCacheWorkload(t testing.TB, v cacheRun, convs [][]llm.Message) (hit, p50, p99 float64) {
	t.Helper()
	m, err := cloudmodel.Open()
	if err != nil {
		t.Fatal(err)
	}
	const blockBytes = 2 * 4 * 16 * 3 * 32 * 4 // layers × block × KV heads × head dim × f32, keys and values
	var ws []*worker.Worker
	for i := range 3 {
		// Three contexts of KV each: the four domains' prompts and the
		// open conversations do not all fit, so what stays cached matters.
		eng, err := lm.NewEngine(m, lm.EngineConfig{MaxBatch: 4, Threads: 1, KVBudgetBytes: 48 * blockBytes, HostKV: v.eng.HostKV, AgingRate: v.eng.AgingRate})
		if err != nil {
			t.Fatal(err)
		}
		w, err := worker.New(worker.Config{Name: fmt.Sprintf("w%d", i), Role: sched.RoleStream, Batch: &batch.Config{}}, worker.NewBuiltin(eng))
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	set, err := worker.NewSet(context.Background(), 100*time.Millisecond, ws...)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	a, _ := admit.New(admit.Config{})
	defer a.Close()
	c, err := New(Config{Workers: set, Admitter: a, Tokenizer: m.Tokenizer(), Metrics: metrics.NewRegistry(), Cache: v.cc})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	var mu sync.Mutex
	var ttfts []float64
	var hitTok, promptTok int
	turn := func(msgs []llm.Message) string {
		req := &llm.Request{Model: "auto", MaxTokens: 4, Seed: 1, Tenant: "app-" + msgs[0].Content[:12], Messages: msgs}
		if v.pin {
			req.CacheBreakpoints = []llm.CacheBreakpoint{{Message: 0, Chars: len(msgs[0].Content), TTL: 5 * time.Minute}}
		}
		start := time.Now()
		var first time.Duration
		var text strings.Builder
		fin, err := c.Generate(context.Background(), req, func(tk llm.Token) error {
			if tk.Meta == nil && first == 0 {
				first = time.Since(start)
			}
			text.WriteString(tk.Text)
			return nil
		})
		if err != nil {
			t.Errorf("generate: %v", err)
			return ""
		}
		mu.Lock()
		ttfts = append(ttfts, float64(first.Microseconds())/1e3)
		hitTok += fin.PrefixHitTokens
		promptTok += fin.PromptTokens
		mu.Unlock()
		return text.String()
	}
	var wg sync.WaitGroup
	next := make(chan int)
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				var open [][]llm.Message
				for range v.open {
					i, ok := <-next
					if !ok {
						break
					}
					open = append(open, convs[i])
				}
				if len(open) == 0 {
					return
				}
				replies := make([]string, len(open))
				for k, cv := range open { // first turns
					replies[k] = turn(cv[:2])
				}
				for k, cv := range open { // follow-ups, after the others' first turns
					turn([]llm.Message{cv[0], cv[1], {Role: "assistant", Content: replies[k]}, cv[2]})
				}
			}
		}()
	}
	for i := range convs {
		next <- i
	}
	close(next)
	wg.Wait()
	slices.Sort(ttfts)
	q := func(p float64) float64 { return ttfts[min(len(ttfts)-1, int(p*float64(len(ttfts))))] }
	return float64(hitTok) / float64(promptTok), q(0.5), q(0.99)
}
