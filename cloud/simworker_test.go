package cloud

import (
	"strings"
	"sync"
	"testing"
)

// TestSimWorkers: --worker sim://... runs simulated H100s behind the live
// coordinator; many concurrent streams go through the real HTTP path, and
// the coordinator's remote-worker probe reads their vLLM-style metrics.
func TestSimWorkers(t *testing.T) {
	c := startCloud(t, func(cfg *Config) {
		cfg.BuiltinWorkers = 0
		if err := cfg.Workers.Set("sim://h100?model=llama3.1-8b&n=2"); err != nil {
			t.Fatal(err)
		}
		cfg.Budget = 1 << 30
	})
	ws := c.workers.Workers()
	if len(ws) != 2 {
		t.Fatalf("%d workers, want 2", len(ws))
	}
	for _, w := range ws {
		if l := w.LastLoad(); l.Capacity != 256 || !w.Healthy() {
			t.Fatalf("%s: probed %+v healthy=%v; want the simulated engine's 256 sequences", w.Name(), l, w.Healthy())
		}
	}
	const streams, tokens = 200, 8
	var wg sync.WaitGroup
	res := make([]streamed, streams)
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = chat(t, c.HTTPAddr(), "", "", strings.Repeat("a shared system prompt for the prefix cache ", 20)+string(rune('a'+i%26)), tokens)
		}()
	}
	wg.Wait()
	for i, r := range res {
		if r.status != 200 || strings.Count(r.text, "tok") != tokens {
			t.Fatalf("stream %d: status %d, text %q, body %s", i, r.status, r.text, r.body)
		}
		if route := r.header.Get("x-phaseless-route"); !strings.Contains(route, "/remote-") {
			t.Fatalf("stream %d ran on %q", i, route)
		}
	}
	var bad WorkerURLs
	if err := bad.Set("sim://v100?n=2"); err == nil || !strings.Contains(err.Error(), "v100") {
		t.Fatalf("unknown GPU accepted: %v", err)
	}
}

// TestSimWorkersSplit: a split decided by the live coordinator runs split
// on sim:// workers (their /v1/kv/ endpoints): the prefill on the
// prefill-heavy simulated H100, the decode on the decode-heavy one, the
// handoff counted ok rather than falling back to a colocated run.
func TestSimWorkersSplit(t *testing.T) {
	c := startCloud(t, func(cfg *Config) {
		cfg.BuiltinWorkers = 0
		for _, u := range []string{"sim://h100?n=1&role=prefill", "sim://h100?n=1&role=decode"} {
			if err := cfg.Workers.Set(u); err != nil {
				t.Fatal(err)
			}
		}
		cfg.Budget = 1 << 30
	})
	r := chat(t, c.HTTPAddr(), "", "disaggregated", strings.Repeat("a long prompt to prefill elsewhere ", 30), 6)
	if r.status != 200 || strings.Count(r.text, "tok") != 6 {
		t.Fatalf("status %d, text %q, body %s", r.status, r.text, r.body)
	}
	if route, dec := r.header.Get("x-phaseless-route"), r.header.Get("x-phaseless-decode"); !strings.Contains(route, "prefill-heavy/") || !strings.HasPrefix(dec, "decode-heavy/") {
		t.Fatalf("route %q, decode %q: not split", route, dec)
	}
	if m := scrape(t, c.HTTPAddr()); !strings.Contains(m, `phaseless_pd_handoffs_total{result="ok"} 1`) {
		t.Fatalf("no handoff counted:\n%s", m)
	}
}
