package backoff

import (
	"testing"
	"time"
)

func TestBackoffDelay(t *testing.T) {
	b := Policy{Initial: 100 * time.Millisecond, Max: 1 * time.Second, Factor: 2}
	for _, c := range []struct {
		attempt int
		r       float64
		want    time.Duration
	}{
		{0, 0, 50 * time.Millisecond},
		{0, 0.999999, 100 * time.Millisecond},
		{1, 0.5, 150 * time.Millisecond},
		{3, 0, 400 * time.Millisecond},
		{4, 0, 500 * time.Millisecond}, // capped at Max before jitter
		{4, 0.999999, time.Second},
		{10000, 0.5, 750 * time.Millisecond}, // no overflow
	} {
		got := b.Delay(c.attempt, c.r)
		if got < c.want-time.Millisecond || got > c.want {
			t.Errorf("delay(%d, %v) = %v, want %v", c.attempt, c.r, got, c.want)
		}
	}
	for _, bad := range []Policy{{Initial: -1}, {Initial: time.Second, Max: time.Millisecond, Factor: 2}, {Initial: 1, Max: 2, Factor: 0.5}} {
		if bad.Validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
