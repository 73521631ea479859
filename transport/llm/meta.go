package llm

import (
	"context"
	"sync"
)

// Meta is response metadata decided before the first token — where the
// request runs, the scheduler's hint, why a fallback happened — travelling
// back up to the API layer, which writes it as response headers (or a QUIC
// meta frame) before the first byte of the body. Generators set it; the
// layer that owns the response reads it.
type Meta struct {
	mu              sync.Mutex // guards the fields below
	route           string
	schedulerHint   string
	fallbackReason  string
	budgetRemaining int64
	hasBudget       bool
}

type metaKey struct{}

// WithMeta returns a context carrying a fresh Meta, and that Meta.
func WithMeta(ctx context.Context) (context.Context, *Meta) {
	m := &Meta{}
	return context.WithValue(ctx, metaKey{}, m), m
}

// MetaFrom returns the Meta in ctx, or nil. Every method is safe on nil, so a
// generator can set metadata without caring whether anyone reads it.
func MetaFrom(ctx context.Context) *Meta {
	m, _ := ctx.Value(metaKey{}).(*Meta)
	return m
}

// SetRoute records where the request runs (local, cloud, cloud/<pool>/<worker>).
func (m *Meta) SetRoute(r string) {
	if m != nil {
		m.mu.Lock()
		m.route = r
		m.mu.Unlock()
	}
}

// SetSchedulerHint records the base32 scheduler vector.
func (m *Meta) SetSchedulerHint(h string) {
	if m != nil {
		m.mu.Lock()
		m.schedulerHint = h
		m.mu.Unlock()
	}
}

// SetFallbackReason records why the request did not run where first chosen.
func (m *Meta) SetFallbackReason(r string) {
	if m != nil {
		m.mu.Lock()
		m.fallbackReason = r
		m.mu.Unlock()
	}
}

// SetBudgetRemaining records the caller's remaining burst budget in tokens.
func (m *Meta) SetBudgetRemaining(n int64) {
	if m != nil {
		m.mu.Lock()
		m.budgetRemaining, m.hasBudget = n, true
		m.mu.Unlock()
	}
}

// MetaSnapshot is a copy of a Meta's fields.
type MetaSnapshot struct {
	Route, SchedulerHint, FallbackReason string
	BudgetRemaining                      int64
	HasBudget                            bool
}

// Snapshot returns the current values; the zero snapshot for a nil Meta.
func (m *Meta) Snapshot() MetaSnapshot {
	if m == nil {
		return MetaSnapshot{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return MetaSnapshot{m.route, m.schedulerHint, m.fallbackReason, m.budgetRemaining, m.hasBudget}
}
