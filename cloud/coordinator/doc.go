// Package coordinator is the cloud's request path: it measures, admits,
// places and streams every request that enters over HTTP or QUIC. A
// Coordinator is the llm.Generator the ingress calls for each request;
// package cloud builds it from a Config.
//
// # How it fits
//
// The coordinator sits between the ingress, which turns HTTP and QUIC into
// llm.Request values, and the workers (cloud/worker), which run engines. It
// decides when a request runs, asks cloud/place where, and forwards its
// tokens; it owns the per-request pipeline and nothing durable. It uses
// cloud/admit for budgets, the tenant-fair queue, fallback limits and the
// circuit breaker; cloud/place for every placement (the same Placer the
// simulator, cloud/sim, runs in virtual time); cloud/worker for the
// workers' signals and to run requests; and models/lm for the built-in
// engines' tokenizer and chat rendering, so the prompt it hashes is the one
// they cache.
//
// It may not decode wire formats (it sees llm.Request and emits llm.Token),
// run models, keep state on disk, or place a request itself (a test parses
// the package and fails on a policy call or a placement of its own), and its
// request path may not link the fleet manager, a broker or bbolt (DESIGN.md
// §3).
//
// # A request's path
//
// Generate takes a request through these steps, always in this order. The
// named extension points are interfaces declared in coordinator.go, each
// given the request's measured record (never the Coordinator); the
// prompt-caching layer (cache.go) fills both.
//
//  1. place.Placer.Check refuses a header for a feature that is off here
//     (or a policy nobody knows), before anything is charged.
//  2. measure renders and tokenizes the prompt once (prompt.go) and derives
//     the scheduler's view of it: length, block hashes, entropy, predicted
//     output.
//  3. Admission charges the tenant's budget the prompt plus the maximum
//     output, then the fair queue grants a slot.
//  4. decide takes the workers' snapshot and the breaker's state (the
//     View), pinLocator.locatePins asks the replicas' directory where the
//     prompt is pinned (affinity.Locate, which the simulator calls too),
//     and place.Placer.Place decides: model pins, an
//     explicit policy (--dev), FIFO while the breaker is open, a semantic
//     group, else the policy in force behind affinity. A request naming a
//     KV handoff parked here goes where place.Placer.Resume says (split.go).
//  5. The request runs on its worker, or split between a prefill and a
//     decode worker; a 429/503-like failure before the first token runs it
//     once more where place.Placer.Fallback says (the conservative pool), if
//     the tenant's fallbacks allow, and a failed split on the prefill
//     worker alone.
//  6. responseCompleter.completeResponse learns from a request that
//     succeeded: it records its pins, and place.Placer.Learn predicts the
//     tenant's next prefixes, which warm-ups run where
//     place.Placer.WarmTarget says.
//  7. finish refunds what the request did not use and feeds the breaker,
//     the SLA counters and the output predictor.
//
// # Invariants
//
//   - A request's prompt is rendered and tokenized once: measure's
//     worker.Prompt is what its block hashes, the cache layer's pins and a
//     built-in engine (worker.WithPrompt) read. Remote engines tokenize for
//     themselves, as their servers must.
//   - No token is held back: each is forwarded as it arrives (DESIGN.md §2),
//     after the begin event that says where the request runs.
//   - A fallback or a colocated retry happens only before the first token.
//   - A tenant is charged once before queueing, and what it did not use is
//     refunded once.
//   - The cache layer never calls back into the Coordinator: it holds its own
//     worker set, prompts and the Placer, and the request path reaches it only
//     through the extension points.
//
// # Caveats
//
// The prompt is rendered with chatfmt.Prompt. A built-in model with a chat
// template of its own renders it otherwise: its engine then tokenizes the
// request itself, and the coordinator's block hashes miss its cache. A
// directory lookup waits at most directoryTimeout; without an answer the
// request is placed on the engines' own signals. Close stops the cache
// layer's warm-ups but does not wait for requests in flight.
package coordinator
