// Package sim is a discrete-event simulator of a GPU serving cluster that
// runs the coordinator's own admission (cloud/admit), placement
// (cloud/place) and batching (cloud/batch) unchanged against simulated
// vLLM-style engines, in virtual time, so every scheduling claim of the
// project can be measured at fleet scale without GPUs.
//
// How it fits: a Cluster is built from GPU pools (Pool: a GPU profile, a
// count and a sched.Role) serving one Model. Each worker is an Engine: a
// vLLM-style continuous-batching scheduler with chunked prefill under a
// per-step token budget, a paged KV cache sized as the GPU's memory less
// weights and activations, prefix caching by chained block hashes with LRU
// eviction, and preemption by recompute. A step's duration comes from a
// roofline (Deployment.StepTime). Requests flow as they do live: the token
// budget (admit.Admitter) and the fair queue (admit.Fair) admit; the
// worker signals (worker.FillSignals, with worker.BurstMeter and the
// engine's own prefix probe, refreshed by a probe every 500 ms as the live
// Set does) and the circuit breaker (admit.Breaker) make the View that the
// coordinator's place.Placer decides on, with the policy in force behind
// the coordinator's layers (affinity by default; semantic grouping and
// prefetch when Config.Layers asks); a worker in an Outage loses what it
// runs and refuses what it is sent, and the Placer's fallback runs again
// elsewhere what had no token yet while the tenant's fallbacks last; the chosen worker's batch.Batcher releases the request
// into its engine. The simulator places nothing itself (place.go; a test
// in cloud/place parses this package and fails on a placement of its own).
// The clock is virtual: nothing sleeps, and a run is deterministic:
// nothing in it is random, so the same trace and configuration give the
// same result.
//
// Server runs the same Engine in real time behind an OpenAI-compatible HTTP
// endpoint with vLLM's Prometheus metric names, which is what
// `phaseless-cloud --worker sim://h100?model=llama3.1-8b&n=8` starts.
//
// Sweep plays one trace under several policies and arrival-rate scales in
// parallel, and searches each policy's highest rate within the SLOs: the
// table and --max-rate of `phaselessctl sim`, which only parses flags and
// prints.
//
// To measure a new policy: implement sched.Policy, register its name in
// sched.ByName, and run `phaselessctl sim --policy NAME` (docs/sim.md).
package sim
