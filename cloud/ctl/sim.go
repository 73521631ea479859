package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/phaseless/phaseless/cloud/replay"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/sim"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/models/lm"
)

// `sim` plays a trace through a simulated GPU cluster (cloud/sim) that runs
// the coordinator's own admission, batching and policies in virtual time.
func init() {
	register(&cli.Command{Name: "sim", Summary: "simulate a GPU cluster serving a trace under each scheduling policy (virtual time)", Run: simCmd})
}

// simTrace turns a trace into simulator requests at the trace's own rate.
func simTrace(reqs []replay.TraceRequest) []sim.Request {
	out := make([]sim.Request, len(reqs))
	for i, r := range reqs {
		out[i] = sim.Request{At: r.At, Input: r.Input, Output: r.Output, Blocks: r.Blocks, PrefixID: r.PrefixID, PrefixLen: r.PrefixLen}
	}
	return out
}

// simRequests reads the trace, or generates the workload.
func simRequests(trace, format, workload string, limit int) ([]sim.Request, error) {
	if workload == "" {
		reqs, err := replay.ReadTrace(trace, format, limit)
		return simTrace(reqs), err
	}
	w, err := sim.ParseWorkload(workload)
	if err != nil {
		return nil, &cli.FieldError{Field: "workload", Err: err}
	}
	reqs, err := w.Generate() // the first request arrives at 0: never none
	if limit > 0 && len(reqs) > limit {
		reqs = reqs[:limit]
	}
	return reqs, err
}

// writeSimTrace writes the simulated requests as a Mooncake trace.
func writeSimTrace(path string, reqs []sim.Request) error {
	tr := make([]replay.TraceRequest, len(reqs))
	for i, r := range reqs {
		tr[i] = replay.TraceRequest{At: r.At, Input: r.Input, Output: r.Output, Blocks: r.Blocks, PrefixID: r.PrefixID, PrefixLen: r.PrefixLen}
	}
	f, err := os.Create(path)
	if err != nil {
		return &cli.FieldError{Field: "write-trace", Err: err}
	}
	if err := replay.WriteTrace(f, tr); err != nil {
		f.Close()
		return &cli.FieldError{Field: "write-trace", Err: err}
	}
	return f.Close()
}

