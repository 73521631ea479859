package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

func runSim(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	cio := cli.IO{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	err := simCmd(context.Background(), cio, args)
	return out.String() + errb.String(), err
}

// TestSimCommand: the JSON lines carry exactly the documented fields, one
// per policy and rate; the table, --max-rate and --plot work on a slice of
// the shipped Mooncake trace.
func TestSimCommand(t *testing.T) {
	out, err := runSim(t, "--trace", "../replay/testdata/traces/azure-code-head.csv", "--format", "azure", "--limit", "150",
		"--cluster", "2xh100", "--rate-scale", "1,4", "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := []string{"policy", "rate_scale", "requests", "goodput_rps", "slo_attainment", "ttft_mean_ms", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms",
		"tpot_p50_ms", "tpot_p99_ms", "itl_mean_ms", "itl_p50_ms", "itl_p90_ms", "itl_p99_ms", "e2e_mean_ms", "e2e_p50_ms", "e2e_p90_ms", "e2e_p99_ms",
		"output_tps", "prefix_hit", "cost_per_mtok"}
	slices.Sort(want)
	lines := 0
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "{") {
			continue
		}
		lines++
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		var keys []string
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if !slices.Equal(keys, want) || m["requests"].(float64) != 150 {
			t.Fatalf("line %s", l)
		}
	}
	if want := 2 * len(sched.Names()); lines != want {
		t.Fatalf("%d JSON lines, want %d policies × 2 rates\n%s", lines, len(sched.Names()), out)
	}
	dir := t.TempDir()
	out, err = runSim(t, "--trace", "../replay/testdata/traces/mooncake-conversation-head.jsonl", "--format", "mooncake", "--limit", "30",
		"--cluster", "1xh100,2xl4", "--policy", "scheduler,llm-d", "--max-rate", "--plot", dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, s := range []string{"goodput req/s", "h100", "l4", "highest sustainable rate", "llm-d"} {
		if !strings.Contains(out, s) {
			t.Fatalf("output lacks %q:\n%s", s, out)
		}
	}
	for _, f := range []string{"attainment.png", "ttft-cdf.png"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Fatalf("%s: %v", f, err)
		}
	}
	// A cluster of built-in CPU engines, profiled from lm bench on the spot.
	model := filepath.Join(dir, "dev.gguf")
	w, err := lm.RandomWeights(worker.DevModelConfig, 1)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := lm.WriteGGUF(&buf, worker.DevModelConfig, tokenizer.ByteSpec(), w, nil, lm.F32); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(model, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = runSim(t, "--trace", "../replay/testdata/traces/mooncake-conversation-head.jsonl", "--format", "mooncake", "--limit", "20",
		"--cluster", "2xcpu", "--cpu-model", model, "--policy", "least-loaded", "--json")
	if err != nil || !strings.Contains(out, `"policy":"least-loaded"`) || !strings.Contains(out, "256-token step budget per cpu worker") {
		t.Fatalf("cpu cluster: %v\n%s", err, out)
	}
	for _, bad := range [][]string{
		{"--trace", "../replay/testdata/traces/azure-code-head.csv", "--format", "azure", "--cluster", "2xcpu"},
		{"--trace", "../replay/testdata/traces/azure-code-head.csv", "--format", "azure", "--cluster", "2xcpu,2xh100", "--cpu-model", model},
		{"--trace", "../replay/testdata/traces/azure-code-head.csv", "--format", "azure", "--cpu-model", model},
		{"--format", "azure"},
		{"--trace", "x", "--format", "csv"},
		{"--trace", "../replay/testdata/traces/azure-code-head.csv", "--format", "azure", "--policy", "fastest"},
		{"--trace", "../replay/testdata/traces/azure-code-head.csv", "--format", "azure", "--cluster", "8xv100"},
		{"--trace", "../replay/testdata/traces/azure-code-head.csv", "--format", "azure", "--rate-scale", "0"},
		{"--trace", "../replay/testdata/traces/azure-code-head.csv", "--format", "azure", "--cluster", "1xt4", "--model", "llama3.1-70b"},
	} {
		if _, err := runSim(t, bad...); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
