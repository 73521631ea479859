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
	"sync"
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

// simOptions is one sim invocation's parsed flags.
type simOptions struct {
	pools            []sim.Pool
	cycle            bool
	model            sim.Model
	tp               int
	engine           sim.EngineConfig
	policies         []string
	rates            []float64
	sloTTFT, sloTPOT time.Duration
	prices           sim.Prices
	probe            time.Duration
	reqs             []replay.TraceRequest
	link             *sim.Link           // --kv-link; nil = by pools
	learned          *sched.LearnedModel // --learned-model; nil = the shipped one
	cache            simCache            // prompt caching (sim_cache.go)
}

// simRequests turns a trace into simulator requests at a rate scale.
func simRequests(reqs []replay.TraceRequest, scale float64) []sim.Request {
	out := make([]sim.Request, len(reqs))
	for i, r := range reqs {
		out[i] = sim.Request{At: time.Duration(float64(r.At) / scale), Input: r.Input, Output: r.Output, Blocks: r.Blocks}
	}
	return out
}

// simRun runs one policy at one rate scale.
func simRun(ctx context.Context, o *simOptions, policy string, scale float64) (sim.Summary, error) {
	p, err := sched.New(policy, sched.Options{SLOTTFT: o.sloTTFT, SLOTPOT: o.sloTPOT, Learned: o.learned})
	if err != nil {
		return sim.Summary{}, err
	}
	if p, err = o.cache.wrap(p); err != nil {
		return sim.Summary{}, err
	}
	reqs := simRequests(o.reqs, scale)
	c, err := sim.New(sim.Config{Pools: o.pools, CycleRoles: o.cycle, Model: o.model, TP: o.tp, Engine: o.engine,
		Policy: p, SLOTTFT: o.sloTTFT, SLOTPOT: o.sloTPOT, ProbeInterval: o.probe, KVLink: o.link, Prices: o.prices, Cache: o.cache.forTrace(reqs)})
	if err != nil {
		return sim.Summary{}, err
	}
	res, err := c.Run(ctx, reqs)
	if err != nil {
		return sim.Summary{}, err
	}
	cut := o.cache.slice(res, scale)
	s := sim.Summarize(res, scale, o.sloTTFT, o.sloTPOT, o.prices)
	if cut {
		sliced(&s)
	}
	s.Policy = policy
	return s, nil
}

// simAll runs every (policy, rate) pair on GOMAXPROCS goroutines; each run
// is independent and deterministic, so the order of the rows is too.
func simAll(ctx context.Context, o *simOptions) ([]sim.Summary, error) {
	type job struct {
		i      int
		policy string
		rate   float64
	}
	var jobs []job
	for _, p := range o.policies {
		for _, r := range o.rates {
			jobs = append(jobs, job{len(jobs), p, r})
		}
	}
	out := make([]sim.Summary, len(jobs))
	errs := make([]error, len(jobs))
	ch := make(chan job)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				out[j.i], errs[j.i] = simRun(ctx, o, j.policy, j.rate)
			}
		}()
	}
	for _, j := range jobs {
		ch <- j
	}
	close(ch)
	wg.Wait()
	return out, errors.Join(errs...)
}

// simMaxRate bisects a policy's highest rate scale at which at least target
// of the requests meet both SLOs (DistServe's per-GPU goodput, here per
// cluster).
func simMaxRate(ctx context.Context, o *simOptions, policy string, start, target float64) (float64, sim.Summary, error) {
	ok := func(x float64) (bool, sim.Summary, error) {
		s, err := simRun(ctx, o, policy, x)
		return err == nil && s.SLOAttainment >= target, s, err
	}
	lo, hi := 0.0, 0.0
	var best sim.Summary
	x := start
	for range 12 { // bracket: double while it holds, halve while it fails
		pass, s, err := ok(x)
		if err != nil {
			return 0, best, err
		}
		if pass {
			lo, best = x, s
			if hi > 0 {
				break
			}
			x *= 2
		} else {
			hi = x
			if lo > 0 {
				break
			}
			x /= 2
		}
	}
	if lo == 0 || hi == 0 {
		return lo, best, nil // never passed, or passed at every rate tried
	}
	for range 7 {
		mid := (lo + hi) / 2
		pass, s, err := ok(mid)
		if err != nil {
			return 0, best, err
		}
		if pass {
			lo, best = mid, s
		} else {
			hi = mid
		}
	}
	return lo, best, nil
}

