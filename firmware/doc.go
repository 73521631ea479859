// Package firmware is over-the-air updates for the agent: the signed bundle
// format (bundle.go), whose manifest lists each file as content-addressed
// chunks (chunk.go: GGUF cut at its tensors, other files by FastCDC in
// cdc.go) so a device fetches only the chunks it lacks, A/B install slots with trial boots and rollback
// (slots.go), and the boot supervisor that starts a slot and alone commits
// it (supervisor.go), and the installed versions of the artifact kinds the
// running agent swaps in place, the router and edge models (artifacts.go).
//
// How it fits: the operator signs a bundle with the fleet's ed25519 key
// (phaselessctl ota sign) and rolls it out in stages (phaselessctl fleet
// rollout; cloud/fleet sends each chosen device an "update" command). The
// agent downloads it, verifies it with Open against its Policy (trusted key,
// board, newer version), installs it into the inactive slot on trial and
// exits. The supervisor (phaseless-agent supervise) boots the trial slot,
// commits it once the new agent answers its health check and rolls it back
// otherwise; the agent then reports the version it runs, or the one it
// rolled back, and the rollout counts the outcome. Router-model and
// edge-model bundles take the same signed path but no slot: the agent keeps
// them in Artifacts, health-checks a new one before it serves and swaps it
// in without a restart. The supervisor and the
// agent are two processes, so Slots reads its state from disk on every call
// and changes it under a file lock.
package firmware