// simJSON is one --json line; the field names are the contract.
type simJSON struct {
	Policy        string  `json:"policy"`
	RateScale     float64 `json:"rate_scale"`
	Requests      int     `json:"requests"`
	GoodputRPS    float64 `json:"goodput_rps"`
	SLOAttainment float64 `json:"slo_attainment"`
	TTFTMean      float64 `json:"ttft_mean_ms"`
	TTFTP50       float64 `json:"ttft_p50_ms"`
	TTFTP90       float64 `json:"ttft_p90_ms"`
	TTFTP99       float64 `json:"ttft_p99_ms"`
	TPOTP50       float64 `json:"tpot_p50_ms"`
	TPOTP99       float64 `json:"tpot_p99_ms"`
	// ITL pools every gap between consecutive tokens, as vLLM's
	// benchmark_serving; E2E is arrival to last token.
	ITLMean     float64 `json:"itl_mean_ms"`
	ITLP50      float64 `json:"itl_p50_ms"`
	ITLP90      float64 `json:"itl_p90_ms"`
	ITLP99      float64 `json:"itl_p99_ms"`
	E2EMean     float64 `json:"e2e_mean_ms"`
	E2EP50      float64 `json:"e2e_p50_ms"`
	E2EP90      float64 `json:"e2e_p90_ms"`
	E2EP99      float64 `json:"e2e_p99_ms"`
	OutputTPS   float64 `json:"output_tps"`
	PrefixHit   float64 `json:"prefix_hit"`
	HostHit     float64 `json:"host_hit,omitempty"` // with --host-kv: the prefix-hit share the host tier served
	CostPerMTok float64 `json:"cost_per_mtok"`      // -1 when nothing met the SLOs
	// The coordinator's fallbacks and breaker (with --outage, or an
	// overload that trips the breaker), semantic groups and prefetch
	// warm-ups; absent when zero.
	Fallbacks    int `json:"fallbacks,omitempty"`
	Failed       int `json:"failed,omitempty"`
	Lost         int `json:"lost,omitempty"`
	BreakerTrips int `json:"breaker_trips,omitempty"`
	GroupJoins   int `json:"group_joins,omitempty"`
	Warmups      int `json:"warmups,omitempty"`
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

func toJSON(s sim.Summary) simJSON {
	cost := s.CostPerMTok
	if math.IsInf(cost, 0) {
		cost = -1
	}
	return simJSON{Policy: s.Policy, RateScale: s.RateScale, Requests: s.Requests, GoodputRPS: s.GoodputRPS, SLOAttainment: s.SLOAttainment,
		TTFTMean: ms(s.TTFT.Mean), TTFTP50: ms(s.TTFT.P50), TTFTP90: ms(s.TTFT.P90), TTFTP99: ms(s.TTFT.P99),
		TPOTP50: ms(s.TPOTP50), TPOTP99: ms(s.TPOTP99),
		ITLMean: ms(s.ITL.Mean), ITLP50: ms(s.ITL.P50), ITLP90: ms(s.ITL.P90), ITLP99: ms(s.ITL.P99),
		E2EMean: ms(s.E2E.Mean), E2EP50: ms(s.E2E.P50), E2EP90: ms(s.E2E.P90), E2EP99: ms(s.E2E.P99),
		OutputTPS: s.OutputTPS, PrefixHit: s.PrefixHit, HostHit: s.HostHit, CostPerMTok: cost,
		Fallbacks: s.Fallbacks, Failed: s.Failed, Lost: s.Lost, BreakerTrips: s.BreakerTrips, GroupJoins: s.GroupJoins, Warmups: s.Warmups}
}

func printSim(w io.Writer, rows []sim.Summary) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\trate×\treqs\tgoodput req/s\tSLO met\tTTFT p50\tp99 ms\tTPOT p50\tp99 ms\tout tok/s\tprefix hit\tGPU util\t$/M tok\trejected\t")
	for _, r := range rows {
		var util []string
		for _, p := range r.Pools {
			if math.IsNaN(p.Utilization) { // a --report-from slice
				util = append(util, p.GPU+" -")
				continue
			}
			util = append(util, fmt.Sprintf("%s %.0f%%", p.GPU, 100*p.Utilization))
		}
		cost := "-"
		if !math.IsInf(r.CostPerMTok, 0) {
			cost = fmt.Sprintf("%.3f", r.CostPerMTok)
		}
		fmt.Fprintf(tw, "%s\t%g\t%d\t%.2f\t%.1f%%\t%.0f\t%.0f\t%.1f\t%.1f\t%.0f\t%.1f%%\t%s\t%s\t%d\t\n", r.Policy, r.RateScale, r.Requests,
			r.GoodputRPS, 100*r.SLOAttainment, ms(r.TTFTP50), ms(r.TTFTP99), ms(r.TPOTP50), ms(r.TPOTP99), r.OutputTPS,
			100*r.PrefixHit, strings.Join(util, ", "), cost, r.TooLong+r.Refused)
	}
	tw.Flush()
}

// priceFlags registers --price-GPU for every GPU profile.
func priceFlags(fs *flag.FlagSet) map[string]*float64 {
	out := map[string]*float64{}
	for _, n := range sim.GPUNames() {
		g, _ := sim.LookupGPU(n)
		out[n] = fs.Float64("price-"+n, g.PricePerHour, "$ per "+n+" GPU-hour (cost per million output tokens)")
	}
	return out
}

