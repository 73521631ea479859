package coordinator

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/admit"
	"github.com/phaseless/phaseless/cloud/place"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/semantic"
	"github.com/phaseless/phaseless/cloud/sim"
	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/llm"
)

// replayWorld is a world that shows the coordinator what a simulator's
// decision saw: its workers' signals and its breaker.
type replayWorld struct {
	view place.View
}

func (w *replayWorld) snapshot(dst *sched.Snapshot, _ []uint64) {
	dst.Workers = append(dst.Workers[:0], w.view.Snap.Workers...)
	dst.Now = w.view.Snap.Now
}

func (w *replayWorld) breakerOpen() bool { return w.view.BreakerOpen }

// TestOnePlacementPath: the simulator decides with the coordinator's own
// code. A simulated cluster (prefill, decode and conservative H100s under
// priced-pd, behind affinity and semantic grouping) runs a stream of
// conversations through a worker outage, so its decisions take every path:
// the policy, semantic groups, FIFO while the breaker is open, fallbacks to
// the conservative pool. The same stream (each request with what its
// decision saw of the workers) then goes through a Coordinator built the
// same way, and every decision is the same. A layer or a policy step added
// to one of them only would make them differ.
func TestOnePlacementPath(t *testing.T) {
	layers := place.Layers{Semantic: true}
	hints := llm.Hints{SemanticMode: semantic.ModeTopic}
	pools, _, err := sim.ParseCluster("2xh100:prefill,2xh100:decode,1xh100:conservative")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := sim.LookupModel("llama3.1-8b")
	var placed []sim.Placement
	cluster, err := sim.New(sim.Config{
		Pools: pools, Model: m, Scheduler: sched.NamePricedPD, Layers: layers, Hints: hints,
		SLOTTFT: 2 * time.Second, SLOTPOT: 100 * time.Millisecond, ProbeInterval: 5 * time.Second,
		Breaker: admit.BreakerConfig{Window: 5 * time.Second, MinRequests: 20, OpenFor: 5 * time.Second},
		Outages: []sim.Outage{{Worker: "h100-1", From: 10100 * time.Millisecond, To: 20 * time.Second}},
		Placed:  func(p sim.Placement) { placed = append(placed, p) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Run(t.Context(), conversations(600)); err != nil {
		t.Fatal(err)
	}

	var ws []*worker.Worker
	for i, p := range pools {
		for range p.Count {
			w, _ := builtinWorker(t, fmt.Sprint("w", len(ws)), pools[i].Role)
			ws = append(ws, w)
		}
	}
	c, _ := newCoordinatorConfig(t, &clock{t: time.Unix(1e9, 0)}, Config{
		Scheduler: sched.NamePricedPD, SLATTFT: 2 * time.Second, SLAITL: 100 * time.Millisecond,
		Cache: CacheConfig{Layers: layers}}, ws...)
	world := &replayWorld{}
	c.world = world
	paths := map[place.Path]int{}
	snap := &sched.Snapshot{}
	for k, p := range placed {
		world.view = p.View
		req := &llm.Request{Model: "auto", Tenant: p.Place.Tenant, MaxTokens: p.Place.MaxOutput, Messages: p.Place.Messages, Hints: p.Place.Hints}
		ms := c.measure(req)
		ms.sig = *p.Place.Sig // the simulator's lengths and hashes: it has no text to measure
		placeRequest(req, &ms)
		var d place.Decision
		if p.Failed < 0 {
			d, err = c.decide(&ms, snap)
		} else {
			d, err = c.fallback(&ms, snap, p.Failed)
		}
		if (err != nil) != (p.Err != nil) || d != p.Decision {
			t.Fatalf("decision %d (request %d): coordinator %+v (%v), simulator %+v (%v)", k, p.Request, d, err, p.Decision, p.Err)
		}
		paths[d.Path]++
	}
	t.Logf("%d decisions, by path %v", len(placed), paths)
	for _, want := range []place.Path{place.PathPolicy, place.PathGroup, place.PathBreaker, place.PathFallback} {
		if paths[want] == 0 {
			t.Errorf("no %s decision: the stream does not cover every path (%v)", want, paths)
		}
	}
	if !slices.ContainsFunc(placed, func(p sim.Placement) bool { return p.Decision.Split }) {
		t.Error("no split decision: priced-pd's disaggregation was not exercised")
	}
}

// conversations are n requests of 40 conversations in four tenants, in
// bursts of three turns 50 ms apart that share a conversation's blocks
// (what semantic grouping joins), each conversation behind one of five
// system prompts, its turns growing.
func conversations(n int) []sim.Request {
	rng := rand.New(rand.NewPCG(7, 32))
	reqs := make([]sim.Request, n)
	for i := range reqs {
		burst := i / 3
		conv, depth := burst%40, burst/40
		blocks := []int{1000 + conv%5}
		for d := range depth + 2 {
			blocks = append(blocks, conv*100+d)
		}
		reqs[i] = sim.Request{At: time.Duration(i) * 50 * time.Millisecond, Input: len(blocks)*512 + rng.IntN(400),
			Output: 20 + rng.IntN(180), Blocks: blocks, Tenant: fmt.Sprint("t", conv%4)}
	}
	return reqs
}
