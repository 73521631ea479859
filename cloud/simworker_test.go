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
