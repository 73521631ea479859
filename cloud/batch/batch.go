package batch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Config tunes a Batcher. The zero value means the defaults.
type Config struct {
	// Window is the longest a request is held back. Default 150 ms (the
	// source articles' batching window).
	Window time.Duration
	// MaxBatch is the most requests released together. Default 16.
	MaxBatch int
	// Bounds are the upper prompt lengths (tokens) of the buckets, ascending;
	// longer prompts go in a last, unbounded bucket. Default 64, 256, 1024, 4096.
	Bounds []int
	// Now and AfterFunc are the clock; defaults time.Now and time.AfterFunc.
	// The GPU simulator (cloud/sim) runs this same batcher in virtual time
	// through them.
	Now       func() time.Time
	AfterFunc func(d time.Duration, f func()) Timer
}

// Timer is what AfterFunc returns; *time.Timer is one.
type Timer interface {
	Reset(d time.Duration) bool
	Stop() bool
}

func (c *Config) fill() {
	if c.Window == 0 {
		c.Window = 150 * time.Millisecond
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = 16
	}
	if c.Bounds == nil {
		c.Bounds = []int{64, 256, 1024, 4096}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.AfterFunc == nil {
		c.AfterFunc = func(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
	}
}

// Validate names the first bad field.
func (c *Config) Validate() error {
	switch {
	case c.Window < 0:
		return fmt.Errorf("batch.Config.Window: %v must be ≥ 0", c.Window)
	case c.MaxBatch < 1:
		return fmt.Errorf("batch.Config.MaxBatch: %d must be ≥ 1", c.MaxBatch)
	}
	for i, b := range c.Bounds {
		if b < 1 || (i > 0 && b <= c.Bounds[i-1]) {
			return fmt.Errorf("batch.Config.Bounds: %v must be positive and ascending", c.Bounds)
		}
	}
	return nil
}

// ErrClosed is returned to waiters when the batcher closes.
var ErrClosed = errors.New("batch: closed")

// Batcher buckets the requests of one worker. Safe for concurrent use.
type Batcher struct {
	cfg  Config
	room func() int // free sequence slots in the engine now

	mu      sync.Mutex // guards buckets, timer, closed, and writes to waiting
	buckets [][]*pending
	// waiting is written under mu and read without it: every placement
	// decision reads it for every worker (Waiting), and taking mu there
	// made decisions queue behind the releases of a busy worker.
	waiting atomic.Int64
	timer   Timer
	closed  bool
}

type pending struct {
	at    time.Time
	ready chan int  // receives the size of the batch it was released in
	fn    func(int) // instead of ready, for Submit
	gone  bool      // the waiter gave up; skip it
}

// deliver hands the waiter its batch size (0: closed).
func (p *pending) deliver(n int) {
	if p.fn != nil {
		p.fn(n)
		return
	}
	p.ready <- n
}

// New returns a Batcher for a worker whose free slots room reports.
func New(cfg Config, room func() int) (*Batcher, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Batcher{cfg: cfg, room: room, buckets: make([][]*pending, len(cfg.Bounds)+1)}, nil
}

func (b *Batcher) bucket(tokens int) int {
	for i, bound := range b.cfg.Bounds {
		if tokens <= bound {
			return i
		}
	}
	return len(b.cfg.Bounds)
}

// Wait blocks until the request may enter the engine and returns the size of
// the batch it was released with (1 when it went straight in).
func (b *Batcher) Wait(ctx context.Context, promptTokens int) (int, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return 0, ErrClosed
	}
	if b.waiting.Load() == 0 && b.room() > 0 {
		b.mu.Unlock()
		return 1, nil
	}
	p := &pending{at: b.cfg.Now(), ready: make(chan int, 1)}
	b.hold(p, promptTokens)
	b.mu.Unlock()

	select {
	case n := <-p.ready:
		if n == 0 {
			return 0, ErrClosed
		}
		return n, nil
	case <-ctx.Done():
		b.mu.Lock()
		select {
		case n := <-p.ready: // released as we gave up: go anyway, the caller sees ctx
			b.mu.Unlock()
			return n, ctx.Err()
		default:
		}
		p.gone = true
		b.waiting.Add(-1)
		b.mu.Unlock()
		return 0, ctx.Err()
	}
}

// hold queues p and lets out what may go. Called with mu held.
func (b *Batcher) hold(p *pending, promptTokens int) {
	i := b.bucket(promptTokens)
	b.buckets[i] = append(b.buckets[i], p)
	b.waiting.Add(1)
	b.release()
}

// Submit is Wait without blocking, for callers that run in virtual time
// (cloud/sim): released is called with the batch size once the request may
// enter the engine (0 if the batcher closed first). It is called at once
// when the engine has room, otherwise later from Kick, the window timer or
// Close, with the batcher's lock held: it must not call back into the
// Batcher.
func (b *Batcher) Submit(promptTokens int, released func(batchSize int)) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		released(0)
		return
	}
	if b.waiting.Load() == 0 && b.room() > 0 {
		b.mu.Unlock()
		released(1)
		return
	}
	b.hold(&pending{at: b.cfg.Now(), fn: released}, promptTokens)
	b.mu.Unlock()
}

