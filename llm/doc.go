// Package llm is the canonical completion request and token stream that every
// hop shares: the HTTP APIs decode into it, the router and the scheduler read
// it, the QUIC protocol carries it and the engines run it. Keeping one shape
// means a request crosses agent → cloud → worker without being re-interpreted.
//
// # The stream
//
// Generator.Generate(ctx, req, emit) answers with a stream of events through
// emit and then returns a Final (or an error). The stream is
//
//	begin?  token*
//
// begin is a Token whose Meta is set and whose Text is empty: the response
// metadata — Route (local, cloud), Pool and Worker, SchedulerHint, a typed
// Fallback (Cause, From, Code, Detail) and the remaining burst budget. It is
// sent at most once, before the first text token, by the generators that
// decide those things: the agent's dispatcher (agent/route) and the cloud's
// coordinator (cloud/coordinator). Engines and workers decide nothing and
// send only tokens. A generator that wraps another (the dispatcher wraps the
// QUIC client, which relays the coordinator's begin event from the meta
// frame) folds the inner begin event into its own with Stream, so a reader
// sees one. Final carries only what is known at the end (token counts,
// finish reason, timings); an error carries what a failure needs
// (Error.Code, RetryAfter, BudgetRemaining).
//
// Metadata flows one way, up the stream: nothing is stored in the context for
// a caller to read back. The HTTP handler (transport/httpapi) turns the begin
// event into response headers (x-phaseless-route, x-scheduler-hint,
// x-fallback-reason, x-burst-budget-remaining) before the first body byte;
// the QUIC server (transport/quic) writes it as the meta frame.
//
// Later additions to a response that are decided before the first token
// (tool-call mode, prompt-cache placement, a prefill/decode split) belong in
// Meta; additions known only at the end belong in Final.
package llm
