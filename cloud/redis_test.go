package cloud

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/admit/redistest"
)

// TestCloudReplicasShareBudget: two coordinator replicas on one Redis see
// one budget per tenant: what one spends, the other cannot.
func TestCloudReplicasShareBudget(t *testing.T) {
	url := redistest.Start(t)
	keys := filepath.Join(t.TempDir(), "keys")
	os.WriteFile(keys, []byte("sk-shared-key-1 shared 1000\nsk-solo-key-01 solo 1000\n"), 0o600)
	replica := func() *Cloud {
		return startCloud(t, func(cfg *Config) {
			cfg.Dev, cfg.APIKeys, cfg.BuiltinWorkers = false, keys, 1
			if err := cfg.Redis.Set(url); err != nil {
				t.Fatal(err)
			}
			// A budget that refills over a day regains about one token in
			// this test's lifetime, however slow the machine: what A spent
			// stays visible. (Refilled per minute, a run slowed to seconds by
			// the race detector regained A's spending before B looked.)
			cfg.BudgetPeriod = 24 * time.Hour
		})
	}
	a, b := replica(), replica()
	remaining := func(c *Cloud, key string) int {
		r := chat(t, c.HTTPAddr(), key, "", "hello there", 50)
		n, err := strconv.Atoi(r.header.Get("x-burst-budget-remaining"))
		if r.status != 200 || err != nil {
			t.Fatalf("status %d, remaining %q: %s", r.status, r.header.Get("x-burst-budget-remaining"), r.body)
		}
		return n
	}
	// What replica B reports for a tenant nobody used: 1000 - this request's charge.
	fresh := remaining(b, "sk-solo-key-01")
	// The shared tenant spends on A first; B must see that spending.
	remaining(a, "sk-shared-key-1")
	shared := remaining(b, "sk-shared-key-1")
	// A spent at least its ~30 prompt tokens.
	if shared > fresh-20 {
		t.Fatalf("replica B reports %d remaining for the shared tenant, %d for a fresh one: it did not see A's spending", shared, fresh)
	}
}

// TestDeadRedisDegraded kills the Redis a cloud shares its budgets through:
// /readyz stays 200 but says degraded (every replica shares that Redis, so
// a 503 would pull them all from the load balancer), requests are still
// answered (budgets fail open), and once the circuit opens they stop
// touching Redis. Each request's latency is logged, not asserted: before
// the fix each waited about 1.8 s on go-redis' retries (issue 27, item 10).
func TestDeadRedisDegraded(t *testing.T) {
	url, kill := redistest.StartKillable(t)
	keys := filepath.Join(t.TempDir(), "keys")
	os.WriteFile(keys, []byte("sk-redis-dead-1 tenant 100000\n"), 0o600)
	c := startCloud(t, func(cfg *Config) {
		cfg.Dev, cfg.APIKeys, cfg.BuiltinWorkers = false, keys, 1
		if err := cfg.Redis.Set(url); err != nil {
			t.Fatal(err)
		}
	})
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + c.HTTPAddr() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := readyz(); code != 200 || body != "ready\n" {
		t.Fatalf("/readyz with Redis up: %d %q", code, body)
	}
	kill()
	for i := range 5 {
		start := time.Now()
		r := chat(t, c.HTTPAddr(), "sk-redis-dead-1", "", "hello there", 4)
		if r.status != 200 {
			t.Fatalf("request %d with Redis dead: %d %s", i, r.status, r.body)
		}
		t.Logf("request %d with Redis dead: %v", i, time.Since(start))
	}
	code, body := readyz()
	if code != 200 || !strings.HasPrefix(body, "degraded: ") || !strings.Contains(body, "unreachable") {
		t.Fatalf("/readyz with Redis dead: %d %q, want 200 degraded", code, body)
	}
	if v := c.metrics.Gauge("phaseless_admit_store_circuit_open", "").Value(); v != 1 {
		t.Errorf("circuit_open gauge = %v, want 1", v)
	}
}
