package boltqueue

import (
	"encoding/binary"
	"fmt"
	"reflect"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestQuarantineKeepsTheNewest: past KeepQuarantined, the oldest
// quarantined entries go and the newest stay. (The bound once counted with
// Bucket.Stats, which does not see the transaction's own changes, and
// emptied the bucket instead.)
func TestQuarantineKeepsTheNewest(t *testing.T) {
	q, _ := openQueue(t, Config{KeepQuarantined: 3})
	for i := 1; i <= 5; i++ {
		enqueue(t, q, fmt.Sprint("m", i))
		e, err := q.Peek()
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Quarantine(); err != nil {
			t.Fatal(err)
		}
	}
	var kept []uint64
	if err := q.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(q.quar).ForEach(func(k, _ []byte) error {
			kept = append(kept, binary.BigEndian.Uint64(k))
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	if want := []uint64{3, 4, 5}; !reflect.DeepEqual(kept, want) {
		t.Fatalf("quarantine holds %v, want %v", kept, want)
	}
	if st := q.Stats(); st.Corrupt != 5 || st.Entries != 0 {
		t.Fatalf("stats %+v", st)
	}
}
