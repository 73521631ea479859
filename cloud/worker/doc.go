// Package worker runs requests on engines grouped in pools by role
// (prefill-heavy, decode-heavy, stream, conservative) and measures each
// worker's signals for the scheduler: queue depth, KV usage and faults per
// ms, and output burstiness.
//
// Two engine kinds sit behind Engine: Builtin, the in-process models/lm
// engine (its counters read directly), and Remote, any OpenAI-compatible
// server by URL (vLLM, SGLang, llama.cpp, another Phaseless, a cloud/sim
// fleet), streamed over SSE, health-checked, and loaded from its Prometheus
// metrics where it exposes them. A Set owns the workers and the goroutine
// that probes them.
//
// # Basics
//
// Start from Worker (worker.go): New wraps an Engine with its Config (name,
// pool role, GPU class, optional cloud/batch Config). cloud/coordinator
// holds a Set (set.go), fills a sched.Snapshot from it per request
// (Set.Snapshot, Worker.Signals), and runs the request on the worker the
// Decision names with Worker.Generate, or, for a split, Worker.Prefill on
// one and Worker.Resume on the other (handoff.go: how the KV blocks travel
// between built-in and remote engines). KVServer (kvserver.go) serves the
// /v1/kv/ endpoints that let another coordinator use this process's
// built-in engines as its prefill or decode workers; HandoffStore parks
// what arrives there. RegisterEngineMetrics and the cache metrics export
// the engines' counters.
//
// # Invariants
//
//   - Ownership is a chain: a Set owns its Workers, a Worker owns its
//     Engine and its Batcher, and each Close closes what it owns. Every
//     Close is idempotent; Set.Close stops the probe goroutine and waits
//     for it before closing the workers.
//   - Tokens go to emit as the engine produces them; nothing here buffers
//     them (DESIGN.md §2).
//   - A request counts in Inflight while it holds an engine sequence, and
//     in PendingPrefill from Generate until its first token: a burst lands
//     between two probes, so these are counted live, not probed.
//   - A probe that fails outright marks the worker unhealthy at once; one
//     that only timed out does so after slowProbes (3) in a row; one
//     success brings it back.
//   - Set.Snapshot runs on every request and does not allocate once the
//     caller's Snapshot has room (a test holds it to zero).
//   - A split that fails returns a *HandoffError naming its stage, so the
//     coordinator can run the whole request on one worker instead.
//
// # Concurrency
//
// Worker, Set, Remote, Builtin and HandoffStore are safe for concurrent
// use; a Worker's signals and its BurstMeter are atomics, read lock-free by
// every decision. The probe loop's ticker, Set.Snapshot and the token
// timestamps read the wall clock; HandoffStore's TTL runs on its Now field,
// and BurstMeter takes every time from its caller.
//
// worker may import cloud/batch, cloud/sched, models/lm, llm,
// transport/httpapi and internal/{metrics,tracing}. It may not import
// cloud/coordinator, cloud/admit, cloud/sim or the fleet: the scheduler
// sees a worker only as a sched.Worker value.
//
// # Caveats
//
// A remote engine's cache is not visible: CachedPrefixBlocks answers -1
// and the worker falls back to the prefix blocks it routed there itself
// (prefix.go), which another coordinator's traffic does not update.
// Capacity is the engine's reported one when it reports it, else
// Config.Capacity (16).
package worker
