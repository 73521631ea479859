package sim

import (
	"testing"
	"time"
)

// knobRun runs a workload spec on a cluster of one GPU kind under
// round-robin with cfg's engine and cache settings and summarises it.
func knobRun(t *testing.T, spec, cluster string, cfg Config) Summary {
	t.Helper()
	w, err := ParseWorkload(spec)
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := w.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Pools, _, err = ParseCluster(cluster); err != nil {
		t.Fatal(err)
	}
	if cfg.Model.Name == "" {
		cfg.Model, _ = LookupModel("llama3.1-8b")
	}
	cfg.Scheduler = "round-robin"
	return Summarize(runConfig(t, cfg, reqs), 1, 2*time.Second, 100*time.Millisecond, nil)
}

// TestKnobs: every engine knob phaselessctl sim takes moves the model the
// way the real engine moves: each case runs the same workload with the
// knob at two settings and requires the metric to move in the named
// direction.
func TestKnobs(t *testing.T) {
	const burst = "rate=200,requests=300,prompt=2000,output=64,seed=2"    // a queue forms
	const shared = "rate=20,requests=200,prompt=547,prefix=120,output=16" // one system prompt
	const long = "rate=0.5,requests=4,prompt=16000,output=4"              // long prompts, one at a time
	eng := func(e EngineConfig) Config { return Config{Engine: e} }
	ttft := func(s Summary) float64 { return float64(s.TTFT.Mean) }
	for _, k := range []struct {
		name           string
		spec, cluster  string
		low, high      Config
		metric         func(Summary) float64
		higherIsHigher bool // the metric is larger at high than at low
	}{
		// A smaller step budget splits a long prompt into more chunks, each
		// paying the step overhead and the weights' read: slower TTFT.
		{"max-num-batched-tokens", long, "1xh100", eng(EngineConfig{MaxBatchedTokens: 512}), eng(EngineConfig{MaxBatchedTokens: 8192}), ttft, false},
		// Fewer sequences at once queue the burst: slower TTFT, faster ITL.
		{"max-num-seqs/ttft", burst, "1xh100", eng(EngineConfig{MaxNumSeqs: 8}), eng(EngineConfig{MaxNumSeqs: 256}), ttft, false},
		{"max-num-seqs/itl", burst, "1xh100", eng(EngineConfig{MaxNumSeqs: 8}), eng(EngineConfig{MaxNumSeqs: 256}), func(s Summary) float64 { return float64(s.ITL.Mean) }, true},
		// Less memory for KV: the burst's sequences are preempted more.
		{"gpu-memory-utilization", burst, "1xl4", eng(EngineConfig{MemUtil: 0.8}), eng(EngineConfig{MemUtil: 0.95}), func(s Summary) float64 { return float64(s.Preemptions) }, false},
		// Larger blocks cache less of a 120-token prefix (112 of it in
		// 16-token blocks, 64 in 64-token ones).
		{"block-size", shared, "1xh100", eng(EngineConfig{BlockSize: 16}), eng(EngineConfig{BlockSize: 64}), func(s Summary) float64 { return s.PrefixHit }, false},
		// Prefix caching off: nothing hits.
		{"prefix-caching", shared, "1xh100", eng(EngineConfig{NoPrefixCaching: true}), eng(EngineConfig{}), func(s Summary) float64 { return s.PrefixHit }, true},
		// Host work per sampled token: nothing at one request, the burst's
		// large batches wait for the host: slower ITL.
		{"token-host-cost", burst, "1xh100", eng(EngineConfig{}), eng(EngineConfig{TokenHostCost: 700 * time.Microsecond}), func(s Summary) float64 { return float64(s.ITL.Mean) }, true},
		// Async scheduling: a request that arrives while the engine runs
		// waits one step more for its prefill: slower TTFT under load.
		{"async-scheduling", "rate=100,requests=200,prompt=200,output=64,seed=3", "1xh100", eng(EngineConfig{}), eng(EngineConfig{AsyncScheduling: true}), ttft, true},
		// Two GPUs per worker: half the weights read per GPU, faster ITL.
		{"tp", "rate=2,requests=20,prompt=500,output=64", "2xh100", Config{TP: 1}, Config{TP: 2}, func(s Summary) float64 { return float64(s.ITL.Mean) }, false},
	} {
		t.Run(k.name, func(t *testing.T) {
			lo, hi := k.metric(knobRun(t, k.spec, k.cluster, k.low)), k.metric(knobRun(t, k.spec, k.cluster, k.high))
			if lo == hi || (hi > lo) != k.higherIsHigher {
				t.Fatalf("%s: %g at the low setting, %g at the high one", k.name, lo, hi)
			}
		})
	}
}

// TestPCIeBandwidth: the host tier's reload of the same blocks takes
// longer over a slower link, in proportion.
func TestPCIeBandwidth(t *testing.T) {
	g, _ := LookupGPU("h100")
	m, _ := LookupModel("llama3.1-8b")
	cost := func(pcie float64) float64 {
		d, err := NewDeployment(g, m, 1, EngineConfig{PCIeBytesPerSec: pcie})
		if err != nil {
			t.Fatal(err)
		}
		return d.Cost(StepShape{Tokens: 16, Sampled: 1, HostLoad: 4096}).Host
	}
	def, slow := cost(0), cost(16e9)
	if def <= 0 || slow/def < 3.9 || slow/def > 4.1 {
		t.Fatalf("reload %.6f s at the profile's 64 GB/s, %.6f s at 16 GB/s", def, slow)
	}
}

// TestGPUProfiles: H200 holds more KV than H100 and decodes faster (more
// bandwidth, the same FLOPS); L40S holds less than either and decodes
// slower, as their datasheets' memory and bandwidth say.
func TestGPUProfiles(t *testing.T) {
	m, _ := LookupModel("llama3.1-8b")
	dep := func(name string) (*Deployment, time.Duration) {
		g, err := LookupGPU(name)
		if err != nil {
			t.Fatal(err)
		}
		d, err := NewDeployment(g, m, 1, EngineConfig{})
		if err != nil {
			t.Fatal(err)
		}
		return d, d.StepTime(StepShape{Tokens: 1, Sampled: 1, AttnPairs: 1024, KVRead: 1024})
	}
	h100, t100 := dep("h100")
	h200, t200 := dep("h200")
	l40s, tl40s := dep("l40s")
	if !(h200.KVBlocks > h100.KVBlocks && h100.KVBlocks > l40s.KVBlocks) || !(t200 < t100 && t100 < tl40s) {
		t.Fatalf("KV blocks h200 %d h100 %d l40s %d; decode step %v %v %v", h200.KVBlocks, h100.KVBlocks, l40s.KVBlocks, t200, t100, tl40s)
	}
}
