package sim_test

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/replay"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/sim"
)

// mooncakeTrace is the whole Mooncake conversation trace the bounds are
// measured on: PHASELESS_SIM_TRACE, else the shared data's copy; the
// benchmark skips without it.
func mooncakeTrace(b *testing.B) []replay.TraceRequest {
	path := os.Getenv("PHASELESS_SIM_TRACE")
	if path == "" {
		path = "/work/shared/data/traces/mooncake-conversation.jsonl"
	}
	if _, err := os.Stat(path); err != nil {
		b.Skipf("no Mooncake trace (PHASELESS_SIM_TRACE): %v", err)
	}
	tr, err := replay.ReadTrace(path, "mooncake", 0)
	if err != nil {
		b.Fatal(err)
	}
	return tr
}

// BenchmarkIsolatedPrefillBound measures the floor no cache policy gets
// under on the Mooncake trace: each request's time to first token alone
// on an idle H100 (chunked prefill at the engine's step budget, the cost
// model's steps), with only the shared system block cached (system-p50-ms,
// system-p99-ms), and with every prefix any earlier request had cached, an
// unbounded cache that never evicts (unbounded-p50-ms, unbounded-p99-ms),
// over the trace's second half (docs/cloud.md's held-out slice):
//
//	go test -run '^$' -bench IsolatedPrefillBound -benchtime 1x ./cloud/sim
func BenchmarkIsolatedPrefillBound(b *testing.B) {
	tr := mooncakeTrace(b)
	var system, unbounded []time.Duration
	for b.Loop() {
		system, unbounded = isolatedPrefill(b, tr)
	}
	slices.Sort(system)
	slices.Sort(unbounded)
	q := func(d []time.Duration, p float64) float64 {
		return float64(d[int(p*float64(len(d)-1))].Microseconds()) / 1e3
	}
	for _, p := range []float64{0.5, 0.99} {
		b.ReportMetric(q(system, p), fmt.Sprintf("system-p%.0f-ms", 100*p))
		b.ReportMetric(q(unbounded, p), fmt.Sprintf("unbounded-p%.0f-ms", 100*p))
		if q(unbounded, p) > q(system, p) { // a bound that is not one: the cost model is wrong
			b.Fatalf("p%.0f: an unbounded cache made prefill slower than the system block alone", 100*p)
		}
	}
}

// isolatedPrefill is each second-half request's prefill time alone, with
// the system block cached and with an unbounded cache.
func isolatedPrefill(b *testing.B, tr []replay.TraceRequest) (system, unbounded []time.Duration) {
	pools, _, _ := sim.ParseCluster("1xh100")
	m, _ := sim.LookupModel("llama3.1-8b")
	d, err := sim.NewDeployment(pools[0].GPU, m, 0, sim.EngineConfig{})
	if err != nil {
		b.Fatal(err)
	}
	bs, budget := d.Engine.BlockSize, d.Engine.MaxBatchedTokens
	alone := func(from, prompt int) time.Duration {
		var tot time.Duration
		for c := from; c < prompt; {
			n := min(budget, prompt-c)
			sh := sim.StepShape{Tokens: n, AttnPairs: float64(n)*float64(c) + float64(n)*float64(n+1)/2, KVRead: c}
			if c+n == prompt {
				sh.Sampled = 1
			}
			tot += d.StepTime(sh)
			c += n
		}
		return tot
	}
	type node map[int]node
	root := node{}
	half := tr[len(tr)-1].At / 2
	for _, r := range tr {
		k, n := 0, root
		for _, b := range r.Blocks { // the longest prefix an earlier request had
			next, ok := n[b]
			if !ok {
				break
			}
			k, n = k+1, next
		}
		n = root
		for _, b := range r.Blocks {
			if n[b] == nil {
				n[b] = node{}
			}
			n = n[b]
		}
		if r.At < half {
			continue
		}
		hit := min(k*512, r.Input-1) / bs * bs
		system = append(system, alone(min(512, r.Input-1)/bs*bs, r.Input))
		unbounded = append(unbounded, alone(hit, r.Input))
	}
	return system, unbounded
}

// BenchmarkSlowestAreFirstTurns measures what the held-out half's slowest
// 1% (TTFT, llm-d placement, no pinning) are: how many (slowest) are first
// turns (first-turns), for which no cache holds anything, and how many have
// prompts short enough (< 30k tokens, under a second alone) that they are
// waiting rather than computing (under-30k):
//
//	go test -run '^$' -bench SlowestAreFirstTurns -benchtime 1x ./cloud/sim
func BenchmarkSlowestAreFirstTurns(b *testing.B) {
	tr := mooncakeTrace(b)
	reqs := make([]sim.Request, len(tr))
	for i, r := range tr {
		reqs[i] = sim.Request{At: r.At, Input: r.Input, Output: r.Output, Blocks: r.Blocks}
	}
	pools, cycle, _ := sim.ParseCluster("8xh100")
	m, _ := sim.LookupModel("llama3.1-8b")
	p, err := sched.New("llm-d", sched.Options{})
	if err != nil {
		b.Fatal(err)
	}
	var res *sim.Result
	for b.Loop() {
		c, err := sim.New(sim.Config{Pools: pools, CycleRoles: cycle, Model: m, Policy: p})
		if err != nil {
			b.Fatal(err)
		}
		if res, err = c.Run(b.Context(), reqs); err != nil {
			b.Fatal(err)
		}
	}
	// A request with an earlier follow-up gap pointing at it is not a
	// first turn: mark every request some earlier one is followed up by.
	gaps := sim.FollowUpGaps(reqs)
	followUp := make([]bool, len(reqs))
	for i, g := range gaps {
		if g == 0 {
			continue
		}
		for j := i + 1; j < len(reqs) && reqs[j].At <= reqs[i].At+g; j++ {
			if reqs[j].At == reqs[i].At+g && extends(reqs[j].Blocks, reqs[i].Blocks) {
				followUp[j] = true
				break
			}
		}
	}
	half := reqs[len(reqs)-1].At / 2
	var idx []int
	for i, o := range res.Outcomes {
		if o.Arrival >= half {
			idx = append(idx, i)
		}
	}
	slices.SortFunc(idx, func(a, b int) int { return int(res.Outcomes[b].TTFT - res.Outcomes[a].TTFT) })
	top := idx[:len(idx)/100]
	first, short := 0, 0
	for _, i := range top {
		if !followUp[i] {
			first++
		}
		if res.Outcomes[i].Prompt < 30000 {
			short++
		}
	}
	b.ReportMetric(float64(len(top)), "slowest")
	b.ReportMetric(float64(first), "first-turns")
	b.ReportMetric(float64(short), "under-30k")
}

// extends reports that b's full blocks (all but its last, partial one)
// begin a.
func extends(a, b []int) bool {
	n := len(b) - 1
	return n >= 2 && len(a) >= n && slices.Equal(a[:n], b[:n])
}
