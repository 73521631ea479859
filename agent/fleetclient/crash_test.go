package fleetclient

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/phaseless/phaseless/agent/internal/bolttest"
	"github.com/phaseless/phaseless/internal/crashtest"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// TestKillDuringCommandResultsKeepsThem kills a device that saves command
// results as fast as it can, many times over one state file. After every
// kill each acknowledged result is still answerable (so its command never
// runs twice) unless newer ones trimmed it, trimming took the oldest
// first, the two buckets agree and stay within keepResults, and bbolt's
// check is clean.
func TestKillDuringCommandResultsKeepsThem(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	crashtest.Run(t, crashtest.Config{
		Cycles: crashtest.Cycles(t, 50), // 100 with PHASELESS_CRASH_CYCLES=100
		Arg:    path,
		Child: func(path string, ack *crashtest.Acker) {
			db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
			if err != nil {
				crashtest.Fail("open: %v", err)
			}
			// A kill -9 keeps the page cache, so fsync decides nothing this
			// test checks; without it the child saves enough results per
			// life to pass keepResults and exercise the trimming.
			db.NoSync = true
			rs, err := newResultStore(db)
			if err != nil {
				crashtest.Fail("results: %v", err)
			}
			for n := 0; ; n++ {
				id := fmt.Sprintf("%d-%d", os.Getpid(), n)
				if err := rs.put(fleetwire.CommandResult{ID: id, OK: true, Output: "out " + id}); err != nil {
					crashtest.Fail("put: %v", err)
				}
				ack.Ack("%s", id)
			}
		},
		Verify: func(t *testing.T, _ int, _, all []string) {
			bolttest.Check(t, path)
			db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			rs, err := newResultStore(db)
			if err != nil {
				t.Fatal(err)
			}
			lost := ""                           // newest acknowledged result found missing
			for i := len(all) - 1; i >= 0; i-- { // newest first
				res, found, err := rs.get(all[i])
				switch {
				case err != nil:
					t.Fatalf("result %s: %v", all[i], err)
				case found && (res.ID != all[i] || res.Output != "out "+all[i]):
					t.Fatalf("result %s stored as %+v", all[i], res)
				case found && lost != "":
					t.Fatalf("result %s lost although the older %s is kept", lost, all[i])
				case !found && lost == "":
					lost = all[i]
				}
			}
			err = db.View(func(tx *bolt.Tx) error {
				nr, no := tx.Bucket(bucketResults).Stats().KeyN, tx.Bucket(bucketOrder).Stats().KeyN
				if nr != no || nr > keepResults || (len(all) >= keepResults && nr != keepResults) {
					return fmt.Errorf("%d results, %d order entries, %d acknowledged, bound %d", nr, no, len(all), keepResults)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		},
	})
}
