// Package firmware is over-the-air updates for the agent: the signed bundle
// format, A/B slots with rollback, and board profiles.
package firmware
