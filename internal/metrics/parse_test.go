package metrics

import (
	"strings"
	"testing"
)

// foreign is an excerpt of a vLLM 0.8 /metrics page, with one label value
// that hides a brace in an escaped quote.
const foreign = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="a"} 7.0
vllm:num_requests_running{model_name="b"} 2
vllm:prefix_cache_hits_total{model_name="x",weird="a\"}b"} 300 1700000000000
garbage line here
nan_metric NaN
`

func TestSums(t *testing.T) {
	got := Sums([]byte(foreign), map[string]bool{"vllm:num_requests_running": true, "vllm:prefix_cache_hits_total": true, "nan_metric": true, "absent": true})
	if got["vllm:num_requests_running"] != 9 || got["vllm:prefix_cache_hits_total"] != 300 || len(got) != 2 {
		t.Fatalf("sums %v", got)
	}
}

// TestSumsReadsRegistry: what Registry writes, Sums reads back, labelled
// families summed over their labels.
func TestSumsReadsRegistry(t *testing.T) {
	r := NewRegistry()
	r.Counter("phaseless_x_total", "x").Add(3)
	l := r.LabeledCounter("phaseless_y_total", "y", "pool")
	l.With("a").Add(2)
	l.With(`we"ird`).Add(5)
	var sb strings.Builder
	r.WriteText(&sb)
	got := Sums([]byte(sb.String()), map[string]bool{"phaseless_x_total": true, "phaseless_y_total": true})
	if got["phaseless_x_total"] != 3 || got["phaseless_y_total"] != 7 {
		t.Fatalf("sums %v of\n%s", got, sb.String())
	}
}

func FuzzParseLine(f *testing.F) {
	for _, l := range strings.Split(foreign, "\n") {
		f.Add(l)
	}
	f.Add(`x{a="\\"} 1`)
	f.Add(`x{ 1`)
	f.Fuzz(func(t *testing.T, line string) {
		name, v, err := parseLine([]byte(line))
		if err == nil && (name == "" || v != v) {
			t.Fatalf("accepted %q as %q=%v", line, name, v)
		}
	})
}
