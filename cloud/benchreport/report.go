package benchreport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/phaseless/phaseless/models/lm"
)

// Suite entries: one `go test -bench` run each.
type entry struct {
	Area  string // report section
	Pkg   string // package path relative to the module root
	Bench string // -bench regexp
	Time  string // -benchtime
	Count int    // -count
	QTime string // -benchtime in quick mode; "" = left out of quick mode
	// Plot are the metrics plotted per benchmark, a bar each: the sides
	// the claim compares, when one benchmark reports both (QUIC and SSE).
	Plot    []string
	Unit    string // the plot's y axis; "" = the one metric's name
	Claim   string // what the README says this measures
	ReadmeQ string // the README's own command, when it quotes one
}

var suite = []entry{
	{Area: "transport", Pkg: "./transport/quic", Bench: "TokenLatency", Time: "5000x", Count: 3, QTime: "200x",
		Plot: []string{"quic-p50-µs", "sse-h2-p50-µs", "quic-p99-µs", "sse-h2-p99-µs"}, Unit: "µs from emit to the client, per token",
		Claim: "per-token latency over QUIC against SSE over HTTP/2 (same run)", ReadmeQ: "go test -run='^$' -bench=TokenLatency -benchtime=5000x -count=3 ./transport/quic/"},
	{Area: "transport", Pkg: "./transport/quic", Bench: "ConcurrentStreams", Time: "20x", Count: 3,
		Plot: []string{"quic-tok/s", "sse-h2-tok/s"}, Unit: "tokens/s, all streams",
		Claim: "64 concurrent streams × 256 tokens, QUIC against SSE", ReadmeQ: "go test -run='^$' -bench=ConcurrentStreams -benchtime=20x -count=3 ./transport/quic/"},
	{Area: "telemetry", Pkg: "./agent/telemetry", Bench: ".", Time: "5x", Count: 1, QTime: "2x",
		Plot: []string{"group-appends/s", "fsync-each-appends/s"}, Unit: "durable appends/s",
		Claim: "durable appends: group commit against one fsync per record", ReadmeQ: "go test -run='^$' -bench=. -benchtime=5x ./agent/telemetry"},
	{Area: "telemetry", Pkg: "./cloud/fleet", Bench: "Ingest", Time: "1s", Count: 1, QTime: "1x", Plot: []string{"ns/op"},
		Claim: "cloud telemetry ingest, 1 and 16 devices at once", ReadmeQ: "go test -run=^$ -bench=. -benchmem ./cloud/fleet"},
	{Area: "scheduler", Pkg: "./cloud/sched", Bench: "Decide", Time: "1s", Count: 3, QTime: "1000x", Plot: []string{"ns/op"},
		Claim: "one placement decision per policy", ReadmeQ: "go test -run '^$' -bench . -benchmem ./cloud/sched"},
	{Area: "agent", Pkg: "./agent", Bench: "EngineDirect|AgentHTTP", Time: "1s", Count: 1, Plot: []string{"ns/op"},
		Claim: "what the agent adds over calling the engine directly", ReadmeQ: "go test -run '^$' -bench 'EngineDirect|AgentHTTP' -benchmem ./agent/"},
}

// areas are the report's sections, in order.
var areas = []string{"engine", "transport", "telemetry", "scheduler", "agent", "simulator"}

// Config configures one report.
type Config struct {
	OutDir string // where report.md and the PNGs go (created)
	Quick  bool   // short runs of a subset, for tests and a first look
	// Only, when not empty, limits the report to these areas (engine,
	// transport, telemetry, scheduler, agent, simulator).
	Only []string
	// RepoDir is the module root holding the benchmarks; empty finds it
	// from the working directory. Without one (a phaselessctl outside the
	// source tree) the go-test sections are skipped, and the report says so.
	RepoDir string
	Go      string // the go command (default "go" on PATH)
	// Engine is the built-in engine's model; nil leaves the engine out.
	Engine     *lm.Model
	EngineName string
	// Sim, when set, runs the cluster simulator and writes its tables as
	// Markdown (phaselessctl sim, where this build has one).
	Sim func(ctx context.Context, w io.Writer) error
	// SimCommand is how to rerun Sim, for the report.
	SimCommand string
	// Log receives progress lines (default io.Discard).
	Log io.Writer
	Now func() time.Time
}

// Section is one part of the report.
type Section struct {
	Title   string
	Command string   // how to rerun it
	Claim   string   // what it measures
	Results []Result // go-test results
	Table   string   // Markdown body, for sections that are not go benchmarks
	Plot    string   // PNG file name in OutDir, "" = none
	Skipped string   // why the section did not run
}

