// Package fleet is the cloud side of fleet management (DESIGN.md §4): the
// device registry, idempotent telemetry ingest with a retention bound and a
// JSON-lines export for training, versioned desired configuration and
// commands with results, all kept in bbolt and served over the admin HTTP
// API (Manager.Handler).
//
// How it fits: devices talk MQTT v5 (topics and payloads in transport/fleetwire)
// to either the embedded broker (cloud/fleet/broker, reached in process) or
// an external broker such as Mosquitto or EMQX (reached as an ordinary
// MQTT v5 client with a persistent session). The Manager runs the same logic
// over both. A telemetry batch is acknowledged on dev/{id}/telemetry/ack only
// after it is committed to bbolt, and the device deletes records only after
// that ack, so a cloud that is down for a while loses nothing: the device
// resends, and (device, seq) identity makes the resend count once.
package fleet