// simJSON is one --json line; the field names are the contract.
type simJSON struct {
	Policy        string  `json:"policy"`
	RateScale     float64 `json:"rate_scale"`
	Requests      int     `json:"requests"`
	GoodputRPS    float64 `json:"goodput_rps"`
	SLOAttainment float64 `json:"slo_attainment"`
	TTFTP50       float64 `json:"ttft_p50_ms"`
	TTFTP99       float64 `json:"ttft_p99_ms"`
	TPOTP50       float64 `json:"tpot_p50_ms"`
	TPOTP99       float64 `json:"tpot_p99_ms"`
	OutputTPS     float64 `json:"output_tps"`
	PrefixHit     float64 `json:"prefix_hit"`
	HostHit       float64 `json:"host_hit,omitempty"` // with --host-kv: the prefix-hit share the host tier served
	CostPerMTok   float64 `json:"cost_per_mtok"`      // -1 when nothing met the SLOs
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

func toJSON(s sim.Summary) simJSON {
	cost := s.CostPerMTok
	if math.IsInf(cost, 0) {
		cost = -1
	}
	return simJSON{Policy: s.Policy, RateScale: s.RateScale, Requests: s.Requests, GoodputRPS: s.GoodputRPS, SLOAttainment: s.SLOAttainment,
		TTFTP50: ms(s.TTFTP50), TTFTP99: ms(s.TTFTP99), TPOTP50: ms(s.TPOTP50), TPOTP99: ms(s.TPOTP99),
		OutputTPS: s.OutputTPS, PrefixHit: s.PrefixHit, HostHit: s.HostHit, CostPerMTok: cost}
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
	cluster := fs.String("cluster", "8xh100", "GPU pools: COUNTxGPU[:ROLE],... (GPUs: "+strings.Join(sim.GPUNames(), ", ")+")")
	model := fs.String("model", "llama3.1-8b", "model profile: "+strings.Join(sim.ModelNames(), ", "))
	tp := fs.Int("tp", 0, "GPUs per worker (tensor parallelism); 0 = the fewest that fit")
	policy := fs.String("policy", "all", "all, or a comma-separated list of: "+strings.Join(sched.Names(), ", "))
	rates := fs.String("rate-scale", "1", "comma-separated arrival-rate multipliers (2 = twice the trace's rate)")
	sloTTFT := fs.Duration("slo-ttft", 2*time.Second, "SLO: time to first token")
	sloTPOT := fs.Duration("slo-tpot", 100*time.Millisecond, "SLO: mean time per output token after the first")
	asJSON := fs.Bool("json", false, "one JSON object per line instead of the table")
	maxRate := fs.Bool("max-rate", false, "search each policy's highest rate scale with ≥ 90% SLO attainment")
	plotDir := fs.String("plot", "", "write PNG plots (SLO attainment against rate; TTFT CDF) to this directory")
	probe := fs.Duration("probe-interval", 500*time.Millisecond, "how often worker load (queues, KV usage, preemptions) is re-read, as phaseless-cloud probes its workers")
	cpuModel := fs.String("cpu-model", "", "GGUF model for cpu pools (--cluster 2xcpu): lm bench runs it here and the built-in engine's profile is fitted from the figures")
	kvLink := fs.String("kv-link", "auto", "link a disaggregated request's KV blocks cross: auto (NVLink inside an H100/A100 pool, PCIe inside others, 400 Gb RDMA between pools) or "+strings.Join(sim.LinkNames(), ", "))
	learnedPath := fs.String("learned-model", "", "the learned policy's classifier (phaselessctl sched train --out); default the shipped one")
	prices := priceFlags(fs)
	cacheFlags := simCacheFlags(fs)
	usage := "sim --trace F --format azure|mooncake [--cluster 8xh100[,8xl4]] [--model llama3.1-8b] [--policy all|NAME,...] [--rate-scale X,Y] [--slo-ttft 2s --slo-tpot 100ms] [--json] [--max-rate] [--plot DIR]"
	if done, err := lmParseFlags(fs, cio, args, usage); done || err != nil {
		return err
	}
	o := &simOptions{sloTTFT: *sloTTFT, sloTPOT: *sloTPOT, tp: *tp, prices: sim.Prices{}, probe: *probe}
	var err error
	if o.cache, err = cacheFlags(); err != nil {
		return err
	}
	switch {
	case *trace == "":
		return &cli.FieldError{Field: "trace", Err: errors.New("required")}
	case *format != "azure" && *format != "mooncake":
		return &cli.FieldError{Field: "format", Err: fmt.Errorf("%q is not azure or mooncake", *format)}
	case *sloTTFT <= 0 || *sloTPOT <= 0:
		return &cli.FieldError{Field: "slo-ttft", Err: errors.New("SLOs must be positive")}
	case *probe < time.Millisecond:
		return &cli.FieldError{Field: "probe-interval", Err: errors.New("must be ≥ 1ms")}
	}
	if o.pools, o.cycle, err = sim.ParseCluster(*cluster); err != nil {
		return &cli.FieldError{Field: "cluster", Err: err}
	}
	if o.model, err = sim.LookupModel(*model); err != nil {
		return &cli.FieldError{Field: "model", Err: err}
	}
	if err := simCPUPools(ctx, cio, o, *cpuModel); err != nil {
		return err
	}
	for _, p := range o.pools {
		if p.Deployment != nil {
			continue
		}
		if _, err := sim.NewDeployment(p.GPU, o.model, o.tp, o.engine); err != nil {
			return &cli.FieldError{Field: "cluster", Err: err}
		}
	}
	if o.rates, err = parseRates(*rates); err != nil {
		return &cli.FieldError{Field: "rate-scale", Err: err}
	}
	if *policy == "all" {
		o.policies = sched.Names()
	} else {
		for _, p := range strings.Split(*policy, ",") {
			if _, err := sched.ByName(strings.TrimSpace(p), sched.RulesConfig{}); err != nil || p == "" {
				return &cli.FieldError{Field: "policy", Err: fmt.Errorf("%q: not one of all, %s", p, strings.Join(sched.Names(), ", "))}
			}
			o.policies = append(o.policies, strings.TrimSpace(p))
		}
	}
	for n, v := range prices {
		if !(*v >= 0) {
			return &cli.FieldError{Field: "price-" + n, Err: errors.New("must be ≥ 0")}
		}
		o.prices[n] = *v
	}
	if *kvLink != "auto" {
		l, err := sim.LookupLink(*kvLink)
		if err != nil {
			return &cli.FieldError{Field: "kv-link", Err: err}
		}
		o.link = &l
	}
	if *learnedPath != "" {
		data, err := os.ReadFile(*learnedPath)
		if err != nil {
			return &cli.FieldError{Field: "learned-model", Err: err}
		}
		if o.learned, err = sched.ReadLearned(data); err != nil {
			return &cli.FieldError{Field: "learned-model", Err: err}
		}
	}
	if o.reqs, err = replay.ReadTrace(*trace, *format, *limit); err != nil {
		return err
	}
	d := o.pools[0].Deployment
	if d == nil {
		d, _ = sim.NewDeployment(o.pools[0].GPU, o.model, o.tp, o.engine)
	}
	fmt.Fprintf(cio.Stderr, "simulating %d %s requests (%.0f s of trace) on %s serving %s (TP %d, %d KV tokens and a %d-token step budget per %s worker)\n",
		len(o.reqs), *format, o.reqs[len(o.reqs)-1].At.Seconds(), *cluster, o.model.Name, d.TP, d.KVBlocks*d.Engine.BlockSize, d.Engine.MaxBatchedTokens, o.pools[0].GPU.Name)
	t0 := time.Now()
	rows, err := simAll(ctx, o)
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
		fmt.Fprintf(cio.Stdout, "SLO: TTFT ≤ %v and TPOT ≤ %v. goodput = requests meeting both per second of the run; $/M tok = cluster GPU-hours × price over the output tokens served within the SLOs.\n", o.sloTTFT, o.sloTPOT)
	}
	if *maxRate {
		best, err := simMaxRates(ctx, o)
		if err != nil {
			return err
		}
		printMaxRate(cio.Stdout, best, o)
	}
	if *plotDir != "" {
		if err := simPlots(ctx, *plotDir, o, rows); err != nil {
			return err
		}
		fmt.Fprintf(cio.Stderr, "plots written to %s\n", *plotDir)
	}
	return nil
}

