// Package admit decides whether a request may start and in which order
// waiting requests start: per API key (or device) token budgets, the
// at-most-2-fallbacks-per-10-minutes limit, per-tenant fairness and the
// circuit breaker that drops the coordinator back to plain FIFO when things
// go wrong.
//
// Budgets and fallback counters live behind Store so several coordinator
// replicas can share them: MemoryStore for one process (the default),
// RedisStore for many. Fairness and the breaker are per process: they act on
// this replica's own queue.
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
package admit
