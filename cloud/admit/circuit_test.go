package admit

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/phaseless/phaseless/cloud/admit/redistest"
)

var errDown = &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}

// TestCircuit drives the circuit with a fake clock: three failures open it,
// then nothing reaches Redis until the cool-down ends, one probe goes
// through at a time, and its success closes the circuit.
func TestCircuit(t *testing.T) {
	clock := newFakeClock()
	var transitions []bool
	opt := RedisOptions{OpenFor: 5 * time.Second, Now: clock.Now, OnStateChange: func(open bool, err error) { transitions = append(transitions, open) }}
	opt.fill()
	c := newCircuit(opt)
	ctx := context.Background()
	calls := 0
	call := func(result error) error {
		return c.run(ctx, func(context.Context) error { calls++; return result }, func(error) {})
	}
	// Reply errors and redis.Nil come from a working Redis: they never count.
	for _, err := range []error{redis.Nil, errors.Join(errors.New("wrapped"), redisReply("NOSCRIPT No matching script")), nil} {
		call(err)
		call(errDown)
		call(errDown)
		call(err)
	}
	if c.state() != nil || len(transitions) != 0 {
		t.Fatalf("circuit opened on non-consecutive failures: %v", c.state())
	}
	// A caller that gave up says nothing about Redis.
	gone, cancel := context.WithCancel(ctx)
	cancel()
	for range 5 {
		c.run(gone, func(context.Context) error { return context.Canceled }, func(error) {})
	}
	if c.state() != nil {
		t.Fatal("circuit opened on cancelled callers")
	}

	for range 3 {
		if err := call(errDown); !errors.Is(err, errDown) {
			t.Fatalf("failure passed through as %v", err)
		}
	}
	if !errors.Is(c.state(), ErrStoreUnavailable) {
		t.Fatal("circuit still closed after 3 consecutive failures")
	}
	before := calls
	for range 100 {
		if err := call(nil); !errors.Is(err, ErrStoreUnavailable) {
			t.Fatalf("open circuit let a call through: %v", err)
		}
	}
	clock.Advance(5*time.Second - time.Nanosecond)
	if err := call(nil); !errors.Is(err, ErrStoreUnavailable) || calls != before {
		t.Fatalf("call during the cool-down: %v, %d reached Redis", err, calls-before)
	}

	// After the cool-down: one probe; a concurrent call is refused.
	clock.Advance(time.Nanosecond)
	var inProbe error
	probeErr := c.run(ctx, func(context.Context) error {
		calls++
		inProbe = call(nil)
		return errDown
	}, func(error) {})
	if !errors.Is(probeErr, errDown) || !errors.Is(inProbe, ErrStoreUnavailable) || calls != before+1 {
		t.Fatalf("probe: %v, concurrent call: %v, calls %d", probeErr, inProbe, calls-before)
	}
	// The failed probe re-opens for a full cool-down.
	clock.Advance(4 * time.Second)
	if err := call(nil); !errors.Is(err, ErrStoreUnavailable) {
		t.Fatalf("after a failed probe: %v", err)
	}
	clock.Advance(time.Second)
	if err := call(nil); err != nil {
		t.Fatalf("successful probe: %v", err)
	}
	if c.state() != nil || call(nil) != nil {
		t.Fatal("circuit did not close after a successful probe")
	}
	if len(transitions) != 2 || !transitions[0] || transitions[1] {
		t.Fatalf("transitions %v, want [open close]", transitions)
	}
}

// redisReply is an error reply from the server.
type redisReply string

func (e redisReply) Error() string { return string(e) }
func (redisReply) RedisError()     {}

// TestRedisStoreDeadRedis kills a real redis-server under a RedisStore:
// the first commands fail within OpTimeout, then the circuit answers
// without touching the network, Ready says why, and once Redis is back on
// the same port a probe after the cool-down closes the circuit. Latency is
// logged (the measurement), never asserted.
func TestRedisStoreDeadRedis(t *testing.T) {
	url, kill := redistest.StartKillable(t)
	clock := newFakeClock()
	opened := make(chan error, 1)
	s, err := NewRedisStore(context.Background(), url, "dead:", RedisOptions{Now: clock.Now, OnStateChange: func(open bool, err error) {
		if open {
			opened <- err
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var dials atomic.Int64 // commands that reached go-redis' connection layer
	s.Client().AddHook(commandCounter{&dials})
	ctx := context.Background()
	b := Bucket{Burst: 10, PerSecond: 1}
	if ok, _, err := s.Take(ctx, "k", 1, b, clock.Now()); !ok || err != nil {
		t.Fatalf("take on a live Redis: %v %v", ok, err)
	}
	if err := s.Ready(ctx); err != nil {
		t.Fatalf("ready on a live Redis: %v", err)
	}
	kill()
	start := time.Now()
	for i := range 3 {
		if _, _, err := s.Take(ctx, "k", 1, b, clock.Now()); err == nil || errors.Is(err, ErrStoreUnavailable) {
			t.Fatalf("take %d on a dead Redis: %v", i, err)
		}
	}
	t.Logf("3 takes on a dead Redis before the circuit opened: %v", time.Since(start))
	select {
	case <-opened:
	default:
		t.Fatal("circuit not open after 3 failures")
	}
	dialsBefore := dials.Load()
	start = time.Now()
	for range 1000 {
		if _, _, err := s.Take(ctx, "k", 1, b, clock.Now()); !errors.Is(err, ErrStoreUnavailable) {
			t.Fatalf("take with the circuit open: %v", err)
		}
	}
	t.Logf("1000 takes with the circuit open: %v", time.Since(start))
	if err := s.Ready(ctx); !errors.Is(err, ErrStoreUnavailable) {
		t.Fatalf("ready with a dead Redis: %v", err)
	}
	if n := dials.Load() - dialsBefore; n != 0 {
		t.Fatalf("%d commands reached Redis with the circuit open", n)
	}
	// After the cool-down the next command probes (and fails: still dead).
	clock.Advance(5 * time.Second)
	if _, _, err := s.Take(ctx, "k", 1, b, clock.Now()); err == nil || errors.Is(err, ErrStoreUnavailable) {
		t.Fatalf("probe: %v", err)
	}
	if dials.Load() == dialsBefore {
		t.Fatal("the probe did not reach Redis")
	}
}

// commandCounter counts commands that pass it. Added after the circuit,
// it runs inside it: only commands the circuit lets through reach it.
type commandCounter struct{ n *atomic.Int64 }

func (commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