type simBest struct {
	policy  string
	scale   float64
	summary sim.Summary
}

// simMaxRates searches every policy's highest sustainable rate, the
// policies on GOMAXPROCS goroutines (each search is sequential).
func simMaxRates(ctx context.Context, o *simOptions) ([]simBest, error) {
	best := make([]simBest, len(o.policies))
	errs := make([]error, len(o.policies))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, p := range o.policies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			x, s, err := simMaxRate(ctx, o, p, o.rates[0], 0.9)
			best[i], errs[i] = simBest{policy: p, scale: x, summary: s}, err
		}()
	}
	wg.Wait()
	return best, errors.Join(errs...)
}

// printMaxRate prints each policy's highest sustainable rate and its cost
// per million output tokens there, against round-robin, the best of the
// baselines run (sched.Baselines) and explicit phases, when they ran.
func printMaxRate(w io.Writer, best []simBest, o *simOptions) {
	span := o.reqs[len(o.reqs)-1].At.Seconds()
	rr, base, explicit := -1, -1, -1
	for i, b := range best {
		switch {
		case b.policy == sched.NameRoundRobin:
			rr = i
		case b.policy == sched.NameExplicitPhases:
			explicit = i
		}
		if slices.Contains(sched.Baselines(), b.policy) && (base < 0 || b.scale > best[base].scale) {
			base = i
		}
	}
	ratio := func(b simBest, ref int) string {
		if ref < 0 || best[ref].scale == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", b.scale/best[ref].scale)
	}
	fmt.Fprintln(w, "\nhighest sustainable rate (≥ 90% of requests within both SLOs), and the cost per million output tokens there:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tmax rate×\treq/s\tgoodput req/s\t× round-robin\t× best baseline\t$/M out tok\tvs explicit-phases\tbusy $/M out tok\tvs explicit-phases\t")
	for _, b := range best {
		rps := 0.0
		if span > 0 && b.scale > 0 {
			rps = float64(len(o.reqs)) / (span / b.scale)
		}
		cost, vs := costCells(b, best, explicit, func(s *sim.Summary) float64 { return s.CostPerMTok })
		busy, bvs := costCells(b, best, explicit, func(s *sim.Summary) float64 { return s.BusyCostPerMTok })
		fmt.Fprintf(tw, "%s\t%.3g\t%.2f\t%.2f\t%s\t%s\t%s\t%s\t%s\t%s\t\n", b.policy, b.scale, rps, b.summary.GoodputRPS, ratio(b, rr), ratio(b, base), cost, vs, busy, bvs)
	}
	tw.Flush()
	if base >= 0 {
		fmt.Fprintf(w, "best baseline: %s. $/M out tok = the cluster's GPU-hours × price over the output tokens served within the SLOs, at that policy's highest rate; busy $/M out tok counts only the GPU time spent stepping.\n", best[base].policy)
	}
}

