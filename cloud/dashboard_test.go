package cloud

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestDashboardLive: the dashboard the cloud serves reads the live
// coordinator through dashboardView: each pool's workers and load, each
// worker as last probed, and the tokens the coordinator streamed.
func TestDashboardLive(t *testing.T) {
	c := startCloud(t, func(cfg *Config) {
		cfg.BuiltinWorkers = 0
		for _, u := range []string{"sim://h100?n=1&role=prefill", "sim://h100?n=1&role=decode"} {
			if err := cfg.Workers.Set(u); err != nil {
				t.Fatal(err)
			}
		}
		cfg.Budget = 1 << 30
	})
	const tokens = 5
	if r := chat(t, c.HTTPAddr(), "", "", "hello dashboard", tokens); r.status != 200 {
		t.Fatalf("status %d, body %s", r.status, r.body)
	}
	resp, err := http.Get("http://" + c.HTTPAddr() + "/ui/api/live")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/ui/api/live: %s", resp.Status)
	}
	var live struct {
		Pools []struct {
			Name              string
			Workers, Capacity int
		}
		Workers []struct {
			Name, Pool string
			Healthy    bool
			Capacity   int
		}
		Tokens float64 `json:"output_tokens_total"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&live); err != nil {
		t.Fatal(err)
	}
	pools := map[string]int{}
	for _, p := range live.Pools {
		pools[p.Name] = p.Workers
		if p.Workers == 1 && p.Capacity != 256 {
			t.Errorf("pool %s: capacity %d, want the simulated engine's 256", p.Name, p.Capacity)
		}
	}
	if pools["prefill-heavy"] != 1 || pools["decode-heavy"] != 1 {
		t.Errorf("pools %+v: want one prefill-heavy and one decode-heavy worker", live.Pools)
	}
	if len(live.Workers) != 2 {
		t.Fatalf("workers %+v, want 2", live.Workers)
	}
	for _, w := range live.Workers {
		if !w.Healthy || w.Capacity != 256 || !strings.HasSuffix(w.Pool, "-heavy") {
			t.Errorf("worker %+v: want healthy, 256 sequences, in its pool", w)
		}
	}
	if live.Tokens < tokens {
		t.Errorf("output_tokens_total %v, want at least %d", live.Tokens, tokens)
	}
}
