// Package admit decides whether a request may start and in which order
// waiting requests start: per API key (or device) token budgets, the
// at-most-2-fallbacks-per-10-minutes limit, per-tenant fairness and the
// circuit breaker that drops the coordinator back to plain FIFO when things
// go wrong.
//
// Fairness is a Virtual Token Counter (Sheng et al., "Fairness in Serving
// Large Language Models", OSDI 2024): each tenant's counter grows with the
// tokens it has been served (prompt tokens at weight 1, output at weight 2,
// since a decode token costs more engine time than a prefill token), and when
// a slot frees, the waiting tenant with the smallest counter goes next. A
// weighted fair queue needs each request's cost before it runs, and the output
// length is unknown then; VTC charges as tokens are produced, so a tenant
// with long generations falls behind exactly as much as it consumed. It is
// work-conserving (no slot idles while anyone waits), and a tenant that
// returns after being idle is lifted to the smallest active counter so it
// cannot bank credit and then starve the others.
//
// # Basics
//
// Three types, each used by cloud/coordinator in this order for every
// request: Admitter.Charge takes the request's worst-case tokens from its
// tenant's Bucket (Refund returns what it did not use, AllowFallback counts
// a fallback); Fair.Acquire waits for one of Slots and returns a Ticket
// (Output charges generated tokens, Release frees the slot); Breaker.Record
// takes each outcome, and Breaker.Open, passed to NewFair as its fifo
// switch, turns both the queue and the placement to arrival order. Budgets
// and fallback counters live behind Store so several coordinator replicas
// can share them: MemoryStore for one process (the default), RedisStore for
// many. Fairness and the breaker are per process: they act on this
// replica's own queue. cloud/sim drives the same Fair queue in virtual time
// through Fair.Submit.
//
// # Invariants
//
//   - No type reads the wall clock except through Config.Now and
//     BreakerConfig.Now; a Store gets now from its caller, so every replica
//     and every test does the same arithmetic.
//   - Budgets fail open (a store error lets the request run and is told to
//     OnStoreError: a Redis outage must not take the API down); fallbacks
//     fail closed. A cost over the bucket's whole Burst is refused without
//     touching the store. A RedisStore bounds each command (RedisOptions:
//     200 ms, no retries) and, after 3 failures in a row, stops calling
//     Redis for a cool-down (ErrStoreUnavailable at once), so a dead Redis
//     costs a request milliseconds, not go-redis' 1.8 s of retries.
//   - A slot is never lost: one granted to a waiter whose context ended is
//     passed to the next, and Ticket.Release is idempotent.
//   - The breaker judges whole windows, not running totals; a window under
//     MinRequests decides nothing, and only healthy windows move the p99
//     baseline. It runs no goroutine: windows close on the next Record,
//     Open or State.
//
// # Concurrency
//
// Admitter, Fair, Breaker and both stores are safe for concurrent use. Fair
// hands out slots with its mutex held, so a Submit callback must not call
// back into the Fair queue (not even Ticket.Release).
//
// admit imports llm and the Redis client and nothing else from the module:
// it sees tenants, token counts and outcomes, never a request, a worker or
// a scheduling decision.
//
// # Caveats
//
// Slots and the breaker are per replica: N replicas run N×Slots requests.
// Replicas sharing a RedisStore need clocks in sync to a fraction of the
// refill period (NTP is enough). Tests drive time through a fake Now (the
// budget, fallback and breaker tests) or testing/synctest (the Fair queue);
// RedisStore's tests need a real redis-server (cloud/admit/redistest).
package admit
