package admit

import (
	"context"
	"fmt"
	"sync"

	"github.com/phaseless/phaseless/llm"
)

// FairConfig sizes the fair queue.
type FairConfig struct {
	// Slots is how many requests run at once through this coordinator; more
	// wait in the queue. Default 64.
	Slots int
	// MaxQueue is how many may wait before new ones are refused as
	// overloaded. Default 1024.
	MaxQueue int
	// PromptWeight and OutputWeight weigh the tokens a tenant is charged.
	// Defaults 1 and 2 (the VTC paper's choice: a decode step costs about
	// twice a prefill token of engine time).
	PromptWeight, OutputWeight float64
}

func (c *FairConfig) fill() {
	if c.Slots == 0 {
		c.Slots = 64
	}
	if c.MaxQueue == 0 {
		c.MaxQueue = 1024
	}
	if c.PromptWeight == 0 {
		c.PromptWeight = 1
	}
	if c.OutputWeight == 0 {
		c.OutputWeight = 2
	}
}

// Validate names the first bad field.
func (c *FairConfig) Validate() error {
	switch {
	case c.Slots < 1:
		return fmt.Errorf("admit.FairConfig.Slots: %d must be ≥ 1", c.Slots)
	case c.MaxQueue < 0:
		return fmt.Errorf("admit.FairConfig.MaxQueue: %d must be ≥ 0", c.MaxQueue)
	case c.PromptWeight < 0 || c.OutputWeight < 0:
		return fmt.Errorf("admit.FairConfig.PromptWeight/OutputWeight: must be ≥ 0")
	}
	return nil
}

// Fair is the per-tenant fair queue (Virtual Token Counter, see the package
// doc). While fifo reports true (the circuit breaker is open) it serves
// waiters in arrival order instead.
type Fair struct {
	cfg  FairConfig
	fifo func() bool

	mu       sync.Mutex // guards everything below
	running  int
	waiting  int
	seq      uint64
	counters map[string]float64 // virtual token counter per tenant
	queues   map[string][]*waiter
}

type waiter struct {
	seq    uint64
	ready  chan struct{}
	fn     func(*Ticket) // instead of ready, for Submit
	tenant string
	prompt int
	// granted is set under Fair.mu when a slot was handed over; a waiter
	// that gives up after that must hand the slot back.
	granted bool
}

// NewFair returns a fair queue; fifo (may be nil) switches it to arrival order.
func NewFair(cfg FairConfig, fifo func() bool) (*Fair, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if fifo == nil {
		fifo = func() bool { return false }
	}
	return &Fair{cfg: cfg, fifo: fifo, counters: map[string]float64{}, queues: map[string][]*waiter{}}, nil
}

// Ticket is a running request's slot. Charge output tokens as they stream,
// then Release once.
type Ticket struct {
	f      *Fair
	tenant string
	once   sync.Once
}

// Acquire waits for a slot for tenant and charges promptTokens to it. It
// returns an overloaded *llm.Error when the queue is full, and ctx's error if
// the caller gives up first.
func (f *Fair) Acquire(ctx context.Context, tenant string, promptTokens int) (*Ticket, error) {
	f.mu.Lock()
	if f.running < f.cfg.Slots && f.waiting == 0 {
		f.start(tenant, promptTokens)
		f.mu.Unlock()
		return &Ticket{f: f, tenant: tenant}, nil
	}
	if f.waiting >= f.cfg.MaxQueue {
		f.mu.Unlock()
		return nil, llm.Errorf(llm.CodeOverloaded, "coordinator queue full (%d waiting)", f.cfg.MaxQueue)
	}
	f.seq++
	w := &waiter{seq: f.seq, ready: make(chan struct{}), tenant: tenant, prompt: promptTokens}
	if len(f.queues[tenant]) == 0 {
		f.lift(tenant)
	}
	f.queues[tenant] = append(f.queues[tenant], w)
	f.waiting++
	f.mu.Unlock()

	select {
	case <-w.ready:
		return &Ticket{f: f, tenant: tenant}, nil
	case <-ctx.Done():
		f.mu.Lock()
		if w.granted {
			// The slot arrived as we gave up: pass it on (the prompt charge
			// stays: it was this tenant's turn).
			f.running--
			f.dispatch()
		} else {
			f.remove(w)
		}
		f.mu.Unlock()
		return nil, ctx.Err()
	}
}