// Kick re-evaluates the buckets; the worker calls it when a sequence ends.
func (b *Batcher) Kick() {
	b.mu.Lock()
	b.release()
	b.mu.Unlock()
}

// Waiting is how many requests are held now.
func (b *Batcher) Waiting() int { return int(b.waiting.Load()) }

// release lets out what may go now and arms the timer for the next window
// expiry. Called with mu held.
func (b *Batcher) release() {
	if b.closed {
		return
	}
	now := b.cfg.Now()
	room := b.room()
	// Expired buckets first, whatever the room: the window is a promise.
	for i := range b.buckets {
		b.compact(i)
		for len(b.buckets[i]) > 0 && now.Sub(b.buckets[i][0].at) >= b.cfg.Window {
			room -= b.let(i)
		}
	}
	// Then shortest prompts first while the engine has room.
	for i := 0; i < len(b.buckets) && room > 0; i++ {
		for len(b.buckets[i]) > 0 && room > 0 {
			room -= b.let(i)
		}
	}
	b.arm(now)
}

// compact drops waiters that gave up from the front of bucket i.
func (b *Batcher) compact(i int) {
	q := b.buckets[i]
	for len(q) > 0 && q[0].gone {
		q = q[1:]
	}
	b.buckets[i] = q
}

// let releases up to MaxBatch live waiters from bucket i and returns how many.
func (b *Batcher) let(i int) int {
	q := b.buckets[i]
	batch := make([]*pending, 0, b.cfg.MaxBatch)
	k := 0
	for ; k < len(q) && len(batch) < b.cfg.MaxBatch; k++ {
		if !q[k].gone {
			batch = append(batch, q[k])
		}
	}
	b.buckets[i] = q[k:]
	b.compact(i)
	for _, p := range batch {
		p.deliver(len(batch))
	}
	b.waiting.Add(-int64(len(batch)))
	return len(batch)
}

// arm sets the timer for the oldest remaining waiter's window end.
func (b *Batcher) arm(now time.Time) {
	var oldest time.Time
	for i := range b.buckets {
		if q := b.buckets[i]; len(q) > 0 && (oldest.IsZero() || q[0].at.Before(oldest)) {
			oldest = q[0].at
		}
	}
	if oldest.IsZero() {
		if b.timer != nil {
			b.timer.Stop()
		}
		return
	}
	d := oldest.Add(b.cfg.Window).Sub(now)
	if b.timer == nil {
		b.timer = b.cfg.AfterFunc(d, b.Kick)
	} else {
		b.timer.Reset(d)
	}
}

// Close fails every waiter with ErrClosed and stops the timer. Idempotent.
func (b *Batcher) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	if b.timer != nil {
		b.timer.Stop()
	}
	for i, q := range b.buckets {
		for _, p := range q {
			if !p.gone {
				p.deliver(0)
			}
		}
		b.buckets[i] = nil
	}
	b.waiting.Store(0)
}
