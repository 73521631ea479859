// Package quic is the agent ⇄ cloud protocol "phaseless/1" on QUIC
// (github.com/quic-go/quic-go): the frame codec, the Client an agent uses as
// an llm.Generator, and the Server the cloud plugs its scheduler into.
//
// How it fits: the agent's router calls Client.Generate for work it sends to
// the cloud and reads Client.Link to decide whether the uplink is usable.
// Each request gets its own bidirectional stream carrying one request frame
// up and meta, token, final or error frames down; a cancel frame (or a reset
// stream, or a lost connection) cancels the server-side context. The server
// learns the device id from the client certificate (transport/pki), sets it
// as the request's Tenant, and hands the request to its Handler, whose emit
// writes each token frame to the stream at once: nothing is aggregated, and
// a slow reader slows the writer through QUIC flow control only.
//
// Requests that carry an idempotency key may travel in 0-RTT on a resumed
// connection and run once per (device, key): a replay or a retry attaches
// to the generation already running or finished (see docs/transport.md).
package quic
