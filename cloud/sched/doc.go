// Package sched decides where a request runs without anyone declaring its
// phase. The coordinator measures each request (input entropy and length,
// predicted output length, prefix overlap with what each worker has cached)
// and each worker (KV faults per ms, queue depth, output burstiness), and a
// Policy turns those signals into a Decision: a pool role and a worker.
//
// How it fits: cloud/admit lets a request in, sched.Policy.Decide picks the
// pool and worker from a Snapshot that cloud/worker fills, cloud/batch holds
// the request briefly so similar lengths start together, and the worker
// engine streams the tokens. The decision vector travels back to the client
// as the x-scheduler-hint header (Decision.AppendHint).
//
// Rules is the first Policy, built on the thresholds of DESIGN.md §5
// (4.2 bits/char, 12 KV faults/ms, σ 8.3 tokens per 100 ms) plus prefix
// affinity and least-load. RoundRobin and LeastLoaded are the baselines the
// replay tool compares it against. A learned classifier later implements the
// same interface. Decide runs on every request, so it must not allocate.
package sched
