// Package backoff is the reconnect schedule and the injectable clock that
// every long-lived link waits with — the agent's QUIC uplink
// (transport/quic) and its MQTT fleet client (agent/fleetclient) — so both
// spread a fleet's reconnects the same way and tests drive both with one
// fake clock.
package backoff

import (
	"errors"
	"math"
	"math/rand/v2"
	"time"
)

// Policy is the reconnect schedule: the n-th consecutive failure waits a
// random time in [d/2, d] with d = min(Max, Initial·Factor^n). Half-jitter
// keeps a fleet that lost the cloud at the same moment from reconnecting in
// lock-step, while still growing the wait geometrically.
type Policy struct {
	Initial time.Duration // default 250 ms
	Max     time.Duration // default 30 s
	Factor  float64       // default 2
}

// FillDefaults sets the zero fields to their defaults.
func (b *Policy) FillDefaults() {
	if b.Initial == 0 {
		b.Initial = 250 * time.Millisecond
	}
	if b.Max == 0 {
		b.Max = 30 * time.Second
	}
	if b.Factor == 0 {
		b.Factor = 2
	}
}

// Validate names the first bad field.
func (b *Policy) Validate() error {
	switch {
	case b.Initial < 0 || b.Max < 0:
		return errors.New("Backoff.Initial and Backoff.Max must not be negative")
	case b.Max < b.Initial:
		return errors.New("Backoff.Max: must be at least Backoff.Initial")
	case b.Factor < 1:
		return errors.New("Backoff.Factor: must be at least 1")
	}
	return nil
}

// Delay is the wait after the attempt-th consecutive failure (from 0),
// with r drawn uniformly from [0, 1).
func (b *Policy) Delay(attempt int, r float64) time.Duration {
	d := float64(b.Initial) * math.Pow(b.Factor, float64(attempt))
	if d > float64(b.Max) || math.IsInf(d, 0) || math.IsNaN(d) {
		d = float64(b.Max)
	}
	return time.Duration(d/2 + r*d/2)
}

// Clock is the time source of a link's waits; tests pass a fake.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// System is the real clock.
type System struct{}

// Now implements Clock.
func (System) Now() time.Time { return time.Now() }

// After implements Clock.
func (System) After(d time.Duration) <-chan time.Time { return time.After(d) }

var _ Clock = System{}

// Rand is the default jitter source: uniform in [0, 1).
func Rand() float64 { return rand.Float64() }
