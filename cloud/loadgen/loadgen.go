// Package loadgen drives many concurrent streams at a Phaseless API and
// measures what the serving path adds to each one's time to first token:
// the client's TTFT less the engine's own (the Server-Timing "engine" entry
// a cloud coordinator sends). phaselessctl load runs it against a running
// cloud or agent over HTTP; the coordinator's benchmark runs the same
// schedule in process with a Send of its own.
//
// The schedule is N streams kept open at once: stream i starts at
// i·Ramp/N and then sends its requests back to back, each as soon as the
// previous one ended. Spreading the starts over Ramp is what makes it N
// concurrent streams rather than one burst of N simultaneous arrivals,
// whose last arrival waits for the CPU time of all the others whatever the
// design (see docs/reliability.md, "Load").
package loadgen

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
	"time"
)

// Outcome classifies one request's end.
type Outcome int

const (
	// OK: the stream ran to its end.
	OK Outcome = iota
	// Shed: refused at once with 429 or 503 in the API's own error shape.
	Shed
	// Failed: anything else (an error mid-stream, a malformed refusal, a
	// timeout). A correct server under overload has none.
	Failed
)

// Sample is one request's measurements.
type Sample struct {
	Outcome Outcome
	// Status is the HTTP status (0 in process).
	Status int
	// TTFT is the client's time to first token; EngineTTFT is the engine's
	// own, as the server reported it (0 when it did not).
	TTFT, EngineTTFT time.Duration
	// Err says what went wrong for Failed (and Shed: the refusal's message).
	Err string
}

// Send runs request seq of stream and reports it. It must honour ctx.
type Send func(ctx context.Context, stream, seq int) Sample

// Config is one load run.
type Config struct {
	// Streams is how many streams are open at once. Required.
	Streams int
	// Requests is how many requests each stream sends, back to back.
	// Default 3.
	Requests int
	// Ramp spreads the streams' starts evenly. Default 1 s; 0 is not
	// possible (use a Ramp of 1 ns for one burst).
	Ramp time.Duration
	// Timeout bounds one request; a request past it counts as Failed.
	// Default 60 s.
	Timeout time.Duration
}

func (c *Config) fill() {
	if c.Requests == 0 {
		c.Requests = 3
	}
	if c.Ramp == 0 {
		c.Ramp = time.Second
	}
	if c.Timeout == 0 {
		c.Timeout = 60 * time.Second
	}
}

// Validate names the first bad field.
func (c *Config) Validate() error {
	switch {
	case c.Streams < 1:
		return fmt.Errorf("loadgen.Config.Streams: %d must be ≥ 1", c.Streams)
	case c.Requests < 1:
		return fmt.Errorf("loadgen.Config.Requests: %d must be ≥ 1", c.Requests)
	case c.Ramp < 0:
		return fmt.Errorf("loadgen.Config.Ramp: %v must be ≥ 0", c.Ramp)
	case c.Timeout < 0:
		return fmt.Errorf("loadgen.Config.Timeout: %v must be ≥ 0", c.Timeout)
	}
	return nil
}

// Result is every sample of a run.
type Result struct {
	Streams int
	Samples []Sample
	Elapsed time.Duration
}

// Run sends cfg.Streams × cfg.Requests requests through send on the
// schedule of the package doc and returns every sample. It returns early,
// with what it has, when ctx ends.
func Run(ctx context.Context, cfg Config, send Send) (*Result, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	samples := make([][]Sample, cfg.Streams)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range cfg.Streams {
		at := time.Duration(int64(cfg.Ramp) * int64(i) / int64(cfg.Streams))
		wg.Go(func() {
			t := time.NewTimer(at)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			for seq := range cfg.Requests {
				if ctx.Err() != nil {
					return
				}
				rctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
				s := send(rctx, i, seq)
				if s.Outcome != Failed && rctx.Err() == context.DeadlineExceeded {
					s.Outcome, s.Err = Failed, fmt.Sprintf("no end within %v", cfg.Timeout)
				}
				cancel()
				samples[i] = append(samples[i], s)
			}
		})
	}
	wg.Wait()
	r := &Result{Streams: cfg.Streams, Elapsed: time.Since(start)}
	for _, s := range samples {
		r.Samples = append(r.Samples, s...)
	}
	return r, nil
}

// Count returns how many samples had outcome o.
func (r *Result) Count(o Outcome) int {
	n := 0
	for _, s := range r.Samples {
		if s.Outcome == o {
			n++
		}
	}
	return n
}

// Added returns the added TTFT (client TTFT less engine TTFT) of every OK
// sample whose engine time was reported, sorted.
func (r *Result) Added() []time.Duration {
	var d []time.Duration
	for _, s := range r.Samples {
		if s.Outcome == OK && s.EngineTTFT > 0 {
			d = append(d, s.TTFT-s.EngineTTFT)
		}
	}
	slices.Sort(d)
	return d
}

// TTFTs returns the client TTFT of every OK sample, sorted.
func (r *Result) TTFTs() []time.Duration {
	var d []time.Duration
	for _, s := range r.Samples {
		if s.Outcome == OK {
			d = append(d, s.TTFT)
		}
	}
	slices.Sort(d)
	return d
}

// Percentile returns the p-th percentile (0..100, nearest rank) of sorted
// durations, 0 for none.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// ms formats d in milliseconds with three decimals.
func ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/1e6) }

// WriteText prints the run's summary: outcomes, then the added and client
// TTFT percentiles in milliseconds, then the most frequent failures.
func (r *Result) WriteText(w io.Writer) {
	ok, shed, failed := r.Count(OK), r.Count(Shed), r.Count(Failed)
	fmt.Fprintf(w, "streams %d, requests %d in %.2fs: ok %d, shed %d (429/503), failed %d\n",
		r.Streams, len(r.Samples), r.Elapsed.Seconds(), ok, shed, failed)
	added, ttft := r.Added(), r.TTFTs()
	if len(added) > 0 {
		fmt.Fprintf(w, "added TTFT ms   p50 %s  p95 %s  p99 %s  max %s  (%d samples)\n",
			ms(Percentile(added, 50)), ms(Percentile(added, 95)), ms(Percentile(added, 99)), ms(added[len(added)-1]), len(added))
	} else if ok > 0 {
		fmt.Fprintln(w, "added TTFT: the server reported no engine time (Server-Timing: engine); only client TTFT is known")
	}
	if len(ttft) > 0 {
		fmt.Fprintf(w, "client TTFT ms  p50 %s  p95 %s  p99 %s  max %s\n",
			ms(Percentile(ttft, 50)), ms(Percentile(ttft, 95)), ms(Percentile(ttft, 99)), ms(ttft[len(ttft)-1]))
	}
	byErr := map[string]int{}
	for _, s := range r.Samples {
		if s.Outcome == Failed {
			byErr[s.Err]++
		}
	}
	errs := make([]string, 0, len(byErr))
	for e := range byErr {
		errs = append(errs, e)
	}
	sort.Slice(errs, func(i, j int) bool { return byErr[errs[i]] > byErr[errs[j]] })
	for _, e := range errs[:min(len(errs), 5)] {
		fmt.Fprintf(w, "failed ×%d: %s\n", byErr[e], e)
	}
}
