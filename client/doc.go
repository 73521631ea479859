// Package client is the Go client an application on the device (or
// anywhere) uses to ask Phaseless — the agent's local API or the cloud's —
// for completions, in the OpenAI or the Anthropic request shape, streamed.
//
// How it fits: the servers (transport/httpapi) never hold a token back, so
// what a stream delivers is raw model output. This package is the other
// half of the source articles' contract: it reassembles characters that a
// delta split (Reassembler), retries within the caller's burst budget —
// reading x-burst-budget-remaining and Retry-After, with jittered backoff
// (internal/backoff) — and measures each request as the app sees it: time
// to first token, inter-token latency and tokens per second (Stats), also
// exported as Prometheus families (Collectors). Hooks (OnRetry, OnBudget,
// OnFallback) let the app react: show "busy", shed work, note that the
// answer came from the other side.
//
// transport/httpapi.Client is the other client in the tree: an
// llm.Generator for one hop between Phaseless components (the agent's
// --local-url engine, the cloud's remote workers). It retries nothing —
// the coordinator decides where a failed request goes — and speaks only
// OpenAI's shape, which every engine serves. Both read streams with
// transport/sse.
package client
