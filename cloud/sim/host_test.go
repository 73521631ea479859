package sim

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/sched"
)

// drive runs e to idle on a virtual clock, adding each of adds when the
// clock reaches its time, and returns when each sequence sampled its first
// token; the cache invariants are checked after every step.
func drive(t *testing.T, e *Engine, now *time.Duration, adds []timedSeq) map[*Seq]time.Duration {
	t.Helper()
	first := map[*Seq]time.Duration{}
	for steps := 0; ; steps++ {
		for len(adds) > 0 && adds[0].at <= *now {
			if err := e.Add(adds[0].s); err != nil {
				t.Fatal(err)
			}
			adds = adds[1:]
		}
		dt, ok := e.Plan()
		if !ok {
			if len(adds) == 0 {
				return first
			}
			*now = adds[0].at
			continue
		}
		*now += dt
		e.Commit(func(s *Seq, _ bool) {
			if _, ok := first[s]; !ok {
				first[s] = *now
			}
		})
		if err := e.check(); err != nil {
			t.Fatalf("step %d: %v", steps, err)
		}
	}
}

type timedSeq struct {
	at time.Duration
	s  *Seq
}

func seqOf(id, prompt int) *Seq {
	r := Request{Input: prompt, Blocks: []int{id}}
	return &Seq{Prompt: prompt, MaxOutput: 2, Hashes: blockHashes(id, &r, 16)}
}

// TestHostTierReloads: a prompt whose blocks the GPU cache evicted is
// copied back from the host tier instead of recomputed: its cached tokens
// are the GPU's (the head LRU kept) and the host's, its first token comes sooner than by recomputing, and
// no sooner than the copy over the host link at its peak allows.
func TestHostTierReloads(t *testing.T) {
	ttft := func(host bool) (time.Duration, *Seq, *Engine) {
		d := mustDeployment(t, "h100", "llama3.1-8b", 1)
		d.KVBlocks = 600 // 9,600 tokens: the second prompt evicts the first
		var now time.Duration
		e := NewEngine(d)
		if host {
			e.EnableHostTier(2400, func() time.Duration { return now })
		}
		drive(t, e, &now, []timedSeq{{0, seqOf(1, 8000)}, {0, seqOf(2, 8000)}})
		again := seqOf(1, 8000)
		start := now
		first := drive(t, e, &now, []timedSeq{{now, again}})
		return first[again] - start, again, e
	}
	plain, s0, _ := ttft(false)
	loaded, s, e := ttft(true)
	if s.HostTokens == 0 || s.CachedTokens != s0.CachedTokens+s.HostTokens || e.Stats().HostTokens != uint64(s.HostTokens) {
		t.Fatalf("without the tier %d cached; with it %d cached, %d from the host (stats %d)", s0.CachedTokens, s.CachedTokens, s.HostTokens, e.Stats().HostTokens)
	}
	d := e.Deployment()
	copyAtPeak := time.Duration(float64(s.HostTokens) * d.kvBytesPerTokenPerGPU() / d.GPU.HostBytesPerSec * 1e9)
	if loaded >= plain || loaded < copyAtPeak {
		t.Fatalf("first token after %v reloading (the copy alone takes %v at peak), %v recomputing", loaded, copyAtPeak, plain)
	}
	if held, _, stores, loads, _ := e.HostStats(); held == 0 || stores == 0 || loads != uint64(s.HostTokens/16) {
		t.Fatalf("host tier holds %d, stored %d, loaded %d blocks", held, stores, loads)
	}
}

// TestHostTierKeepsPins: a soft-pinned block the GPU evicts keeps its pin
// in the host tier, which drops unpinned blocks before it, until the pin
// ends.
func TestHostTierKeepsPins(t *testing.T) {
	var now time.Duration
	clock := func() time.Duration { return now }
	c := newKVCache(4)
	c.enablePins(4, 4, clock, true)
	c.host = newHostTier(4, clock)
	fill := func(base uint64) {
		var bs []int32
		for i := range 4 {
			b := c.alloc()
			c.register(b, base+uint64(i))
			bs = append(bs, b)
		}
		c.release(bs)
	}
	fill(100)
	if n := c.pinPrefix("t", []uint64{100, 101}, 5*time.Minute); n != 2 {
		t.Fatalf("pinned %d", n)
	}
	for round := range 3 { // evicts the pinned blocks from the GPU too, into the host
		fill(uint64(1000 * (round + 1)))
	}
	if c.match([]uint64{100}) != 0 || c.host.match([]uint64{100, 101}) != 2 || c.host.pinned() != 2 {
		t.Fatalf("gpu %d, host %d of the pinned prefix, %d pinned there", c.match([]uint64{100}), c.host.match([]uint64{100, 101}), c.host.pinned())
	}
	if err := c.host.c.check(nil); err != nil {
		t.Fatal(err)
	}
	now = 5*time.Minute + time.Second
	fill(9000)
	fill(9100)
	if c.host.match([]uint64{100}) != 0 || c.host.pinned() != 0 {
		t.Fatal("an expired pin outlived unpinned traffic in the host tier")
	}
}

