// Package gate lets a component stop taking calls and wait for the ones in
// flight, without holding a lock across a call: the broker's subscriptions
// and the fleet Manager's deliveries both close this way.
package gate

import "sync"

// Gate counts calls in progress. The zero value is open.
type Gate struct {
	mu     sync.Mutex // guards cond.L's setup, active, closed
	cond   sync.Cond
	active int
	closed bool
}

// Enter admits a call, or reports false once Close has begun.
func (g *Gate) Enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.active++
	return true
}

// Leave ends a call that Enter admitted.
func (g *Gate) Leave() {
	g.mu.Lock()
	if g.active--; g.active == 0 && g.cond.L != nil {
		g.cond.Broadcast()
	}
	g.mu.Unlock()
}

// Close refuses new calls and waits for those in progress to Leave. It is
// safe to call more than once.
func (g *Gate) Close() {
	g.mu.Lock()
	g.closed = true
	if g.cond.L == nil {
		g.cond.L = &g.mu
	}
	for g.active > 0 {
		g.cond.Wait()
	}
	g.mu.Unlock()
}