// costCells formats b's cost (by of its summary) and its difference from
// explicit phases' ("-" where either is unknown).
func costCells(b simBest, best []simBest, explicit int, by func(*sim.Summary) float64) (cost, vs string) {
	c := by(&b.summary)
	if b.scale == 0 || math.IsInf(c, 0) {
		return "-", "-"
	}
	cost, vs = fmt.Sprintf("%.3f", c), "-"
	if explicit >= 0 && best[explicit].scale > 0 {
		if e := by(&best[explicit].summary); !math.IsInf(e, 0) && e > 0 {
			vs = fmt.Sprintf("%+.0f%%", 100*(c/e-1))
		}
	}
	return cost, vs
}

// simCPUPools fits the built-in engine's profile for the cluster's cpu
// pools: lm bench on --cpu-model, one thread per engine as phaseless-cloud
// gives its built-in workers, then sim.FitCPU. The cluster then serves that
// model.
func simCPUPools(ctx context.Context, cio cli.IO, o *simOptions, path string) error {
	cpus, engines := 0, 0
	for _, p := range o.pools {
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
	case cpus < len(o.pools):
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
	o.model = sim.ModelFromLM(filepath.Base(path), m.Config)
	d, err := sim.FitCPU(o.model, sim.CPUBench{Result: r, DecodeTokens: decodeTokens, PromptLen: min(promptLen, m.Config.ContextLen-2)})
	if err != nil {
		return err
	}
	for i := range o.pools {
		o.pools[i].Deployment = d
	}
	return nil
}
