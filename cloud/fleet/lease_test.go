package fleet

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/phaseless/phaseless/cloud/admit/redistest"
	"github.com/phaseless/phaseless/cloud/fleet/broker"
)

// TestFleetLeaseSingleWriter runs two fleet managers against one Redis, as
// two cloud processes sharing a fleet would: the second refuses to start
// while the first holds the lease, naming it; when the first loses its
// lease (it expired and the second took it), the first stops sending
// commands and stepping rollouts and says so in its readiness; when the
// first is gone, the second takes over.
func TestFleetLeaseSingleWriter(t *testing.T) {
	url := redistest.Start(t)
	lease := func(name string) *RedisLease { return testLease(t, url, name, 3*time.Second) }
	b := startBroker(t, broker.Config{DevAuth: true})
	shared := t.TempDir() // the fleet store both replicas reach
	clk := &skewClock{}
	la := lease("cloud-a")
	la.now = clk.Now
	a, err := Open(Config{DataDir: shared, Broker: b, Lease: la})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Ready(); err != nil {
		t.Fatalf("holder not ready: %v", err)
	}
	b2 := startBroker(t, broker.Config{DevAuth: true})
	if _, err := Open(Config{DataDir: shared, Broker: b2, Lease: lease("cloud-b")}); !errors.Is(err, ErrLeaseHeld) || !strings.Contains(err.Error(), "cloud-a") {
		t.Fatalf("second manager: %v, want the lease held by cloud-a", err)
	}
	ctx := context.Background()
	if _, err := a.SendCommand(ctx, "car-1", "ping", nil); err != nil {
		t.Fatalf("holder cannot send: %v", err)
	}

	// Renewal puts the full TTL back while the lease is a's.
	rc := redis.NewClient(mustParse(t, url))
	defer rc.Close()
	rc.PExpire(ctx, "phaseless:fleet:lease", 500*time.Millisecond)
	if n, err := a.cfg.Lease.(*RedisLease).renewOnce(); n != 1 || err != nil {
		t.Fatalf("renew: %d %v", n, err)
	}
	if ttl, _ := rc.PTTL(ctx, "phaseless:fleet:lease").Result(); ttl <= time.Second {
		t.Fatalf("lease TTL %v after a renewal, want about 3s", ttl)
	}

	// The lease passes to another holder behind a's back (a was cut off
	// for longer than the TTL): a must stop steering devices.
	if err := rc.Set(ctx, "phaseless:fleet:lease", "othertoken cloud-c", 3*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SendCommand(ctx, "car-1", "ping", nil); !errors.Is(err, ErrNotWriter) {
		t.Fatalf("a sent a command without the lease: %v", err)
	}
	if n, err := a.cfg.Lease.(*RedisLease).renewOnce(); n != 0 || err != nil {
		t.Fatalf("a renewed another holder's lease: %d %v", n, err)
	}
	if _, err := a.SetConfigLayer(ctx, "fleet", ConfigUpdate{Values: map[string]*string{"k": ptr("v")}}); !errors.Is(err, ErrNotWriter) {
		t.Fatalf("a changed config without the lease: %v", err)
	}
	if _, err := a.SetLabels("car-1", map[string]*string{"cohort": ptr("beta")}); !errors.Is(err, ErrNotWriter) {
		t.Fatalf("a changed labels (and so merged config) without the lease: %v", err)
	}
	// The message handlers' re-sends (a device reconnecting or reporting a
	// stale version) check the lease too: at once when a renewal found it
	// taken, and otherwise at the source once the last renewal is older
	// than two thirds of the TTL (within it, no other holder can have
	// taken the key: it had not expired).
	clk.add(3 * time.Second)
	if a.steers() {
		t.Fatal("a steers devices from its handlers without the lease")
	}
	w := httptest.NewRecorder()
	a.Handler().ServeHTTP(w, httptest.NewRequest("POST", "/v1/fleet/devices/car-1/commands", strings.NewReader(`{"name":"ping"}`)))
	if w.Code != 503 || !strings.Contains(w.Body.String(), `"not_fleet_writer"`) {
		t.Fatalf("command without the lease over HTTP: %d %s", w.Code, w.Body)
	}
	if err := a.Ready(); err == nil || !strings.Contains(err.Error(), "cloud-c") {
		t.Fatalf("a's readiness without the lease: %v", err)
	}
	// Closing a does not delete the successor's lease.
	a.Close()
	if v, _ := rc.Get(ctx, "phaseless:fleet:lease").Result(); v != "othertoken cloud-c" {
		t.Fatalf("a's Close removed another holder's lease: %q", v)
	}
	// Once the key is free (cloud-c's lease expired), b starts on the
	// fleet's store and steers; on a store of its own it refuses.
	rc.Del(ctx, "phaseless:fleet:lease")
	if _, err := Open(Config{DataDir: t.TempDir(), Broker: b2, Lease: lease("cloud-b")}); !errors.Is(err, ErrOtherStore) {
		t.Fatalf("a writer on an empty store of its own: %v, want %v", err, ErrOtherStore)
	}
	m, err := Open(Config{DataDir: shared, Broker: b2, Lease: lease("cloud-b")})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.SendCommand(ctx, "car-1", "ping", nil); err != nil {
		t.Fatalf("the new holder cannot send: %v", err)
	}
}

// testLease is a lease on the test's redis-server.
func testLease(t *testing.T, url, name string, ttl time.Duration) *RedisLease {
	t.Helper()
	l, err := NewRedisLease(url, "", name, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func mustParse(t *testing.T, url string) *redis.Options {
	o, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func ptr(s string) *string { return &s }

// skewClock is the wall clock moved on by the test.
type skewClock struct {
	mu sync.Mutex
	d  time.Duration
}

func (c *skewClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.d)
}

func (c *skewClock) add(d time.Duration) {
	c.mu.Lock()
	c.d += d
	c.mu.Unlock()
}

// TestLeaseHeldRecently: the handlers' check needs no Redis round trip
// while the last take or renewal is recent, asks Redis once it is not,
// and knows at once when a renewal found the lease taken.
func TestLeaseHeldRecently(t *testing.T) {
	url := redistest.Start(t)
	l := testLease(t, url, "cloud-a", 15*time.Second)
	clk := &skewClock{}
	l.now = clk.Now
	if err := l.HeldRecently(); !errors.Is(err, errAskRedis) {
		t.Fatalf("before Acquire: %v, want %v", err, errAskRedis)
	}
	ctx := context.Background()
	if err := l.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if err := l.HeldRecently(); err != nil {
		t.Fatalf("just taken: %v", err)
	}
	clk.add(9 * time.Second)
	if err := l.HeldRecently(); err != nil {
		t.Fatalf("9 s into a 15 s lease: %v", err)
	}
	clk.add(2 * time.Second)
	if err := l.HeldRecently(); !errors.Is(err, errAskRedis) {
		t.Fatalf("11 s into a 15 s lease: %v, want %v", err, errAskRedis)
	}
	if err := l.Held(ctx); err != nil {
		t.Fatalf("Redis still has it: %v", err)
	}
	l.mu.Lock()
	l.lost = errors.New("taken over")
	l.mu.Unlock()
	if err := l.HeldRecently(); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("after a renewal found it taken: %v, want %v", err, ErrLeaseLost)
	}
}
