package benchreport

import (
	"bufio"
	"io"
	"strconv"
	"strings"
)

// Result is one benchmark line of `go test -bench` output.
type Result struct {
	Name       string             // without the Benchmark prefix and the -GOMAXPROCS suffix
	Procs      int                // the -N suffix (GOMAXPROCS), 1 when absent
	Iterations int64              // b.N
	Metrics    map[string]float64 // unit → value: ns/op, B/op, allocs/op, and b.ReportMetric units
}

// ParseBenchOutput reads `go test -bench` output and returns its benchmark
// lines in order; other lines (PASS, ok, logs) are skipped, and so is a
// line that does not parse.
func ParseBenchOutput(r io.Reader) []Result {
	var out []Result
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if res, ok := parseLine(sc.Text()); ok {
			out = append(out, res)
		}
	}
	return out
}

// parseLine reads "BenchmarkName-2  1000  123 ns/op  45 B/op  1 allocs/op".
func parseLine(line string) (Result, bool) {
	f := strings.Fields(line)
	if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
		return Result{}, false
	}
	n, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || n <= 0 {
		return Result{}, false
	}
	res := Result{Name: strings.TrimPrefix(f[0], "Benchmark"), Procs: 1, Iterations: n, Metrics: map[string]float64{}}
	if i := strings.LastIndexByte(res.Name, '-'); i > 0 {
		if p, err := strconv.Atoi(res.Name[i+1:]); err == nil && p > 0 {
			res.Name, res.Procs = res.Name[:i], p
		}
	}
	if res.Name == "" {
		return Result{}, false
	}
	for i := 2; i+1 < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return Result{}, false
		}
		res.Metrics[f[i+1]] = v
	}
	return res, true
}
