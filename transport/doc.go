// Package transport holds every wire format of Phaseless and no business
// logic: the agent⇄cloud QUIC protocol (quic), the OpenAI- and
// Anthropic-compatible HTTP types (httpapi), the MQTT fleet topics and
// payloads (fleet), Prometheus text (metrics), the command-line contract
// (cli), Server-Sent Events reading (sse), W3C trace context and its
// OpenTelemetry spans (tracing), and the Go client for apps (client). It
// imports nothing from agent or cloud.
package transport
