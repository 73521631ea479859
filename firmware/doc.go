// Package firmware is over-the-air updates for the agent: the signed bundle
// format (bundle.go) and A/B install slots with trial boots and rollback
// (slots.go).
//
// How it fits: the cloud's operator signs a bundle with the fleet's ed25519
// key (phaselessctl), announces it with an "update" command over MQTT, and the
// agent's fleet client downloads it, verifies it with Open against its
// Policy (trusted key, board, newer version), installs it into the inactive
// slot and restarts into it on trial. The agent refuses anything unsigned,
// mis-signed, for another board, or older than what runs unless an explicit
// rollback command allows it.
package firmware
