package admit

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// BreakerConfig sets when the coordinator stops being clever. DESIGN.md §5:
// "circuit breaker back to plain FIFO when 5xx > 0.5% or p99 jumps 200%".
type BreakerConfig struct {
	// Window is the measurement period. Default 30 s.
	Window time.Duration
	// MinRequests: fewer requests than this in a window decide nothing
	// (0.5% of a handful is noise). Default 200.
	MinRequests int
	// ErrorRate trips the breaker when exceeded by the 5xx share. Default 0.005.
	ErrorRate float64
	// P99Jump trips it when the window's p99 exceeds the baseline p99 by this
	// factor (2.0 = +200%, i.e. three times the baseline). Default 2.0.
	P99Jump float64
	// OpenFor is how long FIFO lasts before the clever path is tried again.
	// Default 60 s.
	OpenFor time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

func (c *BreakerConfig) fill() {
	if c.Window == 0 {
		c.Window = 30 * time.Second
	}
	if c.MinRequests == 0 {
		c.MinRequests = 200
	}
	if c.ErrorRate == 0 {
		c.ErrorRate = 0.005
	}
	if c.P99Jump == 0 {
		c.P99Jump = 2.0
	}
	if c.OpenFor == 0 {
		c.OpenFor = 60 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate names the first bad field.
func (c *BreakerConfig) Validate() error {
	switch {
	case c.Window <= 0:
		return fmt.Errorf("admit.BreakerConfig.Window: %v must be > 0", c.Window)
	case c.MinRequests < 1:
		return fmt.Errorf("admit.BreakerConfig.MinRequests: %d must be ≥ 1", c.MinRequests)
	case !(c.ErrorRate > 0 && c.ErrorRate < 1):
		return fmt.Errorf("admit.BreakerConfig.ErrorRate: %v must be in (0,1)", c.ErrorRate)
	case !(c.P99Jump > 0) || math.IsInf(c.P99Jump, 0):
		return fmt.Errorf("admit.BreakerConfig.P99Jump: %v must be a finite value > 0", c.P99Jump)
	case c.OpenFor <= 0:
		return fmt.Errorf("admit.BreakerConfig.OpenFor: %v must be > 0", c.OpenFor)
	}
	return nil
}

// latBuckets are log-spaced latency buckets (×√2 from 100 µs): p99 within
// ±20% is plenty to see a 3× jump, and recording is one index computation.
const latBuckets = 48

func latBucket(d time.Duration) int {
	us := float64(d) / float64(time.Microsecond)
	if us <= 100 {
		return 0
	}
	i := int(2*math.Log2(us/100)) + 1
	return min(i, latBuckets-1)
}

func bucketUpper(i int) time.Duration {
	return time.Duration(100 * math.Pow(2, float64(i)/2) * float64(time.Microsecond))
}

type window struct {
	start   time.Time
	n, errs int
	hist    [latBuckets]int
}

func (w *window) p99() time.Duration {
	target := int(math.Ceil(0.99 * float64(w.n)))
	seen := 0
	for i, c := range w.hist {
		seen += c
		if seen >= target {
			return bucketUpper(i)
		}
	}
	return bucketUpper(latBuckets - 1)
}

// Breaker watches request outcomes and opens (FIFO mode) when the error
// rate or the p99 latency goes past its limits. Safe for concurrent use.
type Breaker struct {
	cfg BreakerConfig

	mu       sync.Mutex // guards the fields below
	cur      window
	baseline time.Duration // p99 of healthy windows, exponentially averaged
	openedAt time.Time
	open     bool
	trips    int
	reason   string
}

// NewBreaker validates cfg (zero fields take defaults).
func NewBreaker(cfg BreakerConfig) (*Breaker, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := &Breaker{cfg: cfg}
	b.cur.start = cfg.Now()
	return b, nil
}

// Record adds one finished request: whether it failed with a 5xx, and its
// latency (time to first token; total time depends on the output length).
func (b *Breaker) Record(serverError bool, latency time.Duration) {
	now := b.cfg.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(now)
	b.cur.n++
	if serverError {
		b.cur.errs++
	} else {
		b.cur.hist[latBucket(latency)]++
	}
}

// judge decides on a window that has ended: trip, or let it move the
// baseline. Windows, not running totals, are judged so that one early error
// among few requests is not read as a 5xx rate. Called with mu held.
func (b *Breaker) judge(now time.Time) {
	w := &b.cur
	if b.open || w.n < b.cfg.MinRequests {
		return
	}
	rate := float64(w.errs) / float64(w.n)
	if rate > b.cfg.ErrorRate {
		b.trip(now, fmt.Sprintf("5xx rate %.2f%% > %.2f%%", 100*rate, 100*b.cfg.ErrorRate))
		return
	}
	if w.n-w.errs < b.cfg.MinRequests {
		return
	}
	p := w.p99()
	switch {
	case b.baseline == 0:
		b.baseline = p
	case float64(p) > (1+b.cfg.P99Jump)*float64(b.baseline):
		b.trip(now, fmt.Sprintf("p99 %v > %.0f%% over baseline %v", p, 100*b.cfg.P99Jump, b.baseline))
	default:
		// Only healthy windows move the baseline, so a slow drift is
		// followed but a spike is not averaged into "normal".
		b.baseline = time.Duration(0.7*float64(b.baseline) + 0.3*float64(p))
	}
}

func (b *Breaker) trip(now time.Time, reason string) {
	b.open, b.openedAt, b.reason = true, now, reason
	b.trips++
	b.cur = window{start: now}
}

// advance closes windows that have ended. Called with mu held.
func (b *Breaker) advance(now time.Time) {
	if b.open && now.Sub(b.openedAt) >= b.cfg.OpenFor {
		// Half-open: the clever path runs again and the next full window
		// is judged against the old baseline.
		b.open = false
		b.cur = window{start: now}
	}
	if now.Sub(b.cur.start) < b.cfg.Window {
		return
	}
	b.judge(now)
	b.cur = window{start: now}
}

// Open reports whether the coordinator should run plain FIFO now.
func (b *Breaker) Open() bool {
	now := b.cfg.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(now)
	return b.open
}

// BreakerState is the breaker's state for metrics and logs.
type BreakerState struct {
	Open     bool
	Trips    int
	Reason   string // why it last opened
	Baseline time.Duration
}

// State returns the current state.
func (b *Breaker) State() BreakerState {
	now := b.cfg.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(now)
	return BreakerState{Open: b.open, Trips: b.trips, Reason: b.reason, Baseline: b.baseline}
}
