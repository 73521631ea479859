// Package bolttest checks bbolt files in tests: the agent's two bbolt
// stores (agent/fleetclient/boltqueue, the MQTT outbound queue, and
// agent/telemetry, the telemetry spool) both verify at every test's end that
// what they left on disk is a consistent B+tree, since a torn write there
// is what loses a device's data across a power cut.
package bolttest

import (
	"testing"

	"github.com/phaseless/phaseless/internal/crashtest"
)

// Check opens the closed bbolt file at path read-only and runs bbolt's
// consistency check over it, failing t on the first problem.
func Check(t testing.TB, path string) {
	t.Helper()
	crashtest.CheckBolt(t, path)
}