func parseRates(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func simCmd(ctx context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	trace := fs.String("trace", "", "trace file (cloud/replay/testdata/traces)")
	format := fs.String("format", "", "trace format: azure or mooncake")
	limit := fs.Int("limit", 0, "first N requests (0 = all)")
	workload := fs.String("workload", "", "instead of --trace, a synthetic workload: rate=REQ/S,duration=D|requests=N,prompt=LEN,output=LEN[,prefix=TOKENS,prefixes=N,tenants=N,arrival=poisson|gamma:CV,seed=N]; LEN is N, uniform:LO:HI, normal:MEAN:SD or exp:MEAN (docs/sim.md)")
	writeTrace := fs.String("write-trace", "", "write the requests simulated (the --workload's, or --trace's after --limit) to this file in the Mooncake format, with prefix_id and prefix_length, for phaselessctl replay or a later --trace")
	cluster := fs.String("cluster", "8xh100", "GPU pools: COUNTxGPU[:ROLE],... (GPUs: "+strings.Join(sim.GPUNames(), ", ")+")")
	model := fs.String("model", "llama3.1-8b", "model profile: "+strings.Join(sim.ModelNames(), ", "))
	tp := fs.Int("tp", 0, "GPUs per worker (tensor parallelism); 0 = the fewest that fit")
	policy := fs.String("policy", "all", "all, or a comma-separated list of: "+strings.Join(sched.Names(), ", "))
	rates := fs.String("rate-scale", "1", "comma-separated arrival-rate multipliers (2 = twice the trace's rate)")
	sloTTFT := fs.Duration("slo-ttft", 2*time.Second, "SLO: time to first token")
	sloTPOT := fs.Duration("slo-tpot", 100*time.Millisecond, "SLO: mean time per output token after the first")
	asJSON := fs.Bool("json", false, "one JSON object per line instead of the table")
	maxRate := fs.Bool("max-rate", false, "search each policy's highest rate scale with ≥ 90% SLO attainment")
	concurrency := fs.Int("max-concurrency", 0, "a closed-loop client instead of the trace's arrival times: at most N requests in flight, the next sent when one ends (as vllm bench serve --max-concurrency); 0 = open loop")
	requestsOut := fs.String("requests-out", "", "write one JSON line per request of every run (policy, rate scale, arrival, first token, finish, tokens, worker, status, inter-token gaps) to this file, so any statistic can be recomputed")
	plotDir := fs.String("plot", "", "write PNG plots (SLO attainment against rate; TTFT CDF) to this directory")
	probe := fs.Duration("probe-interval", 500*time.Millisecond, "how often worker load (queues, KV usage, preemptions) is re-read, as phaseless-cloud probes its workers")
	cpuModel := fs.String("cpu-model", "", "GGUF model for cpu pools (--cluster 2xcpu): lm bench runs it here and the built-in engine's profile is fitted from the figures")
	kvLink := fs.String("kv-link", "auto", "link a disaggregated request's KV blocks cross: auto (NVLink inside an H100/A100 pool, PCIe inside others, 400 Gb RDMA between pools) or "+strings.Join(sim.LinkNames(), ", "))
	learnedPath := fs.String("learned-model", "", "the learned policy's classifier (phaselessctl sched train --out); default the shipped one")
	prices := priceFlags(fs)
	cacheFlags := simCacheFlags(fs)
	placeFlags := simPlaceFlags(fs)
	engineFlags := simEngineFlags(fs)
	usage := "sim --trace F --format azure|mooncake | --workload SPEC [--cluster 8xh100[,8xl4]] [--model llama3.1-8b] [--policy all|NAME,...] [--rate-scale X,Y] [--slo-ttft 2s --slo-tpot 100ms] [--json] [--max-rate] [--plot DIR]"
	if done, err := lmParseFlags(fs, cio, args, usage); done || err != nil {
		return err
	}
	sw := &sim.Sweep{Cluster: sim.Config{SLOTTFT: *sloTTFT, SLOTPOT: *sloTPOT, TP: *tp, Prices: sim.Prices{}, ProbeInterval: *probe, MaxConcurrency: *concurrency}}
	c := &sw.Cluster
	if err := cacheFlags(sw); err != nil {
		return err
	}
	if err := placeFlags(sw); err != nil {
		return err
	}
	switch {
	case *trace == "" && *workload == "":
		return &cli.FieldError{Field: "trace", Err: errors.New("required (or --workload)")}
	case *trace != "" && *workload != "":
		return &cli.FieldError{Field: "workload", Err: errors.New("is instead of --trace, not beside it")}
	case *workload != "" && *format != "":
		return &cli.FieldError{Field: "format", Err: errors.New("is --trace's: a --workload has none")}
	case *workload == "" && *format != "azure" && *format != "mooncake":
		return &cli.FieldError{Field: "format", Err: fmt.Errorf("%q is not azure or mooncake", *format)}
	case *sloTTFT <= 0 || *sloTPOT <= 0:
		return &cli.FieldError{Field: "slo-ttft", Err: errors.New("SLOs must be positive")}
	case *concurrency < 0:
		return &cli.FieldError{Field: "max-concurrency", Err: errors.New("must not be negative")}
	case *probe < time.Millisecond:
		return &cli.FieldError{Field: "probe-interval", Err: errors.New("must be ≥ 1ms")}
	}
	var err error
	if c.Pools, c.CycleRoles, err = sim.ParseCluster(*cluster); err != nil {
		return &cli.FieldError{Field: "cluster", Err: err}
	}
	if c.Model, err = sim.LookupModel(*model); err != nil {
		return &cli.FieldError{Field: "model", Err: err}
	}
	if err := engineFlags(c); err != nil {
		return err
	}
	if err := simCPUPools(ctx, cio, c, *cpuModel); err != nil {
		return err
	}
	for _, p := range c.Pools {
		if p.Deployment != nil {
			continue
		}
		if _, err := sim.NewDeployment(p.GPU, c.Model, c.TP, c.Engine); err != nil {
			return &cli.FieldError{Field: "cluster", Err: err}
		}
	}
	if sw.Rates, err = parseRates(*rates); err != nil {
		return &cli.FieldError{Field: "rate-scale", Err: err}
	}
	if *policy == "all" {
		sw.Policies = sched.Names()
	} else {
		for _, p := range strings.Split(*policy, ",") {
			if _, err := sched.ByName(strings.TrimSpace(p), sched.RulesConfig{}); err != nil || p == "" {
				return &cli.FieldError{Field: "policy", Err: fmt.Errorf("%q: not one of all, %s", p, strings.Join(sched.Names(), ", "))}
			}
			sw.Policies = append(sw.Policies, strings.TrimSpace(p))
		}
	}
	for n, v := range prices {
		if !(*v >= 0) {
			return &cli.FieldError{Field: "price-" + n, Err: errors.New("must be ≥ 0")}
		}
		c.Prices[n] = *v
	}
	if *kvLink != "auto" {
		l, err := sim.LookupLink(*kvLink)
		if err != nil {
			return &cli.FieldError{Field: "kv-link", Err: err}
		}
		c.KVLink = &l
	}
	if *learnedPath != "" {
		data, err := os.ReadFile(*learnedPath)
		if err != nil {
			return &cli.FieldError{Field: "learned-model", Err: err}
		}
		if sw.Learned, err = sched.ReadLearned(data); err != nil {
			return &cli.FieldError{Field: "learned-model", Err: err}
		}
	}
	if sw.Trace, err = simRequests(*trace, *format, *workload, *limit); err != nil {
		return err
	}
	if *writeTrace != "" {
		if err := writeSimTrace(*writeTrace, sw.Trace); err != nil {
			return err
		}
	}
	reqs := sw.Trace
	source := *format
	if *workload != "" {
		source = "synthetic"
	}
	sw.KeepOutcomes = *requestsOut != ""
	d := c.Pools[0].Deployment
	if d == nil {
		d, _ = sim.NewDeployment(c.Pools[0].GPU, c.Model, c.TP, c.Engine)
	}
	fmt.Fprintf(cio.Stderr, "simulating %d %s requests (%.0f s of trace) on %s serving %s (TP %d, %d KV tokens and a %d-token step budget per %s worker)\n",
		len(reqs), source, reqs[len(reqs)-1].At.Seconds(), *cluster, c.Model.Name, d.TP, d.KVBlocks*d.Engine.BlockSize, d.Engine.MaxBatchedTokens, c.Pools[0].GPU.Name)
	t0 := time.Now()
	rows, err := sw.All(ctx)
	if err != nil {
		return err
	}
	wall := time.Since(t0)
	var events uint64
	for _, r := range rows {
		events += r.Events
	}
	fmt.Fprintf(cio.Stderr, "%d runs, %d events in %.2f s: %.2f M simulated events/s\n", len(rows), events, wall.Seconds(), float64(events)/wall.Seconds()/1e6)
	if *asJSON {
		enc := json.NewEncoder(cio.Stdout)
		for _, r := range rows {
			if err := enc.Encode(toJSON(r)); err != nil {
				return err
			}
		}
	} else {
		printSim(cio.Stdout, rows)
		printPlacementNotes(cio.Stdout, rows)
		fmt.Fprintf(cio.Stdout, "SLO: TTFT ≤ %v and TPOT ≤ %v. goodput = requests meeting both per second of the run; $/M tok = cluster GPU-hours × price over the output tokens served within the SLOs.\n", c.SLOTTFT, c.SLOTPOT)
	}
	if *requestsOut != "" {
		if err := writeSimRequests(*requestsOut, rows); err != nil {
			return err
		}
	}
	if *maxRate {
		best, err := sw.MaxRates(ctx, 0.9)
		if err != nil {
			return err
		}
		printMaxRate(cio.Stdout, best, sw.Trace)
		at := make([]sim.Summary, len(best))
		for i, b := range best {
			at[i] = b.Summary
		}
		printPlacementNotes(cio.Stdout, at)
	}
	if *plotDir != "" {
		if err := simPlots(ctx, *plotDir, sw, rows); err != nil {
			return err
		}
		fmt.Fprintf(cio.Stderr, "plots written to %s\n", *plotDir)
	}
	return nil
}

// printMaxRate prints each policy's highest sustainable rate and its cost
// per million output tokens there, against round-robin, the best of the
// baselines run (sched.Baselines) and explicit phases, when they ran.
func printMaxRate(w io.Writer, best []sim.Sustained, trace []sim.Request) {
	span := trace[len(trace)-1].At.Seconds()
	rr, base, explicit := -1, -1, -1
	for i, b := range best {
		switch {
		case b.Policy == sched.NameRoundRobin:
			rr = i
		case b.Policy == sched.NameExplicitPhases:
			explicit = i
		}
		if slices.Contains(sched.Baselines(), b.Policy) && (base < 0 || b.Scale > best[base].Scale) {
			base = i
		}
	}
	ratio := func(b sim.Sustained, ref int) string {
		if ref < 0 || best[ref].Scale == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", b.Scale/best[ref].Scale)
	}
	fmt.Fprintln(w, "\nhighest sustainable rate (≥ 90% of requests within both SLOs), and the cost per million output tokens there:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tmax rate×\treq/s\tgoodput req/s\t× round-robin\t× best baseline\t$/M out tok\tvs explicit-phases\tbusy $/M out tok\tvs explicit-phases\t")
	for _, b := range best {
		rps := 0.0
		if span > 0 && b.Scale > 0 {
			rps = float64(len(trace)) / (span / b.Scale)
		}
		cost, vs := costCells(b, best, explicit, func(s *sim.Summary) float64 { return s.CostPerMTok })
		busy, bvs := costCells(b, best, explicit, func(s *sim.Summary) float64 { return s.BusyCostPerMTok })
		fmt.Fprintf(tw, "%s\t%.3g\t%.2f\t%.2f\t%s\t%s\t%s\t%s\t%s\t%s\t\n", b.Policy, b.Scale, rps, b.Summary.GoodputRPS, ratio(b, rr), ratio(b, base), cost, vs, busy, bvs)
	}
	tw.Flush()
	if base >= 0 {
		fmt.Fprintf(w, "best baseline: %s. $/M out tok = the cluster's GPU-hours × price over the output tokens served within the SLOs, at that policy's highest rate; busy $/M out tok counts only the GPU time spent stepping.\n", best[base].Policy)
	}
}

// costCells formats b's cost (by of its summary) and its difference from
// explicit phases' ("-" where either is unknown).
func costCells(b sim.Sustained, best []sim.Sustained, explicit int, by func(*sim.Summary) float64) (cost, vs string) {
	c := by(&b.Summary)
	if b.Scale == 0 || math.IsInf(c, 0) {
		return "-", "-"
	}
	cost, vs = fmt.Sprintf("%.3f", c), "-"
	if explicit >= 0 && best[explicit].Scale > 0 {
		if e := by(&best[explicit].Summary); !math.IsInf(e, 0) && e > 0 {
			vs = fmt.Sprintf("%+.0f%%", 100*(c/e-1))
		}
	}
	return cost, vs
}

// simCPUPools fits the built-in engine's profile for the cluster's cpu
// pools: lm bench on --cpu-model, one thread per engine as phaseless-cloud
// gives its built-in workers, then sim.FitCPU. The cluster then serves that
// model.
func simCPUPools(ctx context.Context, cio cli.IO, c *sim.Config, path string) error {
	cpus, engines := 0, 0
	for _, p := range c.Pools {
		if p.GPU.Name == sim.CPU {
			cpus++
			engines += p.Count
		}
	}
	switch {
	case cpus == 0 && path == "":
		return nil
	case cpus == 0:
		return &cli.FieldError{Field: "cpu-model", Err: errors.New("given, but the cluster has no cpu pool")}
	case path == "":
		return &cli.FieldError{Field: "cpu-model", Err: errors.New("a cpu pool needs the GGUF model its engines run")}
	case cpus < len(c.Pools):
		return &cli.FieldError{Field: "cluster", Err: errors.New("cpu pools serve their own model: do not mix them with GPU pools")}
	}
	m, err := lm.Load(path)
	if err != nil {
		return &cli.FieldError{Field: "cpu-model", Err: err}
	}
	threads := max(1, runtime.GOMAXPROCS(0)/engines)
	fmt.Fprintf(cio.Stderr, "benchmarking %s on %d thread(s) for the cpu profile\n", path, threads)
	const decodeTokens, promptLen = 64, 512
	r, err := lm.Bench(ctx, m, lm.BenchConfig{Batches: []int{1, 16}, DecodeTokens: decodeTokens, PromptLen: promptLen, Threads: threads, CopyBytes: 8 << 20})
	if err != nil {
		return err
	}
	c.Model = sim.ModelFromLM(filepath.Base(path), m.Config)
	d, err := sim.FitCPU(c.Model, sim.CPUBench{Result: r, DecodeTokens: decodeTokens, PromptLen: min(promptLen, m.Config.ContextLen-2)})
	if err != nil {
		return err
	}
	for i := range c.Pools {
		c.Pools[i].Deployment = d
	}
	return nil
}
