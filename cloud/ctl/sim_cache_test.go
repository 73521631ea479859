package ctl

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSimCacheFlags: the prompt-caching flags run on a slice of the
// shipped Mooncake trace (the follow-up model with soft pins and the
// coordinator's prefetch, the oracle bound; the host KV tier with the
// cache-aware order),
// --report-from summarises only the later requests, and
// a flag that would be ignored is refused naming it.
func TestSimCacheFlags(t *testing.T) {
	base := []string{"--trace", "../replay/testdata/traces/mooncake-conversation-head.jsonl", "--format", "mooncake", "--limit", "80",
		"--cluster", "2xh100", "--policy", "llm-d", "--json"}
	requests := func(args ...string) float64 {
		t.Helper()
		out, err := runSim(t, append(append([]string(nil), base...), args...)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		var n float64
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "{") {
				var m map[string]any
				if err := json.Unmarshal([]byte(l), &m); err != nil {
					t.Fatal(err)
				}
				n = m["requests"].(float64)
			}
		}
		return n
	}
	if n := requests("--cache-ttl", "5m", "--soft-pins", "--follow-up-threshold", "0.4", "--cache-layers", "affinity,prefetch"); n != 80 {
		t.Fatalf("%v requests summarised, want 80", n)
	}
	if n := requests("--cache-ttl", "5m", "--pin-oracle", "--report-from", "12s"); n == 0 || n >= 80 {
		t.Fatalf("%v requests summarised from 12 s on, want some of the 80", n)
	}
	if n := requests("--host-kv", "4", "--aging-rate", "10000", "--cache-ttl", "5m", "--soft-pins"); n != 80 {
		t.Fatalf("%v requests summarised with the host tier and the order, want 80", n)
	}
	if n := requests("--cache-layers", "affinity,semantic,prefetch", "--semantic-mode", "topic", "--prefetch-hint", "high"); n != 80 {
		t.Fatalf("%v requests summarised with every layer, want 80", n)
	}
	for _, tc := range []struct {
		field string
		args  []string
	}{
		{"cache-layers", []string{"--cache-layers", "affinity,bogus"}},
		{"cache-layers", []string{"--prefetch-hint", "high"}}, // prefetch is off: the header would be ignored
		{"semantic-mode", []string{"--semantic-mode", "mood"}},
		{"batch-threshold", []string{"--batch-threshold", "2"}},
		{"prefetch-hint", []string{"--cache-layers", "prefetch", "--prefetch-hint", "max"}},
		{"outage", []string{"--outage", "h100-0@10s"}},
		{"outage", []string{"--outage", "h100-0@10s+0s"}},
		{"no worker", []string{"--outage", "l4-0@10s+5s"}},
		{"cache-ttl", []string{"--follow-up-threshold", "0.5"}},
		{"pin-oracle", []string{"--cache-ttl", "5m", "--pin-oracle", "--follow-up-threshold", "0.5"}},
		{"tenant-share", []string{"--tenant-share", "0.9"}},
		{"host-kv", []string{"--host-kv", "-1"}},
		{"host-kv", []string{"--host-kv", "NaN"}},
		{"aging-rate", []string{"--aging-rate", "-5"}},
		{"aging-rate", []string{"--aging-rate", "NaN", "--aging-whole-prompt"}},
		{"aging-rate", []string{"--aging-rate", "+Inf"}},
		{"follow-up-threshold", []string{"--cache-ttl", "5m", "--follow-up-threshold", "NaN"}},
		{"aging-whole-prompt", []string{"--aging-whole-prompt"}},
		{"soft-pins", []string{"--soft-pins"}}, // nothing pinned to soften
		{"pinned-share", []string{"--pinned-share", "0.3", "--host-kv", "2"}},
	} {
		args := tc.args
		out, err := runSim(t, append(append([]string(nil), base...), args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Fatalf("%v: err %v, want one naming %s\n%s", args, err, tc.field, out)
		}
	}
}
