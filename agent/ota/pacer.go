package ota

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/phaseless/phaseless/internal/backoff"
)

// pacer caps the bytes per second that update downloads read (fleet
// config key update-bandwidth): a token bucket holding at most one
// second of bytes, filled at the rate and drained by every byte read, so
// over any stretch longer than a second the downloads average at most the
// rate and an update shares a cellular link with inference and telemetry.
type pacer struct {
	clock backoff.Clock

	mu     sync.Mutex // guards rate, tokens, last
	rate   int64      // bytes per second; 0 = no cap
	tokens float64
	last   time.Time
}

// pacedChunk is the most one Read takes at once, so a slow rate still
// moves in small, even steps.
const pacedChunk = 16 << 10

func (p *pacer) setRate(bps int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if bps != p.rate {
		p.rate, p.tokens, p.last = bps, 0, p.clock.Now()
	}
}

// take accounts n bytes just read and waits until the bucket holds them.
func (p *pacer) take(ctx context.Context, n int) error {
	p.mu.Lock()
	if p.rate <= 0 {
		p.mu.Unlock()
		return nil
	}
	now := p.clock.Now()
	p.tokens = min(float64(p.rate), p.tokens+now.Sub(p.last).Seconds()*float64(p.rate))
	p.last = now
	p.tokens -= float64(n)
	var wait time.Duration
	if p.tokens < 0 {
		wait = time.Duration(-p.tokens / float64(p.rate) * float64(time.Second))
	}
	p.mu.Unlock()
	if wait == 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-p.clock.After(wait):
		return nil
	}
}

// reader paces r and counts what it delivers in got.
func (p *pacer) reader(ctx context.Context, r io.Reader, got *atomic.Int64) io.Reader {
	return &pacedReader{ctx: ctx, r: r, p: p, got: got}
}

type pacedReader struct {
	ctx context.Context
	r   io.Reader
	p   *pacer
	got *atomic.Int64
}

func (r *pacedReader) Read(b []byte) (int, error) {
	if len(b) > pacedChunk {
		b = b[:pacedChunk]
	}
	n, err := r.r.Read(b)
	r.got.Add(int64(n))
	if werr := r.p.take(r.ctx, n); werr != nil && err == nil {
		err = werr
	}
	return n, err
}
