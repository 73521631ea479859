package sim

import (
	"context"
	"errors"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/phaseless/phaseless/cloud/sched"
)

// Sweep is one trace played through one cluster under several policies and
// arrival-rate scales: the rows of `phaselessctl sim` (All) and each
// policy's highest sustainable rate (MaxRates). Every run builds its own
// policy and cluster, and a run is deterministic, so a sweep runs them in
// parallel and gives the same rows in the same order every time.
type Sweep struct {
	// Cluster is every run's configuration, except Scheduler, which each
	// run sets to its policy name (the Placer builds it with Cluster's SLOs
	// and Learned), and Cache.PinFor, which PinOracle sets. Its Outages
	// are in trace time, scaled with the arrivals.
	Cluster Config
	// Trace is the workload at its own arrival rate; a run at scale x
	// plays it x times as fast (Scale).
	Trace    []Request
	Policies []string  // sched.New names
	Rates    []float64 // rate scales All runs each policy at; MaxRates starts from the first
	// Learned is the learned policy's classifier; nil = the shipped one.
	Learned *sched.LearnedModel
	// PinOracle pins, for Cluster.Cache.TTL, exactly the requests whose
	// follow-up comes within it, knowing the trace's future: a bound on
	// what a follow-up predictor could achieve, not a mechanism.
	PinOracle bool
	// ReportFrom, when positive, summarises only the requests arriving at
	// or after it (trace time), the earlier ones warming the caches and
	// training the follow-up model: a held-out slice. A slice's GPU
	// utilization is then NaN and its busy-time cost +Inf, because the
	// workers' busy time is the whole run's.
	ReportFrom time.Duration
	// KeepOutcomes keeps every run's per-request outcomes in its Summary
	// (phaselessctl sim --requests-out); off, a run's memory goes with it.
	KeepOutcomes bool
}

// Scale returns reqs arriving scale times as fast (2 = twice the rate).
func Scale(reqs []Request, scale float64) []Request {
	out := make([]Request, len(reqs))
	for i, r := range reqs {
		r.At = time.Duration(float64(r.At) / scale)
		out[i] = r
	}
	return out
}

// Run plays the trace at one rate scale under one policy and summarises
// the run under the cluster's SLOs and prices.
func (sw *Sweep) Run(ctx context.Context, policy string, scale float64) (Summary, error) {
	cfg := sw.Cluster
	cfg.fill() // the SLOs the summary judges by are the ones the run had
	cfg.Scheduler, cfg.Policy, cfg.Learned = policy, nil, sw.Learned
	reqs := Scale(sw.Trace, scale)
	cfg.Outages = slices.Clone(cfg.Outages)
	for i := range cfg.Outages {
		o := &cfg.Outages[i]
		o.From, o.To = time.Duration(float64(o.From)/scale), time.Duration(float64(o.To)/scale)
	}
	if sw.PinOracle {
		gaps, ttl := FollowUpGaps(reqs), cfg.Cache.TTL
		cfg.Cache.PinFor = func(i int) time.Duration {
			if gaps[i] > 0 && gaps[i] <= ttl {
				return ttl
			}
			return 0
		}
		cfg.Cache.TTL = 0 // PinFor decides every pin
	}
	c, err := New(cfg)
	if err != nil {
		return Summary{}, err
	}
	res, err := c.Run(ctx, reqs)
	if err != nil {
		return Summary{}, err
	}
	cut := sw.slice(res, scale)
	s := Summarize(res, scale, cfg.SLOTTFT, cfg.SLOTPOT, cfg.Prices)
	if cut {
		// A slice cannot say what the workers' busy time (the whole
		// run's) was spent on: utilization and the busy-time cost would
		// mix the slice with the warm-up before it.
		for i := range s.Pools {
			s.Pools[i].Utilization = math.NaN()
		}
		s.BusyCostPerMTok = math.Inf(1)
	}
	s.Policy = policy
	if sw.KeepOutcomes {
		s.Outcomes = res.Outcomes
		for _, w := range res.Workers {
			s.WorkerNames = append(s.WorkerNames, w.Name)
		}
	}
	return s, nil
}

// slice keeps the outcomes of the requests from ReportFrom on (trace time;
// arrivals are at the rate scale) and makes the run's span the slice's,
// from its first arrival to its last token, so rates and cost are the
// slice's. It reports whether it cut.
func (sw *Sweep) slice(res *Result, scale float64) bool {
	if sw.ReportFrom <= 0 {
		return false
	}
	from := time.Duration(float64(sw.ReportFrom) / scale)
	kept := res.Outcomes[:0:0]
	first, last := time.Duration(-1), time.Duration(0)
	for _, o := range res.Outcomes {
		if o.Arrival >= from {
			kept = append(kept, o)
			if first < 0 || o.Arrival < first {
				first = o.Arrival
			}
			last = max(last, o.Done)
		}
	}
	res.Outcomes, res.Makespan = kept, max(0, last-first)
	return true
}

// All runs every (policy, rate) pair, policies outer, on GOMAXPROCS
// goroutines.
func (sw *Sweep) All(ctx context.Context) ([]Summary, error) {
	type job struct {
		i      int
		policy string
		rate   float64
	}
	var jobs []job
	for _, p := range sw.Policies {
		for _, r := range sw.Rates {
			jobs = append(jobs, job{len(jobs), p, r})
		}
	}
	out := make([]Summary, len(jobs))
	errs := make([]error, len(jobs))
	ch := make(chan job)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				out[j.i], errs[j.i] = sw.Run(ctx, j.policy, j.rate)
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

// MaxRate bisects a policy's highest rate scale at which at least target
// of the requests meet both SLOs (DistServe's per-GPU goodput, here per
// cluster), from start, and returns it with the run's summary there. It
// returns 0 when no rate tried passed, and the highest tried when every
// one did.
func (sw *Sweep) MaxRate(ctx context.Context, policy string, start, target float64) (float64, Summary, error) {
	ok := func(x float64) (bool, Summary, error) {
		s, err := sw.Run(ctx, policy, x)
		return err == nil && s.SLOAttainment >= target, s, err
	}
	lo, hi := 0.0, 0.0
	var best Summary
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

// Sustained is a policy's highest sustainable rate scale (MaxRate) and
// its run's summary there.
type Sustained struct {
	Policy  string
	Scale   float64
	Summary Summary
}

// MaxRates searches every policy's highest sustainable rate from the first
// of Rates, the policies on GOMAXPROCS goroutines (each search is
// sequential), in the order of Policies.
func (sw *Sweep) MaxRates(ctx context.Context, target float64) ([]Sustained, error) {
	if len(sw.Rates) == 0 {
		return nil, errors.New("sim: Sweep.Rates: empty (the search starts from the first)")
	}
	best := make([]Sustained, len(sw.Policies))
	errs := make([]error, len(sw.Policies))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, p := range sw.Policies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			x, s, err := sw.MaxRate(ctx, p, sw.Rates[0], target)
			best[i], errs[i] = Sustained{Policy: p, Scale: x, Summary: s}, err
		}()
	}
	wg.Wait()
	return best, errors.Join(errs...)
}
