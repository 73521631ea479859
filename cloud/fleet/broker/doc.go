// Package broker is the MQTT v5 broker the cloud embeds by default
// (DESIGN.md §4): mochi-mqtt with the fleet's authentication and ACL, and a
// bbolt store that survives restarts with QoS 1 messages in flight.
//
// How it fits: devices connect to it over TCP (username/password, a
// Mosquitto-compatible password file) or TLS (a client certificate whose CN
// is the device id). A device may publish only the protocol's own topics,
// retained only where the protocol retains and within each topic's size
// (transport/fleetwire DeviceWrites), subscribe only under its own
// {prefix}dev/{id}/ and the fleet announcements, and its client id must be
// its device id. The cloud's fleet manager (cloud/fleet) talks to the
// broker in process through Publish and Subscribe, which bypass the ACL.
//
// mochi's own bolt hook does not store packet ids of inflight messages, so a
// restarted broker resends them with id 0 and clients loop on "missing packet
// id"; Store is a replacement that keys inflight messages by client and packet
// id and restores them exactly.
package broker
