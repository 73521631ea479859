package benchreport

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseBenchOutput(t *testing.T) {
	out := `goos: linux
goarch: amd64
BenchmarkDecide/rules-2         	 7340031	       162.6 ns/op	       0 B/op	       0 allocs/op
BenchmarkTokenLatency-2   	    5000	     12000 ns/op	        10.50 p50-µs
    bench_test.go:52: batch  1:    409.0 tok/s
BenchmarkBroken-2 many 12 ns/op
BenchmarkOdd 10 1 ns/op 2
PASS
ok  	github.com/phaseless/phaseless/cloud/sched	2.1s
`
	rs := ParseBenchOutput(strings.NewReader(out))
	if len(rs) != 2 {
		t.Fatalf("%d results: %+v", len(rs), rs)
	}
	if r := rs[0]; r.Name != "Decide/rules" || r.Procs != 2 || r.Iterations != 7340031 || r.Metrics["ns/op"] != 162.6 || r.Metrics["allocs/op"] != 0 {
		t.Errorf("%+v", r)
	}
	if r := rs[1]; r.Metrics["p50-µs"] != 10.5 || r.Metrics["ns/op"] != 12000 {
		t.Errorf("%+v", r)
	}
}

func FuzzParseBenchOutput(f *testing.F) {
	f.Add("BenchmarkX-2 10 5 ns/op 3 B/op\n")
	f.Add("BenchmarkDecide/rules-16 1 0.5 ns/op\nPASS\n")
	f.Add("Benchmark- 1 1 x\n")
	f.Fuzz(func(t *testing.T, s string) {
		for _, r := range ParseBenchOutput(strings.NewReader(s)) {
			if r.Name == "" || r.Iterations <= 0 || r.Procs <= 0 {
				t.Fatalf("accepted %+v from %q", r, s)
			}
		}
	})
}

// TestPlotsShowTheirClaims: a suite entry whose claim compares two sides
// ("QUIC against SSE") plots at least two metrics, each one its benchmark
// reports (b.ReportMetric in the package's tests), so the plot shows both
// sides as bars of their own.
func TestPlotsShowTheirClaims(t *testing.T) {
	for _, e := range suite {
		if !strings.Contains(e.Claim, " against ") {
			continue
		}
		if len(e.Plot) < 2 {
			t.Errorf("%s %s: claims %q and plots only %v", e.Pkg, e.Bench, e.Claim, e.Plot)
			continue
		}
		src, _ := filepath.Glob(filepath.Join("..", "..", e.Pkg, "*_test.go"))
		var all strings.Builder
		for _, f := range src {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			all.Write(b)
		}
		for _, m := range e.Plot {
			if !strings.Contains(all.String(), `"`+m+`")`) {
				t.Errorf("%s: plots %q, which no benchmark there reports", e.Pkg, m)
			}
		}
	}
	// One benchmark with both sides' metrics gives a bar per metric.
	rs := ParseBenchOutput(strings.NewReader("BenchmarkTokenLatency-2 200 1 ns/op 30 quic-p50-µs 90 quic-p99-µs 45 sse-h2-p50-µs 120 sse-h2-p99-µs\n" +
		"BenchmarkTokenLatency-2 200 1 ns/op 31 quic-p50-µs 91 quic-p99-µs 44 sse-h2-p50-µs 121 sse-h2-p99-µs\n"))
	bs := bars(suite[0].Plot, rs)
	if len(bs) != 4 || bs[0].label != "quic-p50-µs" || bs[1].label != "sse-h2-p50-µs" || bs[0].metric == bs[1].metric || len(bs[0].runs) != 2 {
		t.Fatalf("bars %+v", bs)
	}
	if err := barPlot(filepath.Join(t.TempDir(), "p.png"), "transport", suite[0].Plot, suite[0].Unit, rs); err != nil {
		t.Fatal(err)
	}
}
