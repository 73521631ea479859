// Package batch holds requests for a built-in worker briefly so that the
// ones released into the engine together have similar prompt lengths, and a
// long prompt does not stall short ones.
//
// The engine (models/lm) batches continuously: every step advances all
// running sequences and fills the rest of its token budget with chunks of
// waiting prompts, in arrival order. When the engine has room, holding a
// request back only adds latency, so it goes straight in. When the engine
// is full, requests wait here in buckets by prompt length; as sequences
// finish, the bucket of shortest prompts is released first, up to MaxBatch
// at a time, so short prompts are not queued behind a long prompt's many
// prefill chunks. No request waits longer than Window: a bucket whose oldest
// request has waited that long is released even without room, into the
// engine's own queue, so long prompts are never starved.
//
// # Basics
//
// A newcomer starts from Batcher, made by New with a Config and a room
// function (free sequence slots in the engine now). cloud/worker owns one
// Batcher per worker that sets worker.Config.Batch (phaseless-cloud's
// built-in engines, from --batch-window and --batch-max): Worker.slot calls
// Wait before a sequence starts and Kick when one ends, and Waiting feeds
// the scheduler's queue signal. cloud/sim runs the same Batcher in virtual
// time through Submit, Config.Now and Config.AfterFunc.
//
// # Invariants
//
//   - A request goes straight in (batch size 1) only when nothing waits and
//     room is positive; otherwise it is queued behind those already waiting.
//   - Expired buckets are released first, whatever the room: the window is
//     a promise. Then buckets go shortest first while room lasts.
//   - Each waiter is released exactly once: with its batch size, with
//     ErrClosed after Close, or not at all if its context ended first (it
//     is marked gone and skipped). A waiter released as it gave up gets the
//     batch size and its context's error; the caller must not run it.
//   - One timer per Batcher, armed for the oldest waiter's window end;
//     Close stops it. Close is idempotent.
//
// # Concurrency
//
// Batcher is safe for concurrent use. mu guards the buckets, the timer and
// closed; waiting is written under mu and read without it, because every
// placement decision reads Waiting for every worker. room is called, and a
// Submit callback released after Submit returned runs, with mu held: both
// must be cheap and must not call back into the Batcher (Worker.room reads
// atomics only).
//
// The package imports nothing from the module: it knows no engine, worker
// or request type, only prompt lengths, so the simulator and the worker
// share it. Keep it that way.
//
// # Caveats
//
// A zero Config.Window means the default 150 ms, not "never hold", and
// phaseless-cloud passes its batch window through unchanged. Now and
// AfterFunc must be one clock: tests run the Batcher under testing/synctest
// (batch_test.go) or a manual clock (submit_test.go), never the wall clock.
package batch
