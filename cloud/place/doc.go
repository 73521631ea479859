// Package place is the coordinator's whole per-request placement decision
// as one value, a Placer, that both the live coordinator (cloud/coordinator)
// and the cluster simulator (cloud/sim) call: what runs in virtual time is
// what runs in production, not a copy of it.
//
// # How it fits
//
// A driver (the coordinator, or the simulator) measures a request (its
// signals, sched.Request) and takes a View of its workers: their signals
// (sched.Snapshot, with the prefix each holds and the time the view was
// taken), what each serves, and whether the circuit breaker is open. Place
// turns the two into a Decision; the driver then runs the request there.
// Everything that needs a clock, a network or a goroutine stays with the
// driver: probing workers, the replicas' pinned-prefix directory
// (cloud/affinity, whose answer comes in as Request.Pinned), the breaker's
// windows (cloud/admit), the fallback allowance, running warm-ups.
//
// Place, in order:
//
//  1. takes the workers that do not serve the request's named model out of
//     the view (model pins), and raises the directory's worker to the
//     blocks it holds pinned;
//  2. runs an explicit policy (x-phaseless-policy, --dev) when the
//     request names one, even with the breaker open, so a comparison of
//     policies does not measure FIFO under several names;
//  3. else, while the breaker is open, places FIFO (sched.FIFO);
//  4. else lets a request in semantic grouping join an open group of
//     similar requests on a worker with room (cloud/semantic);
//  5. else runs the policy in force, wrapped in conversation affinity
//     (sched.Affinity) unless that layer is off, and opens a group there;
//  6. keeps a split only where it can run: another healthy worker decodes,
//     at least two tokens are asked for, and a remote prefill worker can
//     render the prompt.
//
// Fallback places a request whose first attempt failed with an overload
// (the conservative pool, sched.Fallback); Resume places one that resumes
// a KV handoff parked in this process; Learn feeds predictive prefetch a
// request that succeeded and returns what to warm, and WarmTarget picks the
// worker a warm-up runs on.
//
// # Caveats
//
// A Placer holds state that every decision reads and changes: the policies'
// own (round-robin's counter, the prefill planner's pool), the open
// semantic groups and the prefetch model. Two drivers give the same
// decisions only for the same sequence of calls with the same views. Time
// comes in with each view (sched.Snapshot.Now) and each Learn: with a zero
// time, semantic groups never close and the planner only grows.
package place
