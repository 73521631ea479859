package sim

import (
	"context"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/place"
	"github.com/phaseless/phaseless/cloud/sched"
)

func mustDeployment(t testing.TB, gpu, model string, tp int) *Deployment {
	t.Helper()
	g, err := LookupGPU(gpu)
	if err != nil {
		t.Fatal(err)
	}
	m, err := LookupModel(model)
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDeployment(g, m, tp, EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// runOne runs a single request alone on an engine and returns each step's
// duration and the tokens it computed.
func runOne(t *testing.T, d *Deployment, prompt, output int) (steps []time.Duration, tokens []int) {
	t.Helper()
	e := NewEngine(d)
	s := &Seq{Prompt: prompt, MaxOutput: output}
	if err := e.Add(s); err != nil {
		t.Fatal(err)
	}
	for {
		dt, ok := e.Plan()
		if !ok {
			break
		}
		tokens = append(tokens, s.step)
		steps = append(steps, dt)
		e.Commit(func(*Seq, bool) {})
	}
	if s.Generated() != output {
		t.Fatalf("generated %d of %d", s.Generated(), output)
	}
	return steps, tokens
}

// TestPhysics: a decode step is never faster than streaming the weights
// from HBM, a prefill never faster than its FLOPs at peak, and for one
// request both are within 2× of those bounds (the tensor-parallel
// all-reduces apart: they are communication, which TestCalibration checks
// against vLLM's measured all-reduce).
func TestPhysics(t *testing.T) {
	for _, c := range []struct {
		gpu, model string
		tp         int
	}{{"h100", "llama3.1-8b", 1}, {"a100", "llama3.1-8b", 1}, {"l4", "llama3.1-8b", 1}, {"h100", "qwen2.5-7b", 1},
		{"h100", "llama3.1-70b", 4}, {"h100", "llama3.1-70b", 8}, {"a100", "llama3.1-70b", 8}, {"t4", "qwen2.5-7b", 0}} {
		t.Run(c.gpu+"/"+c.model, func(t *testing.T) {
			if c.gpu == "t4" {
				// 15.2 GB of Qwen2.5-7B weights do not fit in a T4's 16 GB at 0.9.
				g, _ := LookupGPU("t4")
				m, _ := LookupModel("qwen2.5-7b")
				if _, err := NewDeployment(g, m, 1, EngineConfig{}); err == nil {
					t.Fatal("qwen2.5-7b fits on one T4?")
				}
				return
			}
			d := mustDeployment(t, c.gpu, c.model, c.tp)
			prompt := min(2048, d.Engine.MaxBatchedTokens)
			steps, tokens := runOne(t, d, prompt, 32)
			weights := d.Model.WeightBytes() / float64(d.TP) / d.GPU.HBMBytesPerSec
			flops := 2 * d.Model.Params * float64(prompt) / float64(d.TP) / d.GPU.PeakFLOPS
			comm := func(tokens int) float64 {
				if d.TP == 1 {
					return 0
				}
				return 2 * float64(d.Model.Layers) * d.allReduce(float64(tokens*d.Model.Hidden)*2)
			}
			pre := steps[0].Seconds() - comm(prompt)
			if tokens[0] != prompt {
				t.Fatalf("first step computed %d tokens, want the whole %d-token prompt", tokens[0], prompt)
			}
			if pre < flops || pre > 2*flops {
				t.Errorf("prefill of %d tokens: %.2f ms, bound %.2f ms (want within 1–2×)", prompt, pre*1e3, flops*1e3)
			}
			for i, s := range steps[1:] {
				dec := s.Seconds() - comm(1)
				if dec < weights || dec > 2*weights {
					t.Errorf("decode step %d: %.3f ms, weights/HBM %.3f ms (want within 1–2×)", i, dec*1e3, weights*1e3)
				}
			}
		})
	}
}

// TestKVCapacity checks the KV sizing against what vLLM reports for
// Llama-3.1-8B on an H100 at 0.9 (about 450k tokens) within a wide margin,
// and that over-context requests are refused.
func TestKVCapacity(t *testing.T) {
	d := mustDeployment(t, "h100", "llama3.1-8b", 1)
	if tok := d.KVBlocks * d.Engine.BlockSize; tok < 350_000 || tok > 480_000 {
		t.Fatalf("KV capacity %d tokens", tok)
	}
	if d.Model.KVBytesPerToken() != 131072 {
		t.Fatalf("KV bytes per token %v, want 128 KiB", d.Model.KVBytesPerToken())
	}
	e := NewEngine(d)
	if err := e.Add(&Seq{Prompt: 131000, MaxOutput: 100}); err != ErrTooLong {
		t.Fatalf("over-context request: %v", err)
	}
	l4 := mustDeployment(t, "l4", "llama3.1-8b", 1)
	if l4.MaxModelLen >= l4.Model.ContextLen || l4.MaxModelLen < 8192 {
		t.Fatalf("L4 max model len %d", l4.MaxModelLen)
	}
}

// workload is a seeded synthetic trace with shared prefixes.
func workload(seed uint64, n int, rate float64, maxIn, maxOut int) []Request {
	rng := rand.New(rand.NewPCG(seed, 7))
	var at time.Duration
	reqs := make([]Request, n)
	for i := range reqs {
		at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		in := 16 + rng.IntN(maxIn)
		r := Request{At: at, Input: in, Output: 1 + rng.IntN(maxOut)}
		if rng.IntN(2) == 0 { // half share one of 4 system prompts
			r.Blocks = []int{rng.IntN(4), 100 + i}
		}
		reqs[i] = r
	}
	return reqs
}

func runPolicy(t testing.TB, cluster string, policy string, reqs []Request, ec EngineConfig) *Result {
	t.Helper()
	pools, cycle, err := ParseCluster(cluster)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := LookupModel("llama3.1-8b")
	p, err := sched.ByName(policy, sched.RulesConfig{})
	if err != nil {
		t.Fatal(err)
	}
	// The policy alone: the coordinator's layers (affinity, by default)
	// would make the policies alike where these tests tell them apart.
	return runConfig(t, Config{Pools: pools, CycleRoles: cycle, Model: m, Policy: p, Engine: ec, Layers: place.Layers{NoAffinity: true}}, reqs)
}

// runConfig runs reqs through a cluster built from cfg, failing t on error.
func runConfig(t testing.TB, cfg Config, reqs []Request) *Result {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Run(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestConservation: every request finishes exactly once, each generates its
// tokens, and no engine uses more KV blocks than it has, even with a cache
// small enough to force preemptions.
func TestConservation(t *testing.T) {
	reqs := workload(3, 400, 40, 3000, 300)
	reqs = append(reqs, Request{At: reqs[len(reqs)-1].At, Input: 200_000, Output: 10}) // over the context
	for _, ec := range []EngineConfig{{}, {MemUtil: 0.25}} {
		for _, p := range sched.Names() {
			res := runPolicy(t, "2xh100", p, reqs, ec)
			tooLong, pre := 0, uint64(0)
			for i, o := range res.Outcomes {
				if o.Finished != 1 {
					t.Fatalf("%s: request %d finished %d times", p, i, o.Finished)
				}
				switch o.Status {
				case StatusOK:
					if o.Output != reqs[i].Output {
						t.Fatalf("%s: request %d generated %d of %d", p, i, o.Output, reqs[i].Output)
					}
				case StatusTooLong:
					tooLong++
				default:
					t.Fatalf("%s: request %d refused (%d)", p, i, o.Status)
				}
			}
			for _, w := range res.Workers {
				pre += w.Stat.Preemptions
			}
			if tooLong != 1 {
				t.Fatalf("%s: %d over-context rejections, want 1", p, tooLong)
			}
			if res.MaxKVUsed > res.KVBlocks {
				t.Fatalf("%s: %d KV blocks used of %d", p, res.MaxKVUsed, res.KVBlocks)
			}
			if ec.MemUtil != 0 && pre == 0 {
				t.Fatalf("%s: a small cache never preempted", p)
			}
		}
	}
}

// TestEngineInvariants checks the block tables against the cache after
// every step of a preempting, prefix-sharing run.
func TestEngineInvariants(t *testing.T) {
	d := mustDeployment(t, "l4", "llama3.1-8b", 1)
	d.KVBlocks = 400 // 6,400 tokens: preemption certain
	d.MaxModelLen = 6400
	e := NewEngine(d)
	e.kv = newKVCache(d.KVBlocks)
	rng := rand.New(rand.NewPCG(1, 2))
	done := 0
	for i := range 60 {
		r := Request{Input: 100 + rng.IntN(1500), Output: 1 + rng.IntN(200), Blocks: []int{rng.IntN(3)}}
		if err := e.Add(&Seq{Prompt: r.Input, MaxOutput: r.Output, Hashes: blockHashes(i, &r, 16)}); err != nil {
			t.Fatal(err)
		}
	}
	for steps := 0; ; steps++ {
		if _, ok := e.Plan(); !ok {
			break
		}
		e.Commit(func(_ *Seq, fin bool) {
			if fin {
				done++
			}
		})
		if err := e.check(); err != nil {
			t.Fatalf("step %d: %v", steps, err)
		}
	}
	if done != 60 || e.Stats().Preemptions == 0 || e.Stats().CachedTokens == 0 {
		t.Fatalf("done %d, preemptions %d, cached %d", done, e.Stats().Preemptions, e.Stats().CachedTokens)
	}
}

// TestDeterminism: the same inputs give the same run.
func TestDeterminism(t *testing.T) {
	reqs := workload(5, 300, 30, 2000, 200)
	for _, p := range sched.Names() {
		a := runPolicy(t, "4xh100,4xl4", p, reqs, EngineConfig{})
		b := runPolicy(t, "4xh100,4xl4", p, reqs, EngineConfig{})
		if !reflect.DeepEqual(a.Outcomes, b.Outcomes) || a.Events != b.Events {
			t.Fatalf("%s: two runs differ", p)
		}
	}
}

// TestPoliciesDiffer: on a prefix-heavy load the prefix-aware policies get
// more cache hits than round-robin, so the instrument can tell them apart.
func TestPoliciesDiffer(t *testing.T) {
	reqs := workload(9, 600, 60, 4000, 50)
	hit := map[string]float64{}
	for _, p := range sched.Names() {
		s := Summarize(runPolicy(t, "8xh100", p, reqs, EngineConfig{}), 1, 2*time.Second, 100*time.Millisecond, nil)
		hit[p] = s.PrefixHit
		t.Logf("%-16s goodput %.2f attain %.3f ttft p50 %v p99 %v tpot p50 %v hit %.3f util %.3f",
			p, s.GoodputRPS, s.SLOAttainment, s.TTFTP50, s.TTFTP99, s.TPOTP50, s.PrefixHit, s.Pools[0].Utilization)
	}
	if hit[sched.NameLLMD] <= hit[sched.NameRoundRobin] || hit[sched.NameScheduler] <= hit[sched.NameRoundRobin] {
		t.Fatalf("prefix hits %v", hit)
	}
	// Behind the coordinator's default layers, affinity sends round-robin's
	// follow-ups to their prefix too: the layer runs in the simulator.
	pools, cycle, _ := ParseCluster("8xh100")
	m, _ := LookupModel("llama3.1-8b")
	rr, _ := sched.ByName(sched.NameRoundRobin, sched.RulesConfig{})
	res := runConfig(t, Config{Pools: pools, CycleRoles: cycle, Model: m, Policy: rr}, reqs)
	if s := Summarize(res, 1, 2*time.Second, 100*time.Millisecond, nil); s.PrefixHit <= hit[sched.NameRoundRobin] {
		t.Fatalf("round-robin behind affinity: prefix hit %.3f, alone %.3f", s.PrefixHit, hit[sched.NameRoundRobin])
	}
}

func TestParseCluster(t *testing.T) {
	p, cycle, err := ParseCluster("4xh100,8xl4")
	if err != nil || cycle || len(p) != 2 || p[0].Role != sched.RolePrefill || p[1].Role != sched.RoleDecode || p[1].Count != 8 {
		t.Fatalf("%+v %v %v", p, cycle, err)
	}
	if p, cycle, err = ParseCluster("8xh100"); err != nil || !cycle || p[0].Count != 8 {
		t.Fatalf("%+v %v %v", p, cycle, err)
	}
	if p, _, err = ParseCluster("2xa100:stream,2xt4:conservative"); err != nil || p[0].Role != sched.RoleStream || p[1].Role != sched.RoleConservative {
		t.Fatalf("%+v %v", p, err)
	}
	for _, bad := range []string{"", "h100", "0xh100", "8xv100", "8xh100:gpu", "2xh100:stream,2xl4"} {
		if _, _, err := ParseCluster(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
