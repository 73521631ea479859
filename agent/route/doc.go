// Package route decides, per request, whether the device answers locally or
// offloads to the cloud, and then carries the decision out.
//
// How it fits: the agent's HTTP API (transport/httpapi) calls a Dispatcher as
// its llm.Generator. The Dispatcher asks the Router for a Decision — the
// request's normalised feature vector (models/textfeat) through the predictor
// gives the probability that the cloud is needed; that probability, with
// threshold and hysteresis, combined with the uplink's state (connected, RTT,
// loss) and the local engine's load (queue, KV faults per ms) picks a path —
// then streams the tokens of the chosen engine straight through. A cloud that
// fails before its first token is replaced by the local engine (and the
// response says so in x-fallback-reason); a cloud answer cut off after
// tokens were sent — the uplink first tries to resume it (transport/quic,
// resume.go) — is finished by the local engine from the prompt plus the
// text already delivered, never restarted, and its first local token
// carries an llm.Continuation. Every request, whatever its outcome, becomes
// one fleetwire.RequestRecord for telemetry.
//
// Without a predictor model the Router uses the source articles' rule: input
// byte entropy above 4.2 bits per character goes to the cloud.
//
// # Basics
//
// Two types. Router (router.go) is the pure decision: NewRouter takes a
// Config and a Predictor (nil: the entropy rule), Decide takes the request,
// a Link and a Load and returns a Decision whose Inputs record why. The
// Dispatcher (dispatch.go) runs it: NewDispatcher takes the Router, the
// Local and Cloud llm.Generators, Link and Load functions and a Recorder.
// The agent package wires Local to agent/local's Runner (behind its shadow
// tap), Cloud to the transport/quic client, Record to agent/telemetry, and
// swaps in a new Router with SetRouter when the fleet config changes the
// threshold. cloudhints.go sends requests carrying cloud-only headers
// (x-prefetch-hint, x-batch-threshold, x-semantic-mode) to the cloud, and
// refuses them where they cannot act. A request that offers tools runs
// where they are served (Router.toolRoute: Config.LocalTools, CloudTools),
// not where its score would send it.
//
// # Invariants
//
//   - The content score has no memory: each request's probability is
//     compared with the threshold alone. Only the link and load signals
//     latch (Config.Hysteresis), so a flapping uplink does not bounce
//     traffic between paths.
//   - x-phaseless-route and Config.Mode win over the score; a forced
//     "cloud" on a device without one runs locally and says so.
//   - Tokens are forwarded as they come; none is held back or replayed. A
//     fallback to the other path happens only before the first token: the
//     cloud after CloudFirstToken (15 s) of silence or a cloud error, the
//     cloud again when the local engine refuses (context too long, queue
//     full) a request the router chose for it. After the first token only
//     a local continuation follows (continueLocally): a cloud answer with
//     tool calls or a response format, or a request the cloud called
//     invalid, still ends with the cloud's error.
//   - Exactly one telemetry record per dispatched request (one refused by
//     the cloud-only header check has none), written after the response
//     ends, on a context of its own so a client that left is still counted.
//
// # Concurrency
//
// Router and Dispatcher are safe for concurrent use. Router.mu guards the
// two latches only; the Dispatcher's Router is an atomic pointer, so a
// request in flight keeps the Router it started with.
//
// route may import llm, models/textfeat, models/predictor,
// transport/fleetwire and internal/{metrics,tracing}. It may not import
// agent/local, agent/telemetry, transport/quic or anything under cloud/:
// engines reach it as llm.Generator, telemetry as a Recorder function.
//
// # Caveats
//
// Load.Capacity is how many requests may wait (the Runner's QueueDepth),
// not how many run: the queue signal is Waiting over it. Link and Load are
// read once per request, at decision time. TTFT, inter-token latency and
// the first-token bound run on the wall clock; the bound's test runs under
// testing/synctest.
package route
