package sched

import (
	"sync"
)

// OutputPredictor predicts a request's completion length from max_tokens and
// the tenant's history: clients often ask for far more than they use (the
// Azure code trace generates a median of 8 tokens), and the decode pool is
// for requests that will really generate long. It keeps, per tenant, an
// exponentially weighted mean of the fraction of max_tokens actually used.
type OutputPredictor struct {
	mu      sync.Mutex // guards tenants
	tenants map[string]*usage
	limit   int
}

type usage struct {
	frac float64 // EWMA of completion/max_tokens
	n    int
}

// predictorAlpha weighs the newest observation; 0.2 forgets in ~10 requests,
// quick enough to follow a client that changes workload.
const predictorAlpha = 0.2

// NewOutputPredictor tracks at most maxTenants tenants; when full, the
// table is reset rather than grown (a cold prediction is only max_tokens).
func NewOutputPredictor(maxTenants int) *OutputPredictor {
	if maxTenants < 1 {
		maxTenants = 10000
	}
	return &OutputPredictor{tenants: make(map[string]*usage), limit: maxTenants}
}

// Predict returns the expected completion tokens: max_tokens until the
// tenant has history, then the learned fraction of it (at least 1).
func (p *OutputPredictor) Predict(tenant string, maxTokens int) int {
	p.mu.Lock()
	u := p.tenants[tenant]
	var frac float64 = 1
	if u != nil && u.n >= 3 {
		frac = u.frac
	}
	p.mu.Unlock()
	n := int(frac*float64(maxTokens) + 0.5)
	return min(max(n, 1), max(maxTokens, 1))
}

// Observe records that a request allowed maxTokens generated completion.
func (p *OutputPredictor) Observe(tenant string, maxTokens, completion int) {
	if maxTokens <= 0 {
		return
	}
	f := min(float64(completion)/float64(maxTokens), 1)
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.tenants[tenant]
	if u == nil {
		if len(p.tenants) >= p.limit {
			clear(p.tenants)
		}
		u = &usage{frac: f}
		p.tenants[tenant] = u
	}
	u.frac += predictorAlpha * (f - u.frac)
	u.n++
}
