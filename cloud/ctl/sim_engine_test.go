package ctl

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSimEngineFlags: the engine knobs reach the simulated engines (the
// sizing line and the prefix hit move) and bad values are refused.
func TestSimEngineFlags(t *testing.T) {
	run := func(args ...string) (hit float64, out string) {
		t.Helper()
		out, err := runSim(t, append([]string{"--workload", "rate=8,requests=60,prompt=547,prefix=120,output=8", "--cluster", "1xh100", "--policy", "round-robin", "--json"}, args...)...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(out[:strings.Index(out, "\n")]), &m); err != nil {
			t.Fatal(err)
		}
		return m["prefix_hit"].(float64), out
	}
	base, out := run()
	if !strings.Contains(out, "411952 KV tokens and a 8192-token step budget") {
		t.Fatalf("defaults changed:\n%s", out)
	}
	if _, out := run("--max-num-batched-tokens", "2048", "--gpu-memory-utilization", "0.5", "--max-num-seqs", "64"); !strings.Contains(out, "a 2048-token step budget") || strings.Contains(out, "411952 KV tokens") {
		t.Fatalf("budget and memory not applied:\n%s", out)
	}
	if hit, _ := run("--block-size", "64"); !(hit < base && hit > 0) {
		t.Fatalf("prefix hit %.3f with 64-token blocks, %.3f with 16", hit, base)
	}
	if hit, _ := run("--prefix-caching=false"); hit != 0 {
		t.Fatalf("prefix hit %.3f with prefix caching off", hit)
	}
	ttft := func(args ...string) float64 {
		t.Helper()
		out, err := runSim(t, append([]string{"--workload", "rate=100,requests=100,prompt=200,output=32", "--cluster", "1xh100", "--policy", "round-robin", "--json"}, args...)...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(out[:strings.Index(out, "\n")]), &m); err != nil {
			t.Fatal(err)
		}
		return m["ttft_p50_ms"].(float64)
	}
	if sync, async := ttft(), ttft("--async-scheduling"); !(async > sync) {
		t.Fatalf("TTFT p50 %.2f ms with --async-scheduling, %.2f ms without", async, sync)
	}
	if _, out := run("--host-kv", "2", "--pcie-gbps", "16"); !strings.Contains(out, "round-robin") {
		t.Fatal(out)
	}
	// A closed-loop client of one: requests never overlap.
	out, err := runSim(t, "--workload", "rate=1000,requests=10,prompt=100,output=20", "--cluster", "1xh100", "--policy", "round-robin", "--json", "--max-concurrency", "1")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out[:strings.Index(out, "\n")]), &m); err != nil {
		t.Fatal(err)
	}
	if p50, p99 := m["ttft_p50_ms"].(float64), m["ttft_p99_ms"].(float64); p99 > 1.2*p50 || p50 > 20 {
		t.Fatalf("concurrency 1: TTFT p50 %.2f ms, p99 %.2f ms: requests queued", p50, p99)
	}
	for _, bad := range [][]string{
		{"--max-concurrency", "-1"},
		{"--block-size", "24"}, {"--max-num-seqs", "0"}, {"--gpu-memory-utilization", "1.5"}, {"--max-num-batched-tokens", "8"},
		{"--pcie-gbps", "16"}, {"--prefix-caching=false", "--host-kv", "2"}, {"--prefix-caching=false", "--cache-ttl", "5m"},
		{"--gpu-memory-utilization", "0.1"}, // the weights do not fit
	} {
		if _, err := runSim(t, append([]string{"--workload", "rate=8,requests=5,prompt=50,output=8", "--cluster", "1xh100"}, bad...)...); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
