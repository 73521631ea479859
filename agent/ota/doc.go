// Package ota is the device's side of over-the-air updates: it takes the
// fleet's signed bundles (firmware's format) for every artifact kind,
// installs a new agent build into the inactive A/B slot and runs the boot
// supervisor that commits or rolls it back, and swaps a new router model or
// edge model into the running agent without a restart. Downloads
// (download.go) fetch a chunked bundle's header and only the chunks the
// device holds nowhere, by range requests that resume after a cut link, a
// restart or a kill -9, paced by update-bandwidth and deferred on a
// metered link.
//
// How it fits: the agent opens an Updater from its config, hands the fleet
// client its Update, Commit and Rollback as the "update", "ota-commit" and
// "ota-rollback" command handlers and its Slot, Artifacts and OnTrial for the
// status, and after building its router model and engine calls
// OpenArtifacts with them (Targets), so a bundle of either kind replaces
// them in place. The built-in engine is built as a SwapEngine for that
// reason. Supervise is `phaseless-agent supervise`, the process that starts
// the agent of the slot in force. Bundles, slots and artifact stores are
// package firmware's; this package decides when to use them.
//
// Caveats: an agent update only ever runs under the supervisor (an agent
// that no supervisor started refuses one: the slot would never boot), and a
// router or edge model that fails its health check never serves; it is
// reported rolled back so a rollout counts it.
package ota
