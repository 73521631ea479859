package cloud

import (
	"os"
	"path/filepath"
	"strconv"
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
