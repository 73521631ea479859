package ingress

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// FailureLimiter slows down key guessing: after Free failed
// authentications from one source address, every attempt from it is
// refused (429 with Retry-After, without looking at the key) for a backoff
// that doubles with each further failure, from Base up to Max. A success
// clears the source; a source with no failure for Forget is forgotten. The
// clock is injected so tests run without sleeps.
//
// The source is the TCP peer address: behind a reverse proxy every caller
// shares the proxy's address, so run the limiter where clients connect.
type FailureLimiter struct {
	Free   int           // failures allowed before any backoff; default 5
	Base   time.Duration // first backoff; default 1 s
	Max    time.Duration // longest backoff; default 5 min
	Forget time.Duration // idle time after which a source starts afresh; default 15 min
	// MaxSources bounds the table (an attacker can choose many addresses);
	// when full, the longest-idle source is dropped. Default 100000.
	MaxSources int
	Now        func() time.Time

	mu      sync.Mutex // guards sources
	sources map[string]*failures
}

type failures struct {
	n     int       // consecutive failures
	last  time.Time // of the last failure
	until time.Time // attempts refused before this
}

func (l *FailureLimiter) init() {
	if l.sources != nil {
		return
	}
	if l.Free == 0 {
		l.Free = 5
	}
	if l.Base == 0 {
		l.Base = time.Second
	}
	if l.Max == 0 {
		l.Max = 5 * time.Minute
	}
	if l.Forget == 0 {
		l.Forget = 15 * time.Minute
	}
	if l.MaxSources == 0 {
		l.MaxSources = 100_000
	}
	if l.Now == nil {
		l.Now = time.Now
	}
	l.sources = map[string]*failures{}
}

// Blocked reports whether src must wait, and for how long.
func (l *FailureLimiter) Blocked(src string) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.init()
	f := l.sources[src]
	if f == nil {
		return 0, false
	}
	now := l.Now()
	if now.Sub(f.last) >= l.Forget {
		delete(l.sources, src)
		return 0, false
	}
	if wait := f.until.Sub(now); wait > 0 {
		return wait, true
	}
	return 0, false
}

// Fail records a failed authentication from src and returns the backoff it
// now has (0 while within Free).
func (l *FailureLimiter) Fail(src string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.init()
	now := l.Now()
	f := l.sources[src]
	if f == nil || now.Sub(f.last) >= l.Forget {
		if f == nil && len(l.sources) >= l.MaxSources {
			l.evictLocked()
		}
		f = &failures{}
		l.sources[src] = f
	}
	f.n++
	f.last = now
	if f.n <= l.Free {
		return 0
	}
	wait := l.Base
	for i := l.Free + 1; i < f.n && wait < l.Max; i++ {
		wait *= 2
	}
	wait = min(wait, l.Max)
	f.until = now.Add(wait)
	return wait
}

// Succeed clears src's failures.
func (l *FailureLimiter) Succeed(src string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sources != nil {
		delete(l.sources, src)
	}
}

// evictLocked drops the source idle longest.
func (l *FailureLimiter) evictLocked() {
	var (
		oldest string
		at     time.Time
	)
	for src, f := range l.sources {
		if oldest == "" || f.last.Before(at) {
			oldest, at = src, f.last
		}
	}
	delete(l.sources, oldest)
}

// sourceOf is the limiter's key for r: the peer's IP address without port.
func sourceOf(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}
