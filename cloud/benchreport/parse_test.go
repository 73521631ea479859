package benchreport

import (
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
