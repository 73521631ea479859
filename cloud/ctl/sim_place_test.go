package ctl

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSimOutage: --outage makes a worker refuse requests; the JSON line
// counts the coordinator's fallbacks (the one tenant's two) and the
// requests that failed after them, and the table says so under it.
func TestSimOutage(t *testing.T) {
	args := []string{"--trace", "../replay/testdata/traces/azure-code-head.csv", "--format", "azure", "--limit", "200",
		"--cluster", "2xh100", "--policy", "round-robin", "--probe-interval", "60s", "--outage", "h100-0@10s+200s"}
	out, err := runSim(t, append(args, "--json")...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var row map[string]any
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "{") {
			if err := json.Unmarshal([]byte(l), &row); err != nil {
				t.Fatal(err)
			}
		}
	}
	if row["fallbacks"] != 2.0 || row["failed"] == nil || row["failed"].(float64) == 0 {
		t.Fatalf("row %v: want the tenant's 2 fallbacks and failures after them", row)
	}
	out, err = runSim(t, args...)
	if err != nil || !strings.Contains(out, "round-robin ×1: breaker trips") || !strings.Contains(out, "fallbacks 2,") {
		t.Fatalf("%v\n%s", err, out)
	}
}
