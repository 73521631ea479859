package admit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/admit/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// go-redis logs every failed dial; the unreachable-server test makes
	// several on purpose.
	redis.SetLogger(quietRedis{})
	goleak.VerifyTestMain(m)
}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func stores(t *testing.T) map[string]func(t *testing.T) Store {
	return map[string]func(t *testing.T) Store{
		"memory": func(t *testing.T) Store { return NewMemoryStore() },
		"redis": func(t *testing.T) Store {
			url := redistest.Start(t)
			s, err := NewRedisStore(context.Background(), url, fmt.Sprintf("test%d:", time.Now().UnixNano()), RedisOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
}

// TestStore runs the same contract against both implementations.
func TestStore(t *testing.T) {
	ctx := context.Background()
	for name, mk := range stores(t) {
		t.Run(name, func(t *testing.T) {
			s := mk(t)
			defer s.Close()
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			b := Bucket{Burst: 100, PerSecond: 10}

			ok, rem, err := s.Take(ctx, "k", 60, b, t0)
			if err != nil || !ok || rem != 40 {
				t.Fatalf("first take: ok=%v rem=%d err=%v, want true 40", ok, rem, err)
			}
			if ok, rem, _ = s.Take(ctx, "k", 50, b, t0); ok || rem != 40 {
				t.Fatalf("over budget: ok=%v rem=%d, want false 40", ok, rem)
			}
			// 1.5 s later 15 tokens came back.
			if ok, rem, _ = s.Take(ctx, "k", 50, b, t0.Add(1500*time.Millisecond)); !ok || rem != 5 {
				t.Fatalf("after refill: ok=%v rem=%d, want true 5", ok, rem)
			}
			// A clock that goes backwards (another replica slightly behind) refills nothing.
			if _, rem, _ = s.Take(ctx, "k", 0, b, t0); rem != 5 {
				t.Fatalf("clock went back: rem=%d, want 5", rem)
			}
			// A refund is capped at the burst.
			if _, rem, _ = s.Take(ctx, "k", -1000, b, t0.Add(1500*time.Millisecond)); rem != 100 {
				t.Fatalf("refund: rem=%d, want 100", rem)
			}
			// Keys are independent.
			if _, rem, _ = s.Take(ctx, "other", 1, b, t0); rem != 99 {
				t.Fatalf("other key: rem=%d", rem)
			}

			for i := int64(1); i <= 2; i++ {
				ok, n, err := s.Count(ctx, "u", 2, 10*time.Minute, t0.Add(time.Duration(i)*time.Minute))
				if err != nil || !ok || n != i {
					t.Fatalf("count %d: ok=%v n=%d err=%v", i, ok, n, err)
				}
			}
			if ok, n, _ := s.Count(ctx, "u", 2, 10*time.Minute, t0.Add(9*time.Minute)); ok || n != 2 {
				t.Fatalf("third within window: ok=%v n=%d", ok, n)
			}
			// The window began at the first count (t0+1m) and ends at t0+11m.
			if ok, n, _ := s.Count(ctx, "u", 2, 10*time.Minute, t0.Add(11*time.Minute)); !ok || n != 1 {
				t.Fatalf("after window: ok=%v n=%d", ok, n)
			}
		})
	}
}

// TestStoreAtomic: concurrent takers never overdraw, on either store.
func TestStoreAtomic(t *testing.T) {
	ctx := context.Background()
	for name, mk := range stores(t) {
		t.Run(name, func(t *testing.T) {
			s := mk(t)
			defer s.Close()
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			b := Bucket{Burst: 50, PerSecond: 1}
			var mu sync.Mutex
			granted, counted := 0, 0
			var wg sync.WaitGroup
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 20 {
						ok, _, err := s.Take(ctx, "hot", 1, b, now)
						if err != nil {
							t.Error(err)
							return
						}
						c, _, _ := s.Count(ctx, "hot", 7, time.Minute, now)
						mu.Lock()
						if ok {
							granted++
						}
						if c {
							counted++
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if granted != 50 || counted != 7 {
				t.Fatalf("granted %d tokens (want 50) and %d counts (want 7) from 160 racing calls", granted, counted)
			}
		})
	}
}

func TestRedisStoreUnreachable(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := NewRedisStore(ctx, "redis://"+addr+"/0", "", RedisOptions{}); err == nil {
		t.Fatal("connected to a closed port")
	}
	if _, err := NewRedisStore(ctx, "http://x", "", RedisOptions{}); err == nil {
		t.Fatal("accepted a non-redis URL")
	}
}

func TestMemoryStoreSweepsIdleKeys(t *testing.T) {
	s := NewMemoryStore()
	s.maxKeys = 4
	ctx := context.Background()
	t0 := time.Unix(0, 0)
	b := Bucket{Burst: 10, PerSecond: 10}
	for i := range 4 {
		s.Take(ctx, fmt.Sprint(i), 5, b, t0)
	}
	// Two seconds later all four buckets are full again: carrying no state.
	s.Take(ctx, "new", 5, b, t0.Add(2*time.Second))
	if len(s.buckets) != 1 {
		t.Fatalf("%d buckets kept, want only the new one", len(s.buckets))
	}
	s.Close()
	s.Close()
	if _, _, err := s.Take(ctx, "x", 1, b, t0); !errors.Is(err, ErrClosed) {
		t.Fatalf("take after close: %v", err)
	}
}