// TestEngineInvariantsWithTierAndOrder: the block tables stay consistent
// with the caches through a preempting, prefix-sharing run with the host
// tier and the cache-aware order, and every request finishes.
func TestEngineInvariantsWithTierAndOrder(t *testing.T) {
	d := mustDeployment(t, "l4", "llama3.1-8b", 1)
	d.KVBlocks = 400
	d.MaxModelLen = 6400
	var now time.Duration
	e := NewEngine(d)
	e.EnableHostTier(800, func() time.Duration { return now })
	e.EnableOrder(5000, func() time.Duration { return now }, false)
	rng := rand.New(rand.NewPCG(1, 2))
	var adds []timedSeq
	for i := range 80 {
		r := Request{Input: 100 + rng.IntN(3000), Output: 1 + rng.IntN(200), Blocks: []int{rng.IntN(3), rng.IntN(2)}}
		adds = append(adds, timedSeq{time.Duration(i) * 50 * time.Millisecond, &Seq{Prompt: r.Input, MaxOutput: r.Output, Hashes: blockHashes(i, &r, 16)}})
	}
	first := drive(t, e, &now, adds)
	if len(first) != 80 || e.Stats().Preemptions == 0 || e.Stats().HostTokens == 0 {
		t.Fatalf("%d of 80 started, preemptions %d, host tokens %d", len(first), e.Stats().Preemptions, e.Stats().HostTokens)
	}
}

// TestClusterHostTierAndOrder: a cluster run with the host tier and the
// order finishes every request once, serves some prompt tokens from the
// host tier when the GPU caches are small, and is deterministic; a pool
// whose profile has no host link refuses the tier.
func TestClusterHostTierAndOrder(t *testing.T) {
	reqs := workload(3, 300, 40, 3000, 100)
	run := func() *Result {
		pools, cycle, _ := ParseCluster("2xl4")
		m, _ := LookupModel("llama3.1-8b")
		p, _ := sched.ByName(sched.NameLeastLoaded, sched.RulesConfig{})
		c, err := New(Config{Pools: pools, CycleRoles: cycle, Model: m, Policy: p, Cache: CacheConfig{HostKV: 4, AgingRate: 10000}})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range c.workers { // small GPU caches: the host tier is used
			w.eng = NewEngine(w.eng.d)
			w.eng.kv = newKVCache(300)
			now := func() time.Duration { return c.clk.now }
			w.eng.EnableHostTier(1200, now)
			w.eng.EnableOrder(10000, now, false)
		}
		res := runChecked(t, c, reqs)
		return res
	}
	a, b := run(), run()
	host := 0
	for i, o := range a.Outcomes {
		if o.Finished != 1 || !reflect.DeepEqual(o, b.Outcomes[i]) {
			t.Fatalf("outcome %d: %+v, then %+v", i, o, b.Outcomes[i])
		}
		host += o.HostCached
	}
	if host == 0 {
		t.Fatal("no prompt token came from the host tier")
	}
	d := mustDeployment(t, "h100", "llama3.1-8b", 1)
	d.GPU.HostBytesPerSec = 0
	p, _ := sched.ByName(sched.NameLeastLoaded, sched.RulesConfig{})
	if _, err := New(Config{Pools: []Pool{{GPU: d.GPU, Count: 1, Deployment: d}}, Model: d.Model, Policy: p, Cache: CacheConfig{HostKV: 2}}); err == nil || !strings.Contains(err.Error(), "HostKV") {
		t.Fatalf("a tier without a host link: %v", err)
	}
}

// runChecked runs reqs through c and checks every engine's caches after.
func runChecked(t *testing.T, c *Cluster, reqs []Request) *Result {
	t.Helper()
	res, err := c.Run(t.Context(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range c.workers {
		if err := w.eng.check(); err != nil {
			t.Fatal(err)
		}
	}
	return res
}
