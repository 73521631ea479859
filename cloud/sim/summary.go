package sim

import (
	"math"
	"slices"
	"time"
)

// PoolUse is one pool's share of time spent stepping.
type PoolUse struct {
	GPU         string
	GPUs        int
	Utilization float64 // Σ busy time over makespan × workers
}

// Summary is a run's row in the table (and its JSON line).
type Summary struct {
	Policy              string
	RateScale           float64
	Requests, Completed int
	TooLong, Refused    int
	Met                 int // completed within both SLOs
	GoodputRPS          float64
	SLOAttainment       float64 // Met over Requests
	TTFTP50, TTFTP99    time.Duration
	TPOTP50, TPOTP99    time.Duration
	OutputTPS           float64
	PrefixHit           float64 // prompt tokens served from the prefix cache, over prompt tokens
	HostHit             float64 // of them, the share copied back from the host KV tier, over prompt tokens
	CostPerMTok         float64 // $ per million output tokens served within the SLOs; +Inf when none
	// BusyCostPerMTok counts only the GPU time spent stepping (each
	// request's Outcome.Cost, every request's), as a cluster that scales
	// idle GPUs away would pay, over the same tokens; +Inf when none.
	BusyCostPerMTok        float64
	Pools                  []PoolUse
	Makespan               time.Duration
	Events                 uint64
	Preemptions            uint64
	SLOTTFT, SLOTPOT       time.Duration
	PricePerHour           float64
	MetOutput, TotalOutput int
	// TTFT, ITL and E2E are the completed requests' latency
	// distributions as vLLM's benchmark_serving reports them: TTFT and
	// E2E (arrival to last token) one sample per request, ITL every gap
	// between consecutive tokens of every request.
	TTFT, ITL, E2E Dist
	// TTFTs are the completed requests' TTFTs, sorted (for CDFs).
	TTFTs []time.Duration
	// Outcomes and WorkerNames (Outcome.Worker indexes them) are the
	// run's per-request outcomes, kept when Sweep.KeepOutcomes asks.
	Outcomes    []Outcome
	WorkerNames []string
	// Fallbacks are requests a worker refused that the coordinator's
	// fallback ran elsewhere; Failed those it did not (counted in
	// Refused); Lost those whose worker failed after their first token
	// (Outage; not completed, not refused); BreakerTrips how often the circuit breaker opened;
	// GroupJoins and Warmups what semantic grouping and prefetch did
	// (Result's).
	Fallbacks, Failed, Lost, BreakerTrips, GroupJoins, Warmups int
}

// Dist is a latency distribution's mean and nearest-rank percentiles.
type Dist struct {
	Mean, P50, P90, P99 time.Duration
	N                   int
}

// dist sorts d and summarises it.
func dist(d []time.Duration) Dist {
	if len(d) == 0 {
		return Dist{}
	}
	var sum time.Duration
	for _, v := range d {
		sum += v
	}
	slices.Sort(d)
	return Dist{Mean: sum / time.Duration(len(d)), P50: percentile(d, 0.5), P90: percentile(d, 0.9), P99: percentile(d, 0.99), N: len(d)}
}

// Prices maps a GPU name to $ per GPU-hour; a GPU not in it costs its
// profile's PricePerHour.
type Prices map[string]float64

// Summarize computes the metrics of a run under the SLOs.
func Summarize(r *Result, rateScale float64, sloTTFT, sloTPOT time.Duration, prices Prices) Summary {
	s := Summary{Policy: r.Policy, RateScale: rateScale, Requests: len(r.Outcomes), Makespan: r.Makespan, Events: r.Events, SLOTTFT: sloTTFT, SLOTPOT: sloTPOT,
		BreakerTrips: r.BreakerTrips, GroupJoins: r.GroupJoins, Warmups: r.Warmups}
	var ttft, tpot, itl, e2e []time.Duration
	var prompt, cached, host int
	busyCost := 0.0
	for i := range r.Outcomes {
		o := &r.Outcomes[i]
		busyCost += o.Cost
		if o.Fallback {
			s.Fallbacks++
		}
		switch o.Status {
		case StatusOK:
		case StatusTooLong:
			s.TooLong++
			continue
		case StatusFailed:
			s.Failed++
			s.Refused++
			continue
		case StatusLost:
			s.Lost++
			continue
		default:
			s.Refused++
			continue
		}
		s.Completed++
		s.TotalOutput += o.Output
		prompt += o.Prompt
		cached += o.Cached
		host += o.HostCached
		ttft = append(ttft, o.TTFT)
		e2e = append(e2e, o.E2E())
		itl = append(itl, o.ITLs...)
		if o.Output > 1 {
			tpot = append(tpot, o.TPOT)
		}
		if o.TTFT <= sloTTFT && o.TPOT <= sloTPOT {
			s.Met++
			s.MetOutput += o.Output
		}
	}
	s.TTFT, s.ITL, s.E2E = dist(ttft), dist(itl), dist(e2e)
	s.TTFTP50, s.TTFTP99 = s.TTFT.P50, s.TTFT.P99
	s.TTFTs = ttft
	s.TPOTP50, s.TPOTP99 = percentile(tpot, 0.5), percentile(tpot, 0.99)
	if s.Requests > 0 {
		s.SLOAttainment = float64(s.Met) / float64(s.Requests)
	}
	if prompt > 0 {
		s.PrefixHit = float64(cached) / float64(prompt)
		s.HostHit = float64(host) / float64(prompt)
	}
	secs := r.Makespan.Seconds()
	if secs > 0 {
		s.GoodputRPS = float64(s.Met) / secs
		s.OutputTPS = float64(s.TotalOutput) / secs
	}
	busy := make([]time.Duration, len(r.Pools))
	workers := make([]int, len(r.Pools))
	for _, w := range r.Workers {
		busy[w.Pool] += w.Busy
		workers[w.Pool]++
		s.Preemptions += w.Stat.Preemptions
	}
	for i, p := range r.Pools {
		u := PoolUse{GPU: p.GPU.Name, GPUs: p.Count}
		if secs > 0 && workers[i] > 0 {
			u.Utilization = busy[i].Seconds() / (secs * float64(workers[i]))
		}
		s.Pools = append(s.Pools, u)
		price, ok := prices[p.GPU.Name]
		if !ok {
			price = p.GPU.PricePerHour
		}
		s.PricePerHour += price * float64(p.Count)
	}
	s.CostPerMTok, s.BusyCostPerMTok = math.Inf(1), math.Inf(1)
	if s.MetOutput > 0 {
		s.CostPerMTok = s.PricePerHour * secs / 3600 / (float64(s.MetOutput) / 1e6)
		s.BusyCostPerMTok = busyCost / (float64(s.MetOutput) / 1e6)
	}
	return s
}

// percentile is the nearest-rank percentile; 0 for no samples.
func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, max(0, int(math.Ceil(q*float64(len(d))))-1))]
}
