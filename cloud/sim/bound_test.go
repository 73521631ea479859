package sim_test

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/replay"
	"github.com/phaseless/phaseless/cloud/sim"
)

// TestIsolatedPrefillBound is the floor no cache policy gets under on a
// Mooncake trace: each request's time to first token alone on an idle
// H100 (chunked prefill at the engine's step budget, the cost model's
// steps), with only the shared system block cached, and with every prefix
// any earlier request had cached (an unbounded cache that never evicts),
// over the trace's second half (docs/cloud.md's held-out slice). Run with
// PHASELESS_SIM_TRACE=/work/shared/data/traces/mooncake-conversation.jsonl;
// it checks only that the unbounded cache is no slower.
func TestIsolatedPrefillBound(t *testing.T) {
	path := os.Getenv("PHASELESS_SIM_TRACE")
	if path == "" {
		t.Skip("PHASELESS_SIM_TRACE names a Mooncake trace")
	}
	tr, err := replay.ReadTrace(path, "mooncake", 0)
	if err != nil {
		t.Fatal(err)
	}
	pools, _, _ := sim.ParseCluster("1xh100")
	m, _ := sim.LookupModel("llama3.1-8b")
	d, err := sim.NewDeployment(pools[0].GPU, m, 0, sim.EngineConfig{})
	if err != nil {
		t.Fatal(err)
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
	var system, unbounded []time.Duration
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
	slices.Sort(system)
	slices.Sort(unbounded)
	q := func(d []time.Duration, p float64) time.Duration {
		return d[int(p*float64(len(d)-1))].Round(time.Millisecond)
	}
	for _, p := range []float64{0.5, 0.99} {
		t.Logf("p%.0f alone on an idle h100: %v with the system block cached, %v with an unbounded cache", 100*p, q(system, p), q(unbounded, p))
		if q(unbounded, p) > q(system, p) {
			t.Fatal("an unbounded cache made prefill slower")
		}
	}
}