// Report is what Run measured.
type Report struct {
	Machine  string
	Started  time.Time
	Took     time.Duration
	Quick    bool
	Sections []Section
}

// Run runs the suite and writes OutDir/report.md with its plots.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.OutDir == "" {
		return nil, errors.New("benchreport: OutDir is required")
	}
	if cfg.Go == "" {
		cfg.Go = "go"
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return nil, err
	}
	if cfg.RepoDir == "" {
		cfg.RepoDir = ModuleRoot()
	}
	rep := &Report{Machine: machine(), Started: cfg.Now(), Quick: cfg.Quick}
	want := func(area string) bool { return len(cfg.Only) == 0 || slices.Contains(cfg.Only, area) }
	for _, a := range cfg.Only {
		if !slices.Contains(areas, a) {
			return nil, fmt.Errorf("benchreport: unknown area %q (have %s)", a, strings.Join(areas, ", "))
		}
	}
	if cfg.Engine != nil && want("engine") {
		fmt.Fprintln(cfg.Log, "engine: lm.Bench on", cfg.EngineName)
		s, err := engineSection(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
		rep.Sections = append(rep.Sections, s)
	}
	for i, e := range suite {
		if !want(e.Area) {
			continue
		}
		s := Section{Title: fmt.Sprintf("%s: %s (%s)", e.Area, e.Bench, e.Pkg), Claim: e.Claim}
		bt, count := e.Time, e.Count
		if cfg.Quick && e.QTime != "" {
			bt, count = e.QTime, 1
		}
		args := []string{"test", "-run", "^$", "-bench", e.Bench, "-benchmem", "-benchtime", bt, "-count", fmt.Sprint(count), e.Pkg}
		s.Command = cfg.Go + " " + shellQuote(args)
		switch {
		case cfg.Quick && e.QTime == "":
			s.Skipped = "left out of --quick (slow); run without --quick"
		case cfg.RepoDir == "":
			s.Skipped = "no source tree here: run phaselessctl bench report from a checkout of the repository"
		default:
			fmt.Fprintln(cfg.Log, "running", s.Command)
			cmd := exec.CommandContext(ctx, cfg.Go, args...)
			cmd.Dir = cfg.RepoDir
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				return nil, fmt.Errorf("%s: %w\n%s", s.Command, err, tail(out.String(), 2000))
			}
			s.Results = ParseBenchOutput(&out)
			if len(s.Results) == 0 {
				return nil, fmt.Errorf("%s: no benchmark results in\n%s", s.Command, tail(out.String(), 2000))
			}
			s.Plot = fmt.Sprintf("%02d-%s.png", i+1, strings.ReplaceAll(strings.Trim(e.Pkg, "./"), "/", "-"))
			if err := barPlot(filepath.Join(cfg.OutDir, s.Plot), e.Area+": "+e.Claim, e.Plot, e.Unit, s.Results); err != nil {
				return nil, err
			}
		}
		if e.ReadmeQ != "" && !cfg.Quick {
			s.Claim += " (README: `" + e.ReadmeQ + "`)"
		}
		rep.Sections = append(rep.Sections, s)
	}
	switch {
	case !want("simulator"):
	case cfg.Sim != nil:
		var b bytes.Buffer
		fmt.Fprintln(cfg.Log, "running the simulator")
		if err := cfg.Sim(ctx, &b); err != nil {
			return nil, fmt.Errorf("simulator: %w", err)
		}
		rep.Sections = append(rep.Sections, Section{Title: "simulator", Command: cfg.SimCommand, Table: b.String()})
	default:
		rep.Sections = append(rep.Sections, Section{Title: "simulator", Skipped: "this phaselessctl has no sim command"})
	}
	rep.Took = cfg.Now().Sub(rep.Started)
	f, err := os.Create(filepath.Join(cfg.OutDir, "report.md"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := rep.WriteMarkdown(f); err != nil {
		return nil, err
	}
	return rep, f.Close()
}

func engineSection(ctx context.Context, cfg Config) (Section, error) {
	bc := lm.BenchConfig{}
	if cfg.Quick {
		bc = lm.BenchConfig{Batches: []int{1, 4}, DecodeTokens: 8, PromptLen: 64, Repeats: 1, CopyBytes: 8 << 20}
	}
	r, err := lm.Bench(ctx, cfg.Engine, bc)
	if err != nil {
		return Section{}, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| decode batch | tokens/s | tokens per CPU-second | over batch 1 |\n|---|---|---|---|\n")
	for _, d := range r.Decode {
		fmt.Fprintf(&b, "| %d | %.0f | %.0f | %.2f× |\n", d.Batch, d.TokensPerSec, d.TokensPerCPUSec, d.TokensPerSec/r.Decode[0].TokensPerSec)
	}
	fmt.Fprintf(&b, "\n| measure | result |\n|---|---|\n| prefill | %.0f tokens/s |\n| TTFT uncached / with %d tokens cached | %v / %v = %.2f |\n| memory copy | %.2f GB/s |\n| batch-1 decode vs memory bandwidth | %.0f%% |\n| weights | %.1f MB |\n",
		r.PrefillTokensPerSec, r.CachedPromptTokens, r.TTFTUncached.Round(10*time.Microsecond), r.TTFTCached.Round(10*time.Microsecond),
		float64(r.TTFTCached)/float64(max(r.TTFTUncached, 1)), r.CopyBytesPerSec/1e9, r.SingleStreamFraction*100, float64(r.WeightBytes)/1e6)
	s := Section{Title: "engine: built-in engine (" + cfg.EngineName + ")", Claim: "decode throughput by batch, prefill, TTFT with a cached prefix",
		Command: "phaselessctl lm bench --model MODEL --batch " + batchList(r.Decode), Table: b.String(), Plot: "00-engine.png"}
	return s, enginePlot(filepath.Join(cfg.OutDir, s.Plot), r)
}

func batchList(d []lm.BatchRate) string {
	var p []string
	for _, x := range d {
		p = append(p, fmt.Sprint(x.Batch))
	}
	return strings.Join(p, ",")
}

// WriteMarkdown writes the report.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	mode := "full"
	if r.Quick {
		mode = "quick (--quick: short runs, not for quoting)"
	}
	fmt.Fprintf(&b, "# Phaseless benchmark report\n\n%s · %s · mode %s · took %v\n\n", r.Machine, r.Started.UTC().Format(time.RFC3339), mode, r.Took.Round(time.Second))
	b.WriteString("Figures from a shared or loaded machine vary between runs; compare numbers from one report, not across reports.\n")
	for _, s := range r.Sections {
		fmt.Fprintf(&b, "\n## %s\n\n", s.Title)
		if s.Skipped != "" {
			fmt.Fprintf(&b, "Not run: %s.\n", s.Skipped)
			if s.Command != "" {
				fmt.Fprintf(&b, "\n```sh\n%s\n```\n", s.Command)
			}
			continue
		}
		if s.Claim != "" {
			fmt.Fprintf(&b, "%s.\n\n", capitalise(s.Claim))
		}
		fmt.Fprintf(&b, "```sh\n%s\n```\n\n", s.Command)
		if s.Table != "" {
			b.WriteString(s.Table)
		}
		if len(s.Results) > 0 {
			writeResults(&b, s.Results)
		}
		if s.Plot != "" {
			fmt.Fprintf(&b, "\n![%s](%s)\n", s.Title, s.Plot)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeResults tables every metric of every benchmark (each -count run on
// its own row, so the spread shows).
func writeResults(b *strings.Builder, rs []Result) {
	units := map[string]bool{}
	for _, r := range rs {
		for u := range r.Metrics {
			units[u] = true
		}
	}
	order := []string{"ns/op", "B/op", "allocs/op"}
	var extra []string
	for u := range units {
		if u != "ns/op" && u != "B/op" && u != "allocs/op" {
			extra = append(extra, u)
		}
	}
	sort.Strings(extra)
	var cols []string
	for _, u := range append(order, extra...) {
		if units[u] {
			cols = append(cols, u)
		}
	}
	fmt.Fprintf(b, "| benchmark | n | %s |\n|---|---|%s\n", strings.Join(cols, " | "), strings.Repeat("---|", len(cols)))
	for _, r := range rs {
		fmt.Fprintf(b, "| %s | %d |", r.Name, r.Iterations)
		for _, c := range cols {
			if v, ok := r.Metrics[c]; ok {
				fmt.Fprintf(b, " %s |", trimFloat(v))
			} else {
				b.WriteString(" |")
			}
		}
		b.WriteString("\n")
	}
}

func trimFloat(v float64) string {
	switch {
	case v >= 100 || v == float64(int64(v)):
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.4g", v)
}

func capitalise(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func shellQuote(args []string) string {
	var out []string
	for _, a := range args {
		if strings.ContainsAny(a, "^$|*? '") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out = append(out, a)
	}
	return strings.Join(out, " ")
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// ModuleRoot walks up from the working directory to the Phaseless
// module's go.mod; "" when there is none.
func ModuleRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(bytes.TrimSpace(b), []byte("module github.com/phaseless/phaseless")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// machine names the CPU, core count and Go version the numbers are from.
func machine() string {
	cpu := runtime.GOARCH
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d cores, %s/%s, %s", cpu, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
}