// Submit is Acquire without blocking, for callers that run in virtual time
// (cloud/sim): granted is called with the ticket once a slot is free, at
// once when one is, otherwise later from a Ticket's Release, with the queue's
// lock held: it must not call back into the Fair queue. The error is the
// overload Acquire returns when the queue is full.
func (f *Fair) Submit(tenant string, promptTokens int, granted func(*Ticket)) error {
	f.mu.Lock()
	if f.running < f.cfg.Slots && f.waiting == 0 {
		f.start(tenant, promptTokens)
		f.mu.Unlock()
		granted(&Ticket{f: f, tenant: tenant})
		return nil
	}
	if f.waiting >= f.cfg.MaxQueue {
		f.mu.Unlock()
		return llm.Errorf(llm.CodeOverloaded, "coordinator queue full (%d waiting)", f.cfg.MaxQueue)
	}
	f.seq++
	w := &waiter{seq: f.seq, fn: granted, tenant: tenant, prompt: promptTokens}
	if len(f.queues[tenant]) == 0 {
		f.lift(tenant)
	}
	f.queues[tenant] = append(f.queues[tenant], w)
	f.waiting++
	f.mu.Unlock()
	return nil
}

// lift raises a tenant that becomes active to the smallest counter among
// the active ones, so idle time does not bank credit.
func (f *Fair) lift(tenant string) {
	lowest, any := 0.0, false
	for t, q := range f.queues {
		if len(q) > 0 && t != tenant && (!any || f.counters[t] < lowest) {
			lowest, any = f.counters[t], true
		}
	}
	if any && f.counters[tenant] < lowest {
		f.counters[tenant] = lowest
	}
}

func (f *Fair) start(tenant string, promptTokens int) {
	f.running++
	f.charge(tenant, float64(promptTokens)*f.cfg.PromptWeight)
}

func (f *Fair) charge(tenant string, v float64) {
	if _, ok := f.counters[tenant]; !ok && len(f.counters) > 4*f.cfg.MaxQueue+f.cfg.Slots {
		f.forgetIdle()
	}
	f.counters[tenant] += v
}

// forgetIdle drops counters of tenants with nothing queued, bounding the map;
// lift restores fairness when they return.
func (f *Fair) forgetIdle() {
	for t := range f.counters {
		if len(f.queues[t]) == 0 {
			delete(f.counters, t)
		}
	}
}

func (f *Fair) remove(w *waiter) {
	q := f.queues[w.tenant]
	for i, x := range q {
		if x == w {
			f.queues[w.tenant] = append(q[:i:i], q[i+1:]...)
			f.waiting--
			break
		}
	}
	if len(f.queues[w.tenant]) == 0 {
		delete(f.queues, w.tenant)
	}
}

// dispatch hands free slots to waiters: the tenant with the smallest counter
// (ties: the earliest arrival) or, in FIFO mode, the earliest arrival.
func (f *Fair) dispatch() {
	fifo := f.fifo()
	for f.running < f.cfg.Slots && f.waiting > 0 {
		var best *waiter
		bestC := 0.0
		for t, q := range f.queues {
			if len(q) == 0 {
				continue
			}
			c := f.counters[t]
			if best == nil || (fifo && q[0].seq < best.seq) ||
				(!fifo && (c < bestC || (c == bestC && q[0].seq < best.seq))) {
				best, bestC = q[0], c
			}
		}
		f.remove(best)
		best.granted = true
		// Charged at grant, under the lock, so the next pick already sees it.
		f.start(best.tenant, best.prompt)
		if best.fn != nil {
			best.fn(&Ticket{f: f, tenant: best.tenant})
		} else {
			close(best.ready)
		}
	}
}

// Output charges n generated tokens to the ticket's tenant.
func (t *Ticket) Output(n int) {
	t.f.mu.Lock()
	t.f.charge(t.tenant, float64(n)*t.f.cfg.OutputWeight)
	t.f.mu.Unlock()
}

// Release frees the slot; calling it again does nothing.
func (t *Ticket) Release() {
	t.once.Do(func() {
		t.f.mu.Lock()
		t.f.running--
		t.f.dispatch()
		t.f.mu.Unlock()
	})
}

// Stats is the queue's state for metrics.
type FairStats struct {
	Running, Waiting, Tenants int
}

// Stats returns the current occupancy.
func (f *Fair) Stats() FairStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return FairStats{Running: f.running, Waiting: f.waiting, Tenants: len(f.queues)}
}

// Counter returns tenant's virtual token counter (for tests and debugging).
func (f *Fair) Counter(tenant string) float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counters[tenant]
}
