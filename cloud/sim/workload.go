package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Workload is a synthetic trace: arrivals at Rate per second for Duration
// (Poisson, or gamma with coefficient of variation CV for burstier or
// smoother ones), prompt and output lengths drawn from their Lengths, and
// the first PrefixLen tokens of every prompt one of Prefixes shared
// prefixes (a system prompt, tool definitions). A benchmark's "547-token
// prompt of which a 120-token system prompt, 248 output tokens, 8 req/s
// for 600 s" is rate=8,duration=600s,prompt=547,prefix=120,output=248.
type Workload struct {
	Rate     float64 // requests per second (> 0)
	Duration time.Duration
	// Requests, when positive, stops after that many instead of at
	// Duration.
	Requests int
	// Arrival is "poisson" (exponential gaps) or "gamma" (gamma gaps of
	// the same mean with coefficient of variation CV: 1 is Poisson, above
	// it burstier).
	Arrival        string
	CV             float64
	Prompt, Output Length
	// PrefixLen tokens of every prompt are shared (0 = none), spread over
	// Prefixes distinct prefixes (default 1) round-robin; Tenants spreads
	// requests over that many tenants the same way (default 1: one
	// anonymous tenant).
	PrefixLen, Prefixes, Tenants int
	Seed                         uint64
}

// Length is a token-count distribution: Kind "fixed" (A), "uniform"
// (A..B inclusive), "normal" (mean A, standard deviation B) or
// "exponential" (mean A); draws are rounded and at least 1.
type Length struct {
	Kind string
	A, B float64
}

// maxWorkloadTokens bounds a drawn length, as a trace's lengths are.
const maxWorkloadTokens = 1 << 20

func (l Length) draw(rng *rand.Rand) int {
	var v float64
	switch l.Kind {
	case "fixed":
		v = l.A
	case "uniform":
		v = l.A + math.Floor(rng.Float64()*(l.B-l.A+1))
	case "normal":
		v = l.A + l.B*rng.NormFloat64()
	case "exponential":
		v = l.A * rng.ExpFloat64()
	}
	return int(min(maxWorkloadTokens, max(1, math.Round(v))))
}

// ParseLength reads N, uniform:LO:HI, normal:MEAN:SD or exp:MEAN.
func ParseLength(s string) (Length, error) {
	parts := strings.Split(s, ":")
	nums := make([]float64, len(parts)-1)
	for i, p := range parts[1:] {
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || math.IsNaN(v) || v < 0 || v > maxWorkloadTokens {
			return Length{}, fmt.Errorf("length %q: %q is not a token count", s, p)
		}
		nums[i] = v
	}
	bad := fmt.Errorf("length %q: want N, uniform:LO:HI, normal:MEAN:SD or exp:MEAN", s)
	switch {
	case len(parts) == 1:
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > maxWorkloadTokens {
			return Length{}, bad
		}
		return Length{Kind: "fixed", A: float64(v)}, nil
	case parts[0] == "uniform" && len(nums) == 2 && nums[0] >= 1 && nums[1] >= nums[0]:
		return Length{Kind: "uniform", A: nums[0], B: nums[1]}, nil
	case parts[0] == "normal" && len(nums) == 2 && nums[0] >= 1:
		return Length{Kind: "normal", A: nums[0], B: nums[1]}, nil
	case parts[0] == "exp" && len(nums) == 1 && nums[0] >= 1:
		return Length{Kind: "exponential", A: nums[0]}, nil
	}
	return Length{}, bad
}

// ParseWorkload reads a comma-separated KEY=VALUE spec: rate (req/s),
// duration (a Go duration) or requests, prompt and output (ParseLength),
// and optionally prefix (shared tokens), prefixes, tenants, arrival
// (poisson, or gamma:CV) and seed (default 1).
func ParseWorkload(spec string) (Workload, error) {
	w := Workload{Arrival: "poisson", CV: 1, Prefixes: 1, Tenants: 1, Seed: 1}
	seen := map[string]bool{}
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || seen[k] {
			return Workload{}, fmt.Errorf("workload %q: %q is not a new KEY=VALUE", spec, kv)
		}
		seen[k] = true
		var err error
		switch k {
		case "rate":
			w.Rate, err = strconv.ParseFloat(v, 64)
		case "duration":
			w.Duration, err = time.ParseDuration(v)
		case "requests":
			w.Requests, err = strconv.Atoi(v)
		case "prompt":
			w.Prompt, err = ParseLength(v)
		case "output":
			w.Output, err = ParseLength(v)
		case "prefix":
			w.PrefixLen, err = strconv.Atoi(v)
		case "prefixes":
			w.Prefixes, err = strconv.Atoi(v)
		case "tenants":
			w.Tenants, err = strconv.Atoi(v)
		case "seed":
			w.Seed, err = strconv.ParseUint(v, 10, 64)
		case "arrival":
			kind, cv, hasCV := strings.Cut(v, ":")
			w.Arrival = kind
			if hasCV {
				w.CV, err = strconv.ParseFloat(cv, 64)
			}
		default:
			err = errors.New("unknown key (rate, duration, requests, prompt, output, prefix, prefixes, tenants, arrival, seed)")
		}
		if err != nil {
			return Workload{}, fmt.Errorf("workload %q: %s: %w", spec, k, err)
		}
	}
	if !seen["prompt"] || !seen["output"] {
		return Workload{}, fmt.Errorf("workload %q: prompt and output are required", spec)
	}
	return w, w.Validate()
}

