// Package fleetclient is the device's MQTT v5 fleet client (DESIGN.md §4): it
// keeps one persistent session with the broker (client id = device id,
// CleanStart false, session expiry, QoS 1), publishes a retained status
// that the last will turns to "offline" when the device dies, applies the
// cloud's desired config and reports it, runs commands once per id and
// answers with their results, and drains the telemetry store to the cloud.
//
// How it fits: the agent builds a Client from its config (broker URL,
// device id, the PKI's TLS config) with the telemetry.Store it appends a
// record to for every request, registers command handlers with Handle and
// an OnConfig callback, and runs Client.Run next to its other servers.
// Topics and payloads are transport/fleetwire's; the cloud side is cloud/fleet.
//
// Durability: telemetry leaves the device's bbolt store only when the cloud
// acknowledges it (TelemetryAck), so broker restarts, lost PUBACKs and
// device crashes cost at most a resend, never a record. Config reports and
// command results go out through autopaho's queue, here a bbolt queue
// (package boltqueue) that survives restarts; command results are saved
// before they are queued, so a repeated command id is answered, not rerun.
// autopaho keeps its MQTT session state (packet ids in flight) in memory:
// a message that had left the queue but was not yet PUBACKed when the
// process died is lost; for telemetry the store-level ack covers that, and
// a lost command result shows as a missing result the cloud can retry.
package fleetclient
