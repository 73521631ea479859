package sim

// Predictive prefetch in the simulated cluster, as cloud/coordinator's
// warm-ups do live: a prompt the follow-up model predicts a next turn for,
// which no worker holds any more, is run through an idle worker (prefill
// only, one sampled token thrown away) so its blocks are cached and pinned
// there before the follow-up comes; the prefix-aware policy then sends the
// follow-up to it. A warm-up is at most ChunkTokens of new prefill, so it
// never holds a worker for long (a longer prefix is warmed over several
// idle probes), and only a worker with nothing waiting and at most MaxLoad
// of its sequence slots busy takes one, one at a time.

// PrefetchConfig turns prefetch on.
type PrefetchConfig struct {
	On bool
	// MaxLoad is the busiest a worker may be (running sequences over its
	// slots) to take a warm-up; 0 = only a worker running nothing.
	MaxLoad float64
	// ChunkTokens bounds one warm-up's new prefill. Default the engine's
	// step budget (one step).
	ChunkTokens int
}

// prefetch runs at each probe: each predicted prompt that no worker holds
// any more, most recent first, goes to the idle worker holding the most of
// it, while idle workers last.
func (c *Cluster) prefetch() {
	pc := c.cfg.Cache.Prefetch
	if !pc.On || c.retain == nil {
		return
	}
	var idle []*simWorker
	for _, w := range c.workers {
		if !w.warming && w.eng.Waiting() == 0 && float64(w.eng.Running()) <= pc.MaxLoad*float64(w.capacity()) {
			idle = append(idle, w)
		}
	}
	held := func(h uint64) bool {
		for _, w := range c.workers {
			if _, ok := w.eng.kv.byHash[h]; ok {
				return true
			}
		}
		return false
	}
	taken := map[*retainEntry]bool{}
	for len(idle) > 0 {
		e := c.retain.warmCandidate(c.clk.now, held, taken)
		if e == nil {
			return
		}
		taken[e] = true
		best := 0
		for i, w := range idle {
			if w.eng.CachedPrefixBlocks(e.hashes) > idle[best].eng.CachedPrefixBlocks(e.hashes) {
				best = i
			}
		}
		c.warm(idle[best], e, pc)
		idle = append(idle[:best], idle[best+1:]...)
	}
}

// warm prefills the next chunk of e's prompt on w.
func (c *Cluster) warm(w *simWorker, e *retainEntry, pc PrefetchConfig) {
	bs := c.dep.Engine.BlockSize
	chunk := pc.ChunkTokens
	if chunk == 0 {
		chunk = c.dep.Engine.MaxBatchedTokens
	}
	have := w.eng.CachedPrefixBlocks(e.hashes)
	n := min(len(e.hashes), have+max(1, chunk/bs))
	f := &flight{warm: true, w: w}
	f.seq = Seq{Prompt: n*bs + 1, MaxOutput: 1, Hashes: e.hashes[:n], User: f,
		PinBlocks: n, PinTTL: c.cfg.Cache.TTL, Tenant: e.tenant}
	if err := w.eng.Add(&f.seq); err != nil {
		return // longer than the model: the follow-up would be too
	}
	w.warming = true
	c.warmups++
	c.kick(w)
}

// warmed ends a warm-up.
func (c *Cluster) warmed(f *flight) {
	f.w.warming = false
}
