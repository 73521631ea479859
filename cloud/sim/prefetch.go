package sim

import (
	"github.com/phaseless/phaseless/cloud/place"
	"github.com/phaseless/phaseless/llm"
)

// Predictive prefetch in the simulated cluster is the coordinator's own
// (Config.Layers.Prefetch, phaseless-cloud --cache-layers prefetch): after
// each request that succeeded, the Placer's Learn clusters it with its
// tenant's earlier requests by its fingerprint (of its made-up
// conversation, place.go) and predicts the tenant's next clusters; each
// predicted cluster's shared prefix (its prefix and hash_id turns) is warmed on the
// worker the Placer's WarmTarget picks, unless a worker holds it already:
// prefilled there with one sampled token thrown away, and pinned for the
// shortest cache lifetime (5 minutes), one warm-up at a time, as the
// coordinator's warm-ups run. A warm-up enters the engine directly, as the
// coordinator's bypasses the fair queue.

// learn is the coordinator's completeResponse for prefetch.
func (c *Cluster) learn(f *flight) {
	if !c.cfg.Layers.Prefetch {
		return
	}
	w := c.placer.Learn(c.clk.Now(), &f.req)
	for _, p := range w.Predictions {
		c.warm(f.tenant, p.Prefix, w.MaxLoad)
	}
}

// warm runs prefix's blocks through the worker the Placer picks.
func (c *Cluster) warm(tenant string, prefix []llm.Message, maxLoad float64) {
	bs := c.dep.Engine.BlockSize
	r := turnPrefix(prefix)
	want := max(len(r.Blocks)*max(1, 512/bs), r.PrefixLen/bs)
	if want == 0 {
		return
	}
	r.Input = want * bs
	hashes := blockHashes(0, &r, bs)
	i, res := c.placer.WarmTarget(c.view(hashes).Snap, want, maxLoad)
	if res != place.WarmOn || c.warming {
		return // cached, busy, or another warm-up runs
	}
	w := c.workers[i]
	f := &flight{warm: true, w: w}
	f.seq = Seq{Prompt: want*bs + 1, MaxOutput: 1, Hashes: hashes, User: f,
		PinBlocks: want, PinTTL: llm.MinCacheTTL, Tenant: tenant}
	if err := w.eng.Add(&f.seq); err != nil {
		return // longer than the model: so would its request be
	}
	c.warming = true
	c.warmups++
	c.kick(w)
}

// warmed ends a warm-up.
func (c *Cluster) warmed(*flight) {
	c.warming = false
}
