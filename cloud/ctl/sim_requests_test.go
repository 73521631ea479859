package ctl

import (
	"bufio"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSimRequestsOut recomputes every latency statistic of --json from
// the --requests-out file: TTFT and E2E per request, ITL pooled over every
// gap, mean and nearest-rank p50/p90/p99, each within the JSON's 1 µs
// rounding.
func TestSimRequestsOut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "requests.jsonl")
	out, err := runSim(t, "--trace", "../replay/testdata/traces/mooncake-conversation-head.jsonl", "--format", "mooncake", "--limit", "120",
		"--cluster", "2xh100", "--policy", "round-robin,scheduler", "--rate-scale", "1,4", "--json", "--requests-out", path)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	type key struct {
		policy string
		rate   float64
	}
	runs := map[key]map[string]float64{}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "{") {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatal(err)
			}
			stats := map[string]float64{}
			for k, v := range m {
				if f, ok := v.(float64); ok {
					stats[k] = f
				}
			}
			runs[key{m["policy"].(string), stats["rate_scale"]}] = stats
		}
	}
	if len(runs) != 4 {
		t.Fatalf("%d runs in --json, want 4\n%s", len(runs), out)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	samples := map[key]map[string][]float64{}
	lines := map[key]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var r simRequest
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		k := key{r.Policy, r.RateScale}
		lines[k]++
		if r.Status != "ok" {
			continue
		}
		if r.FirstToken == nil || r.Worker == "" || len(r.ITL) != r.Output-1 || r.Finish < *r.FirstToken {
			t.Fatalf("line %+v", r)
		}
		if samples[k] == nil {
			samples[k] = map[string][]float64{}
		}
		samples[k]["ttft"] = append(samples[k]["ttft"], *r.FirstToken-r.Arrival)
		samples[k]["e2e"] = append(samples[k]["e2e"], r.Finish-r.Arrival)
		samples[k]["itl"] = append(samples[k]["itl"], r.ITL...)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for k, stats := range runs {
		if lines[k] != 120 {
			t.Fatalf("%v: %d lines, want 120", k, lines[k])
		}
		for _, m := range []string{"ttft", "itl", "e2e"} {
			d := samples[k][m]
			if len(d) == 0 {
				t.Fatalf("%v: no %s samples", k, m)
			}
			slices.Sort(d)
			sum := 0.0
			for _, v := range d {
				sum += v
			}
			rank := func(q float64) float64 { return d[min(len(d)-1, max(0, int(math.Ceil(q*float64(len(d))))-1))] }
			for stat, v := range map[string]float64{"mean": sum / float64(len(d)), "p50": rank(0.5), "p90": rank(0.9), "p99": rank(0.99)} {
				got := stats[m+"_"+stat+"_ms"]
				if math.Abs(got-v) > 0.0015 {
					t.Errorf("%v %s_%s: --json %.6f ms, recomputed %.6f ms", k, m, stat, got, v)
				}
			}
		}
		if stats["itl_p99_ms"] < stats["itl_p50_ms"] || stats["e2e_p50_ms"] < stats["ttft_p50_ms"] {
			t.Errorf("%v: percentiles out of order %v", k, stats)
		}
	}
}

// TestSimWorkload: the benchmark spec is one command; its shared
// system prompt hits the prefix cache; --write-trace writes a trace that
// --trace plays back to the same requests.
func TestSimWorkload(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "w.jsonl")
	spec := "rate=8,duration=20s,prompt=547,prefix=120,output=24,seed=3"
	out, err := runSim(t, "--workload", spec, "--cluster", "2xh100", "--policy", "round-robin", "--json", "--write-trace", trace)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out[:strings.Index(out, "\n")]), &m); err != nil {
		t.Fatal(err)
	}
	if hit := m["prefix_hit"].(float64); math.Abs(hit-112.0/547) > 0.01 {
		t.Fatalf("prefix hit %.4f, want about 112/547 (7 full blocks of the 120-token prefix)\n%s", hit, out)
	}
	back, err := simRequests(trace, "mooncake", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	gen, _ := simRequests("", "", spec, 0)
	if len(back) != len(gen) || len(gen) < 100 {
		t.Fatalf("%d requests written, %d generated", len(back), len(gen))
	}
	for i := range gen {
		g, b := gen[i], back[i]
		if b.At != g.At.Truncate(1e6) || b.Input != g.Input || b.Output != g.Output || b.PrefixID != g.PrefixID || b.PrefixLen != g.PrefixLen {
			t.Fatalf("request %d: wrote %+v, read %+v", i, g, b)
		}
	}
	for _, bad := range [][]string{
		{"--workload", spec, "--trace", trace},
		{"--workload", spec, "--format", "mooncake"},
		{"--workload", "rate=8,duration=20s,prompt=547"},
		{"--workload", "rate=8,duration=20s,prompt=100,output=5,prefix=100"},
	} {
		if _, err := runSim(t, bad...); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
