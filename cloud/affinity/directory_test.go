package affinity

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/phaseless/phaseless/cloud/admit/redistest"
)

type clock struct{ t time.Time }

func (c *clock) Now() time.Time { return c.t }

func checkDirectory(t *testing.T, a, b Directory, expire func(time.Duration)) {
	t.Helper()
	ctx := context.Background()
	prompt := []uint64{11, 12, 13, 14, 15}
	if w, n, err := b.Lookup(ctx, prompt); err != nil || n != 0 || w != "" {
		t.Fatalf("empty directory: %q %d %v", w, n, err)
	}
	// A system prompt pinned on w1 (2 blocks), a conversation on w2 (4).
	if err := a.Record(ctx, 12, "w1", time.Hour); err != nil {
		t.Fatal(err)
	}
	a.Record(ctx, 14, "w2", 2*time.Second)
	if w, n, err := b.Lookup(ctx, prompt); err != nil || w != "w2" || n != 4 {
		t.Fatalf("lookup: %q %d %v, want w2 with 4 blocks", w, n, err)
	}
	if w, n, _ := b.Lookup(ctx, []uint64{11, 12, 99}); w != "w1" || n != 2 {
		t.Fatalf("lookup of another turn: %q %d, want w1 with 2 blocks", w, n)
	}
	expire(3 * time.Second)
	if w, n, _ := b.Lookup(ctx, prompt); w != "w1" || n != 2 {
		t.Fatalf("after the conversation's pin ended: %q %d, want w1 with 2", w, n)
	}
}

func TestMemoryDirectory(t *testing.T) {
	clk := &clock{t: time.Now()}
	m := NewMemory(clk.Now)
	checkDirectory(t, m, m, func(d time.Duration) { clk.t = clk.t.Add(d) })
}

// TestRedisDirectorySharedByReplicas: what one replica records, another
// finds, and Redis expires it with the pin.
func TestRedisDirectorySharedByReplicas(t *testing.T) {
	url := redistest.Start(t)
	ctx := context.Background()
	client := func() *redis.Client {
		opt, err := redis.ParseURL(url)
		if err != nil {
			t.Fatal(err)
		}
		c := redis.NewClient(opt)
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b := NewRedis(client(), "test:"), NewRedis(client(), "test:")
	// Redis expires keys on its own clock; fast-forwarding it is not
	// possible, so the short pin is deleted the way expiry removes it.
	checkDirectory(t, a, b, func(time.Duration) { a.client.Del(ctx, a.key(14)) })
	if ttl := a.client.PTTL(ctx, a.key(12)).Val(); ttl <= 0 || ttl > time.Hour {
		t.Fatalf("pin key expires in %v, want within the pin's hour", ttl)
	}
}
