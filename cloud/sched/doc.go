// Package sched decides where a request runs without anyone declaring its
// phase. The coordinator measures each request (input entropy and length,
// predicted output length, prefix overlap with what each worker has cached)
// and each worker (KV faults per ms, queue depth, output burstiness), and a
// Policy turns those signals into a Decision: a pool role and a worker, or
// a prefill worker and a decode worker for a split request.
//
// How it fits: cloud/admit lets a request in, cloud/coordinator fills a
// Request once and a Snapshot from cloud/worker's Worker.Signals, calls
// Policy.Decide, and runs the request where the Decision says; cloud/batch
// then holds it briefly in the worker so similar lengths start together.
// The decision vector travels back to the client as the x-scheduler-hint
// header (Decision.AppendHint). cloud/sim calls the same Decide in virtual
// time, which is how the policies are compared (docs/cloud.md).
//
// # Basics
//
// Start from Request, Worker and Snapshot (signals.go), Policy and New
// (policy.go) and Decision (decision.go). New builds a policy by the name
// that --policy and the x-phaseless-policy header take; NameScheduler runs
// DefaultPolicy, priced-pd: Priced with GPU classes and prefill/decode
// disaggregation, whose planner (planner.go) sizes the prefill pool from
// the load. Rules holds the DESIGN.md §5 thresholds (4.2 bits/char, 12 KV
// faults/ms, σ 8.3 tokens per 100 ms); Learned maps Features through a
// small MLP to the nearest of its centres' resource combinations (Combo)
// and is trained by the learn subpackage. RoundRobin, LeastLoaded, LLMD and
// ExplicitPhases are the baselines (Baselines). Affinity wraps any policy
// to keep a conversation on the worker that caches it. FIFO is what the
// coordinator runs while admit's breaker is open, Fallback where an
// overloaded worker's request goes next. OutputPredictor turns max_tokens
// into an expected output length per tenant.
//
// # Invariants
//
//   - Decide runs on every request, on many goroutines at once: it must not
//     allocate (AllocsPerRun tests hold Rules, Priced, Learned and Affinity
//     to zero allocations) and keeps its own state in atomics (RoundRobin's counter,
//     the planner's prefill set, Learned's model, swapped while decisions
//     run).
//   - Decide only reads Request and Snapshot; Decision.Worker and
//     DecodeWorker index Snapshot.Workers, and no healthy worker is the
//     sentinel ErrNoWorker, never a new error.
//   - The package reads no clock: Snapshot.Now (wall time live, virtual
//     time in cloud/sim) is all the time it sees, and a zero Now turns the
//     planner's shrinking off.
//
// # What it may import
//
// The standard library, transport/schedhint (the hint's wire form) and
// models/predictor/onnxpb (the learned model's file) only. It never
// imports cloud/worker, cloud/coordinator or an engine: workers reach it as
// Worker values, so the simulator and the live coordinator share it.
// Training code (gorgonia) stays in sched/learn, which the cloud binary
// does not link.
//
// # Caveats
//
// The planner keeps its prefill set as a 64-bit mask: in a Snapshot of more
// than 63 workers it is off and every worker serves in its declared role.
// Rules' thresholds come from the source articles: defaults to measure
// against, not facts.
package sched
