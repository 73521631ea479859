package fleetclient

import (
	"crypto/tls"
	"strings"
	"testing"
	"time"
)

func TestJitteredBackoff(t *testing.T) {
	const lo, hi = 100 * time.Millisecond, 2 * time.Second
	for _, tc := range []struct {
		attempt          int
		rnd              float64
		want             time.Duration
		describeDecision string
	}{
		{0, 0, 0, "right after a drop, no fixed wait"},
		{0, 0.5, 50 * time.Millisecond, "spread within min"},
		{1, 0, 50 * time.Millisecond, "half of min"},
		{1, 1, 100 * time.Millisecond, "all of min"},
		{2, 0, 100 * time.Millisecond, "grows"},
		{3, 1, 400 * time.Millisecond, "doubles"},
		{10, 0, time.Second, "capped: half of max"},
		{60, 1, 2 * time.Second, "capped, no overflow"},
	} {
		b := jitteredBackoff(lo, hi, func() float64 { return tc.rnd })
		if got := b(tc.attempt); got != tc.want {
			t.Errorf("attempt %d rnd %.1f: %v, want %v (%s)", tc.attempt, tc.rnd, got, tc.want, tc.describeDecision)
		}
	}
}

func TestTokenBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := newTokenBucket(100, 10, t0) // 100 records/s, burst 10
	if w := b.reserve(t0, 10); w != 0 {
		t.Fatalf("burst: wait %v", w)
	}
	if w := b.reserve(t0, 10); w != 100*time.Millisecond {
		t.Fatalf("second batch at once: wait %v, want 100ms", w)
	}
	// After waiting as told the balance is back to zero.
	if w := b.reserve(t0.Add(100*time.Millisecond), 5); w != 50*time.Millisecond {
		t.Fatalf("after paying back: wait %v, want 50ms", w)
	}
	// Idle time refills only up to the burst.
	if w := b.reserve(t0.Add(time.Hour), 10); w != 0 {
		t.Fatalf("after idling: wait %v", w)
	}
	if w := b.reserve(t0.Add(time.Hour), 1); w != 10*time.Millisecond {
		t.Fatalf("idle refill exceeded burst: wait %v", w)
	}
	// Draining N records takes (N-burst)/rate in total, whatever the batching.
	b = newTokenBucket(200, 20, t0)
	now, total := t0, time.Duration(0)
	for range 30 { // 600 records in batches of 20
		w := b.reserve(now, 20)
		total += w
		now = now.Add(w)
	}
	if want := time.Duration(float64(600-20) / 200 * float64(time.Second)); total != want {
		t.Fatalf("total wait %v, want %v", total, want)
	}
	if w := newTokenBucket(-1, 1, t0).reserve(t0, 1e6); w != 0 {
		t.Fatalf("unlimited: wait %v", w)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{BrokerURL: "mqtt://127.0.0.1:1883", DeviceID: "d1", StatePath: "/tmp/x"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, tc := range []struct {
		mut   func(*Config)
		field string
	}{
		{func(c *Config) { c.BrokerURL = "" }, "BrokerURL"},
		{func(c *Config) { c.BrokerURL = "http://x:1" }, "BrokerURL"},
		{func(c *Config) { c.BrokerURL = "mqtt://" }, "BrokerURL"},
		{func(c *Config) { c.TLS = new(tls.Config) }, "TLS"},
		{func(c *Config) { c.DeviceID = "a/b" }, "DeviceID"},
		{func(c *Config) { c.Topics.Prefix = "acme" }, "Topics.Prefix"},
		{func(c *Config) { c.StatePath = "" }, "StatePath"},
		{func(c *Config) { c.AckTimeout = -1 }, "AckTimeout"},
		{func(c *Config) { c.KeepAlive = 100000 * time.Second }, "KeepAlive"},
		{func(c *Config) { c.BackoffMin, c.BackoffMax = time.Second, time.Millisecond }, "BackoffMax"},
		{func(c *Config) { c.BatchSize = -1 }, "BatchSize"},
		{func(c *Config) { c.MaxInFlight = -1 }, "MaxInFlight"},
	} {
		c := ok
		tc.mut(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: err = %v", tc.field, err)
		}
		if _, nerr := New(c); nerr == nil {
			t.Errorf("%s: New accepted an invalid config", tc.field)
		}
	}
	tlsOK := ok
	tlsOK.BrokerURL, tlsOK.TLS = "tls://broker:8883", new(tls.Config)
	if err := tlsOK.Validate(); err != nil {
		t.Errorf("tls config: %v", err)
	}
}
