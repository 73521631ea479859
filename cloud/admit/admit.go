package admit

import (
	"context"
	"fmt"
	"time"

	"github.com/phaseless/phaseless/llm"
)

// Config configures budgets and fallback limits.
type Config struct {
	// Store holds shared state; nil means a new MemoryStore.
	Store Store
	// Budget applies to keys that have none of their own. Default: a burst
	// of 200,000 tokens refilled at 200,000 per minute.
	Budget Bucket
	// FallbackLimit fallbacks per user per FallbackWindow (DESIGN.md §5:
	// at most 2 per 10 minutes).
	FallbackLimit  int64
	FallbackWindow time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// OnStoreError is told when the store fails; admission then fails open
	// (the request runs) because a Redis outage must not take the API down.
	OnStoreError func(error)
}

func (c *Config) fill() {
	if c.Store == nil {
		c.Store = NewMemoryStore()
	}
	if c.Budget == (Bucket{}) {
		c.Budget = Bucket{Burst: 200000, PerSecond: 200000.0 / 60}
	}
	if c.FallbackLimit == 0 {
		c.FallbackLimit = 2
	}
	if c.FallbackWindow == 0 {
		c.FallbackWindow = 10 * time.Minute
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.OnStoreError == nil {
		c.OnStoreError = func(error) {}
	}
}

// Validate names the first bad field.
func (c *Config) Validate() error {
	if err := c.Budget.Validate(); err != nil {
		return fmt.Errorf("admit.Config.Budget: %w", err)
	}
	if c.FallbackLimit < 0 {
		return fmt.Errorf("admit.Config.FallbackLimit: %d must be ≥ 0", c.FallbackLimit)
	}
	if c.FallbackWindow <= 0 {
		return fmt.Errorf("admit.Config.FallbackWindow: %v must be > 0", c.FallbackWindow)
	}
	return nil
}

// Admitter applies token budgets and fallback limits.
type Admitter struct {
	cfg Config
}

// New returns an Admitter; it owns cfg.Store and closes it in Close.
func New(cfg Config) (*Admitter, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Admitter{cfg: cfg}, nil
}

// DefaultBudget is the bucket used for keys without their own.
func (a *Admitter) DefaultBudget() Bucket { return a.cfg.Budget }

// Charge takes cost tokens from key's budget (b zero = the default). It
// returns what remains; over budget it returns a budget_exceeded *llm.Error
// whose RetryAfter says when cost tokens will be there and whose
// BudgetRemaining says what is left (x-burst-budget-remaining).
func (a *Admitter) Charge(ctx context.Context, key string, cost int64, b Bucket) (int64, error) {
	if b == (Bucket{}) {
		b = a.cfg.Budget
	}
	if cost > b.Burst {
		e := llm.Errorf(llm.CodeBudget, "request needs %d tokens, more than the key's whole budget of %d", cost, b.Burst)
		e.BudgetRemaining, e.HasBudget = b.Burst, true
		return b.Burst, e
	}
	ok, remaining, err := a.cfg.Store.Take(ctx, key, cost, b, a.cfg.Now())
	if err != nil {
		a.cfg.OnStoreError(err)
		return b.Burst, nil
	}
	if !ok {
		wait := time.Duration(float64(cost-remaining) / b.PerSecond * float64(time.Second))
		e := llm.Errorf(llm.CodeBudget, "token budget exhausted: %d remaining, request needs %d", remaining, cost)
		e.RetryAfter = wait.Round(time.Second) + time.Second
		e.BudgetRemaining, e.HasBudget = remaining, true
		return remaining, e
	}
	return remaining, nil
}

// Refund returns n unused tokens (the request asked for more than it generated).
func (a *Admitter) Refund(ctx context.Context, key string, n int64, b Bucket) {
	if n <= 0 {
		return
	}
	if b == (Bucket{}) {
		b = a.cfg.Budget
	}
	if _, _, err := a.cfg.Store.Take(ctx, key, -n, b, a.cfg.Now()); err != nil {
		a.cfg.OnStoreError(err)
	}
}

// AllowFallback reports whether user may take one more fallback now, and
// counts it if so.
func (a *Admitter) AllowFallback(ctx context.Context, user string) bool {
	ok, _, err := a.cfg.Store.Count(ctx, "fallback:"+user, a.cfg.FallbackLimit, a.cfg.FallbackWindow, a.cfg.Now())
	if err != nil {
		a.cfg.OnStoreError(err)
		return false // fail closed here: a fallback is an extra, not the request itself
	}
	return ok
}

// Close closes the store.
func (a *Admitter) Close() error { return a.cfg.Store.Close() }
