// Package bolttest checks bbolt files in tests: the agent's two bbolt
// stores (agent/fleetclient/boltqueue, the MQTT outbound queue, and
// agent/telemetry, the telemetry spool) both verify at every test's end that
// what they left on disk is a consistent B+tree, since a torn write there
// is what loses a device's data across a power cut.
package bolttest

import (
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Check opens the closed bbolt file at path read-only and runs bbolt's
// consistency check over it, failing t on the first problem.
func Check(t testing.TB, path string) {
	t.Helper()
	// The timeout only guards against a store left open by the test.
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("reopen %s for check: %v", path, err)
	}
	defer db.Close()
	if err := db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			return err
		}
		return nil
	}); err != nil {
		t.Errorf("bbolt check %s: %v", path, err)
	}
}
