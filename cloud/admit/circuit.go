package admit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrStoreUnavailable is returned, without calling Redis, while the
// RedisStore's circuit is open: Redis failed several times in a row and is
// given a cool-down before it is tried again. Admission fails open on it
// like on any store error.
var ErrStoreUnavailable = errors.New("admit: shared state unreachable (circuit open)")

// RedisOptions bounds what a dead or slow Redis costs a request. The zero
// value means the defaults.
type RedisOptions struct {
	// OpTimeout bounds one Redis command, connecting included. Default
	// 200 ms: the budget scripts answer in well under a millisecond on a
	// healthy Redis, so 200 ms is only reached by a Redis that is gone
	// or stuck, and a request that then proceeds without its budget
	// (fail open) loses 200 ms, not the 1.8 s that go-redis' default
	// retries with backoff cost each request (issue 27, item 10).
	OpTimeout time.Duration
	// FailuresToOpen consecutive failures open the circuit. Default 3.
	FailuresToOpen int
	// OpenFor is the cool-down while the circuit is open: commands fail
	// at once with ErrStoreUnavailable. After it one command at a time
	// probes Redis; its success closes the circuit. Default 5 s.
	OpenFor time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// OnStateChange, if set, is told when the circuit opens (err is the
	// failure that opened it) or closes (err nil), so the caller logs a
	// transition once instead of every failed request.
	OnStateChange func(open bool, err error)
}

func (o *RedisOptions) fill() {
	if o.OpTimeout == 0 {
		o.OpTimeout = 200 * time.Millisecond
	}
	if o.FailuresToOpen == 0 {
		o.FailuresToOpen = 3
	}
	if o.OpenFor == 0 {
		o.OpenFor = 5 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.OnStateChange == nil {
		o.OnStateChange = func(bool, error) {}
	}
}

// Validate names the first bad field.
func (o RedisOptions) Validate() error {
	switch {
	case o.OpTimeout < 0:
		return fmt.Errorf("admit.RedisOptions.OpTimeout: %v must not be negative", o.OpTimeout)
	case o.FailuresToOpen < 0:
		return fmt.Errorf("admit.RedisOptions.FailuresToOpen: %d must not be negative", o.FailuresToOpen)
	case o.OpenFor < 0:
		return fmt.Errorf("admit.RedisOptions.OpenFor: %v must not be negative", o.OpenFor)
	}
	return nil
}

// circuit is a go-redis hook: every command on the store's client (the
// budget scripts and cloud/affinity's directory alike) runs under
// OpTimeout, and after FailuresToOpen consecutive failures none reaches
// Redis for OpenFor.
type circuit struct {
	opt RedisOptions

	mu        sync.Mutex // guards failures, openUntil, probing, lastErr
	failures  int
	openUntil time.Time // zero: closed
	probing   bool      // a half-open probe is in flight
	lastErr   error
}

var _ redis.Hook = (*circuit)(nil)

func newCircuit(opt RedisOptions) *circuit { return &circuit{opt: opt} }

func (c *circuit) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *circuit) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return c.run(ctx, func(ctx context.Context) error { return next(ctx, cmd) }, cmd.SetErr)
	}
}

func (c *circuit) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return c.run(ctx, func(ctx context.Context) error { return next(ctx, cmds) }, func(err error) {
			for _, cmd := range cmds {
				cmd.SetErr(err)
			}
		})
	}
}

// run calls op under the circuit; refused sets the commands' error when
// the circuit refuses the call.
func (c *circuit) run(ctx context.Context, op func(context.Context) error, refused func(error)) error {
	probe, err := c.admit()
	if err != nil {
		refused(err)
		return err
	}
	octx, cancel := context.WithTimeout(ctx, c.opt.OpTimeout)
	err = op(octx)
	cancel()
	c.record(probe, err, ctx.Err() != nil)
	return err
}

// admit reports whether a command may run; probe is true for the single
// command let through after the cool-down.
func (c *circuit) admit() (probe bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.openUntil.IsZero() {
		return false, nil
	}
	if c.probing || c.opt.Now().Before(c.openUntil) {
		return false, fmt.Errorf("%w: %v", ErrStoreUnavailable, c.lastErr)
	}
	c.probing = true
	return true, nil
}

// record counts a command's outcome. A reply error (a script error, a
// missing key) came from a working Redis; a caller that gave up (its own
// context ended) says nothing about Redis either.
func (c *circuit) record(probe bool, err error, callerGone bool) {
	failed := err != nil && !errors.Is(err, redis.Nil) && !isReply(err) && !callerGone
	c.mu.Lock()
	if probe {
		c.probing = false
	}
	var opened, closed bool
	switch {
	case failed:
		c.failures++
		c.lastErr = err
		if probe || (c.openUntil.IsZero() && c.failures >= c.opt.FailuresToOpen) {
			opened = c.openUntil.IsZero()
			c.openUntil = c.opt.Now().Add(c.opt.OpenFor)
		}
	case err == nil || !callerGone:
		closed = !c.openUntil.IsZero()
		c.failures, c.openUntil, c.lastErr = 0, time.Time{}, nil
	}
	c.mu.Unlock()
	if opened {
		c.opt.OnStateChange(true, err)
	}
	if closed {
		c.opt.OnStateChange(false, nil)
	}
}

// isReply reports whether err is an error reply from Redis (the server
// answered), as opposed to a network failure or a timeout.
func isReply(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	// go-redis' own pool and timeout errors are not replies.
	var ne net.Error
	return !errors.As(err, &ne)
}

// state reports nil while the circuit is closed, else why it is open.
func (c *circuit) state() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.openUntil.IsZero() {
		return nil
	}
	return fmt.Errorf("%w: %v", ErrStoreUnavailable, c.lastErr)
}
