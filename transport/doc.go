// Package transport holds every wire format of Phaseless and no business
// logic: the agent⇄cloud QUIC protocol (quic), the OpenAI- and
// Anthropic-compatible HTTP types (httpapi), the MQTT fleet topics and
// payloads (fleet), Prometheus text (metrics) and the command-line contract
// (cli). It imports nothing from agent or cloud.
package transport
