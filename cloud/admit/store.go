package admit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// Bucket is a token bucket: it holds at most Burst tokens and refills at
// PerSecond. A full bucket is the state of a key never seen.
type Bucket struct {
	Burst     int64
	PerSecond float64
}

// Validate names the first bad field.
func (b Bucket) Validate() error {
	if b.Burst <= 0 {
		return fmt.Errorf("admit.Bucket.Burst: %d must be > 0", b.Burst)
	}
	if !(b.PerSecond > 0) || math.IsInf(b.PerSecond, 0) {
		return fmt.Errorf("admit.Bucket.PerSecond: %v must be a finite value > 0", b.PerSecond)
	}
	return nil
}

// refillTime is how long an empty bucket takes to fill; after that a stored
// state carries no information and may be dropped.
func (b Bucket) refillTime() time.Duration {
	return time.Duration(float64(b.Burst) / b.PerSecond * float64(time.Second))
}

// Store keeps admission state that several coordinator replicas share. Both
// operations are atomic per key. now is the caller's clock, so every
// replica and every test sees the same arithmetic; replicas need clocks in
// sync to a fraction of the refill period, which NTP gives.
type Store interface {
	// Take removes n tokens from key's bucket if it holds at least n and
	// reports what remains. A negative n returns tokens (a refund), capped
	// at the burst.
	Take(ctx context.Context, key string, n int64, b Bucket, now time.Time) (ok bool, remaining int64, err error)
	// Count adds one to key's counter unless it already reached limit in the
	// window that began with its first counted event; ok is false when the
	// limit was reached. A window that has ended starts afresh.
	Count(ctx context.Context, key string, limit int64, window time.Duration, now time.Time) (ok bool, count int64, err error)
	Close() error
}

var (
	_ Store = (*MemoryStore)(nil)
	_ Store = (*RedisStore)(nil)
)

// ErrClosed is returned by a Store used after Close.
var ErrClosed = errors.New("admit: store closed")

// MemoryStore is the single-process Store.
type MemoryStore struct {
	mu       sync.Mutex // guards buckets, counters, closed
	buckets  map[string]*bucketState
	counters map[string]*counterState
	closed   bool
	// maxKeys bounds each map; past it, states that carry no information
	// (full buckets, ended windows) are swept.
	maxKeys int
}

type bucketState struct {
	tokens float64
	at     time.Time
	b      Bucket
}

type counterState struct {
	n     int64
	start time.Time
	win   time.Duration
}

// NewMemoryStore returns an empty in-memory store.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{buckets: map[string]*bucketState{}, counters: map[string]*counterState{}, maxKeys: 100000}
}

// Take implements Store.
func (m *MemoryStore) Take(_ context.Context, key string, n int64, b Bucket, now time.Time) (bool, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false, 0, ErrClosed
	}
	s := m.buckets[key]
	if s == nil {
		if len(m.buckets) >= m.maxKeys {
			m.sweep(now)
		}
		s = &bucketState{tokens: float64(b.Burst), at: now}
		m.buckets[key] = s
	}
	s.b = b
	if d := now.Sub(s.at); d > 0 {
		s.tokens = math.Min(float64(b.Burst), s.tokens+d.Seconds()*b.PerSecond)
		s.at = now
	}
	ok := float64(n) <= s.tokens
	if ok {
		s.tokens = math.Min(float64(b.Burst), s.tokens-float64(n))
	}
	return ok, int64(math.Floor(s.tokens)), nil
}

// Count implements Store.
func (m *MemoryStore) Count(_ context.Context, key string, limit int64, window time.Duration, now time.Time) (bool, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false, 0, ErrClosed
	}
	c := m.counters[key]
	if c == nil {
		if len(m.counters) >= m.maxKeys {
			m.sweep(now)
		}
		c = &counterState{}
		m.counters[key] = c
	}
	if c.n == 0 || !now.Before(c.start.Add(window)) {
		c.n, c.start = 0, now
	}
	c.win = window
	if c.n >= limit {
		return false, c.n, nil
	}
	c.n++
	return true, c.n, nil
}

func (m *MemoryStore) sweep(now time.Time) {
	for k, s := range m.buckets {
		if now.Sub(s.at) >= s.b.refillTime() {
			delete(m.buckets, k)
		}
	}
	for k, c := range m.counters {
		if !now.Before(c.start.Add(c.win)) {
			delete(m.counters, k)
		}
	}
}

// Close implements Store; it is idempotent.
func (m *MemoryStore) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	return nil
}
