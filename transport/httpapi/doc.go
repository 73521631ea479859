// Package httpapi is the OpenAI- and Anthropic-compatible HTTP surface that
// the agent and the cloud both serve (DESIGN.md §4): POST /v1/chat/completions,
// POST /v1/messages and GET /v1/models, streamed (SSE) or not, and OpenAI's
// legacy POST /v1/completions (completions.go) for models without a chat
// template, which only a device's built-in engine runs.
//
// How it fits: a Handler decodes and validates each API's JSON into the
// canonical llm.Request, calls one llm.Generator (the agent's router or the
// cloud's admission/scheduler chain) and writes the generator's tokens back in
// the caller's API shape, each one flushed as soon as it exists. It holds no
// routing or scheduling logic; the stream's begin event (llm.Meta: route,
// scheduler hint, fallback, burst budget) becomes response headers, and failures (llm.Error codes) become each API's
// own error JSON with the matching status.
//
// Streams carry Phaseless' own numbers in an SSE field the official SDKs
// skip (StatsField: each token's engine latency, the prefix-cache
// efficiency at the end; headers on non-streamed answers), and usage
// reports cached prompt tokens in each API's own field. A W3C traceparent
// header becomes llm.Request.Trace, which every later hop continues.
//
// Streams never end silently: a failure after tokens were sent ends an OpenAI
// stream with a final `data: {"error":…}` event (and no [DONE]) and an
// Anthropic stream with `event: error`, which both official SDKs raise as
// exceptions.
//
// The package also holds the other end: Client streams chat completions from
// any OpenAI-compatible server (vLLM, SGLang, llama-server, another
// Phaseless) as an llm.Generator, mapping HTTP statuses and mid-stream error
// events back onto llm.Error codes. The agent's --local-url engine
// (agent/local.OpenAI) and the cloud's remote workers (cloud/worker.Remote)
// both use it, so the two hops read upstream streams the same way.
package httpapi
