// Package local runs the device's own inference: a Runner puts a bounded
// queue in front of an engine — the built-in models/lm engine or an
// OpenAI-compatible server on the device (llama.cpp's server, a vendor NPU
// runtime) reached through OpenAI — so that a burst of requests gets clear
// "overloaded" errors instead of unbounded latency, and a client that goes
// away stops its generation.
//
// How it fits: the agent builds one Runner (agent.go) over the engine it
// opened (agent/engine.go: OpenAI for --local-url, else the built-in
// engine), and agent/route's Dispatcher calls Runner.Generate, through the
// agent's shadow tap, for every request routed (or fallen back) to the
// device. Runner.Load, read by the agent's Load function, tells the Router
// whether the device is too busy.
//
// # Basics
//
// Runner (runner.go): NewRunner takes any llm.Generator and a Config
// (Concurrency, default 4; QueueDepth, default 64; KVFaultsPerMs, the
// engine's fault rate, nil for an external server). Generate takes a slot
// or waits for one; Load reports Waiting, Running, Refused and the fault
// rate. OpenAI (openai.go): NewOpenAI points httpapi.Client, the streaming
// client the cloud also uses for its remote workers, at a device-local
// server; Ping is the agent's /readyz check for it.
//
// # Invariants
//
//   - At most Concurrency generations run on the engine at once, and at
//     most QueueDepth requests wait; the next one fails at once with a
//     retryable llm.CodeOverloaded error (HTTP 503, Retry-After 1 s) and
//     counts in Refused. No request waits without bound.
//   - A waiter whose context ends leaves the queue with the context's
//     cause and never reaches the engine; a running one's cancellation
//     goes to the engine, which must free its sequence.
//   - Tokens go to emit as the engine produces them; the Runner adds a
//     "queueing" span and generation timing, nothing else.
//   - The Runner starts no goroutine: its slots are a buffered channel, its
//     counters atomics.
//
// # Concurrency
//
// Runner and OpenAI are safe for concurrent use. Runner has no lock: Load's
// fields are read one by one, so under a burst Waiting may briefly count a
// request that is about to be refused.
//
// local imports llm, transport/httpapi and internal/tracing. It names no
// engine: models/lm reaches it as an llm.Generator the agent builds, so
// this package links no model code. It knows nothing of routing, the cloud
// or telemetry; agent/route and the agent wiring do.
//
// # Caveats
//
// The queue has no priorities or fairness: one device serves its own
// apps, and per-tenant fairness is the cloud's job (cloud/admit). OpenAI
// allows five minutes for a first token (prompt processing on a slow
// board) and, with the default client, ignores the environment's proxy. The Runner tests run under
// testing/synctest; OpenAI's run against a real loopback server.
package local
