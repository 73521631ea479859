package fleetclient

import (
	"time"

	"github.com/phaseless/phaseless/internal/backoff"
)

// Clock is the time source the client paces itself with; tests inject a
// fake one. (autopaho's own reconnect timer is not injectable; the backoff
// function it calls is.)
type Clock = backoff.Clock

// jitteredBackoff returns autopaho's ReconnectBackoff: attempt 0 (right
// after a connection drops) waits a random fraction of min, so a fleet
// that lost its broker does not reconnect in one burst; attempt n waits the
// uplink's schedule after n-1 failures (package backoff: between half and
// all of min·2^(n-1), capped at max), so both links spread out alike.
func jitteredBackoff(minDelay, maxDelay time.Duration, rnd func() float64) func(int) time.Duration {
	p := backoff.Policy{Initial: minDelay, Max: maxDelay, Factor: 2}
	return func(attempt int) time.Duration {
		if attempt <= 0 {
			return time.Duration(rnd() * float64(minDelay))
		}
		return p.Delay(attempt-1, rnd())
	}
}

// tokenBucket limits the telemetry uplink in records per second, so a long
// offline backlog drains at a bounded rate instead of saturating the link
// that inference traffic and fleet commands share. Not safe for concurrent
// use: the uplink loop owns it.
type tokenBucket struct {
	rate   float64 // records per second; <= 0 means unlimited
	burst  float64 // most records that may go at once
	tokens float64
	last   time.Time
}

func newTokenBucket(rate float64, burst int, now time.Time) *tokenBucket {
	return &tokenBucket{rate: rate, burst: float64(burst), tokens: float64(burst), last: now}
}

// reserve takes n tokens (the balance may go negative) and returns how long
// the caller must wait before sending them.
func (b *tokenBucket) reserve(now time.Time, n int) time.Duration {
	if b.rate <= 0 {
		return 0
	}
	if el := now.Sub(b.last); el > 0 {
		b.tokens = min(b.burst, b.tokens+el.Seconds()*b.rate)
		b.last = now
	}
	b.tokens -= float64(n)
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.rate * float64(time.Second))
}