// Validate names the first bad field.
func (w *Workload) Validate() error {
	switch {
	case !(w.Rate > 0) || math.IsInf(w.Rate, 0) || w.Rate > 1e6:
		return fmt.Errorf("sim.Workload.Rate: %v is not in (0, 1e6]", w.Rate)
	case w.Duration <= 0 && w.Requests <= 0, w.Duration < 0, w.Requests < 0:
		return errors.New("sim.Workload.Duration/Requests: give a positive duration or request count")
	case w.Requests > 10_000_000 || w.Requests == 0 && w.Rate*w.Duration.Seconds() > 10_000_000:
		return errors.New("sim.Workload: more than 10 million requests")
	case w.Arrival != "poisson" && w.Arrival != "gamma":
		return fmt.Errorf("sim.Workload.Arrival: %q is not poisson or gamma[:CV]", w.Arrival)
	case w.Arrival == "poisson" && w.CV != 1:
		return errors.New("sim.Workload.CV: Poisson arrivals have CV 1 (use gamma:CV)")
	case !(w.CV >= 0.05 && w.CV <= 20):
		return fmt.Errorf("sim.Workload.CV: %v is not in [0.05, 20]", w.CV)
	case w.Prompt.Kind == "" || w.Output.Kind == "":
		return errors.New("sim.Workload.Prompt/Output: required")
	case w.PrefixLen < 0 || w.PrefixLen >= maxWorkloadTokens:
		return fmt.Errorf("sim.Workload.PrefixLen: %d is out of range", w.PrefixLen)
	case w.Prompt.Kind == "fixed" && w.PrefixLen >= int(w.Prompt.A):
		return fmt.Errorf("sim.Workload.PrefixLen: %d leaves nothing of a %g-token prompt its own", w.PrefixLen, w.Prompt.A)
	case w.Prefixes < 1 || w.Prefixes > 1<<20 || w.Tenants < 1 || w.Tenants > 1<<20:
		return errors.New("sim.Workload.Prefixes/Tenants: must be in [1, 2^20]")
	}
	return nil
}

// Generate draws the trace: the same Workload gives the same requests.
// A prompt drawn no longer than the prefix is lengthened to one token past
// it, so every request has a token of its own.
func (w *Workload) Generate() ([]Request, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(w.Seed, 0x776f726b6c6f6164))
	var out []Request
	at := 0.0
	for i := 0; w.Requests > 0 && i < w.Requests || w.Requests <= 0; i++ {
		if i > 0 {
			at += w.gap(rng)
		}
		t := time.Duration(at * 1e9)
		if w.Requests <= 0 && t >= w.Duration {
			break
		}
		r := Request{At: t, Input: w.Prompt.draw(rng), Output: w.Output.draw(rng)}
		if w.PrefixLen > 0 {
			r.PrefixID, r.PrefixLen = i%w.Prefixes, w.PrefixLen
			r.Input = min(maxWorkloadTokens, max(r.Input, w.PrefixLen+1))
		}
		if w.Tenants > 1 {
			r.Tenant = "tenant-" + strconv.Itoa(i%w.Tenants)
		}
		out = append(out, r)
	}
	return out, nil
}

// gap draws the next inter-arrival time in seconds: exponential for
// Poisson; gamma with shape 1/CV² and the same mean otherwise.
func (w *Workload) gap(rng *rand.Rand) float64 {
	mean := 1 / w.Rate
	if w.Arrival == "poisson" {
		return mean * rng.ExpFloat64()
	}
	k := 1 / (w.CV * w.CV)
	return gammaDraw(rng, k) * mean / k
}

// gammaDraw is a Gamma(k, 1) variate by Marsaglia and Tsang's method
// (ACM TOMS 26(3), 2000), boosted for k < 1 by U^(1/k).
func gammaDraw(rng *rand.Rand, k float64) float64 {
	if k < 1 {
		return gammaDraw(rng, k+1) * math.Pow(rng.Float64(), 1/k)
	}
	d := k - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := rng.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}
