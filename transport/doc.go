// Package transport holds the wire formats of Phaseless and no business
// logic: the agent⇄cloud QUIC protocol (quic), the OpenAI- and
// Anthropic-compatible HTTP types (httpapi), the MQTT fleet topics and
// payloads (fleetwire), Server-Sent Events (sse), the scheduler hint
// (schedhint) and the fleet's certificates (pki); linkemu emulates the
// cellular links they cross, for tests and benchmarks. The vocabulary these
// formats carry (Request, Token, Generator, Error) is package llm at the
// module's root; process plumbing (cli, metrics, tracing, backoff) is under
// internal/. It imports nothing from agent or cloud.
package transport
