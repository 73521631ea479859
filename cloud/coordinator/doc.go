// Package coordinator is the cloud's request path: it measures, admits,
// places and streams every request that enters over HTTP or QUIC. A
// Coordinator is the llm.Generator the ingress calls for each request;
// package cloud builds it from a Config.
//
// # How it fits
//
// The coordinator sits between the ingress, which turns HTTP and QUIC into
// llm.Request values, and the workers (cloud/worker), which run engines. It
// decides where and when a request runs, and forwards its tokens; it owns
// the per-request pipeline and nothing durable. It uses cloud/admit for
// budgets, the tenant-fair queue, fallback limits and the circuit breaker;
// cloud/sched for the placement policies; cloud/worker for the workers'
// signals and to run requests; and models/lm for the built-in engines'
// tokenizer and chat rendering, so the prompt it hashes is the one they
// cache.
//
// It may not decode wire formats (it sees llm.Request and emits llm.Token),
// run models, or keep state on disk, and its request path may not link the
// fleet manager, a broker or bbolt (DESIGN.md §3).
//
// # A request's path
//
// Generate takes a request through these steps, always in this order. The
// named extension points are interfaces declared in coordinator.go, each
// given the request and its measured record (never the Coordinator); the
// prompt-caching layer (cache.go) fills all of them.
//
//  1. requestChecker.checkRequest refuses a header for a feature that is
//     off here, before anything is charged.
//  2. measure renders and tokenizes the prompt once (prompt.go) and derives
//     the scheduler's view of it: length, block hashes, entropy, predicted
//     output. requestMeasurer.measureRequest adds to it (the semantic
//     fingerprint).
//  3. Admission charges the tenant's budget the prompt plus the maximum
//     output, then the fair queue grants a slot.
//  4. decide takes the workers' snapshot and drops those that do not serve
//     the named model; snapshotPreparer.prepareSnapshot adds what the
//     engines cannot tell (pins another replica recorded). While the breaker
//     is open the request goes FIFO, and one naming a policy (--dev) goes
//     where that policy says; otherwise prePlacer.prePlace may place it
//     (with its semantic group), else the policy in force does and
//     postPlacer.postPlace learns where. A request naming a KV handoff
//     parked here skips all this and resumes on a built-in worker
//     (split.go).
//  5. The request runs on its worker, or split between a prefill and a
//     decode worker; a 429/503-like failure before the first token runs it
//     once more on the conservative pool, a failed split on the prefill
//     worker alone.
//  6. responseCompleter.completeResponse learns from a request that
//     succeeded (records its pins, predicts and warms the tenant's next
//     prefix).
//  7. finish refunds what the request did not use and feeds the breaker,
//     the SLA counters and the output predictor.
//
// New also lets the cache layer wrap the policy in force with conversation
// affinity (sched.Affinity) unless CacheConfig.NoAffinity.
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
//     worker set and prompts, and the request path reaches it only through the
//     extension points.
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
