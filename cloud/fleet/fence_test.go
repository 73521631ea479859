package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// countingLease counts the round trips Held would make to Redis; it was
// renewed recently, as RedisLease is while Redis answers.
type countingLease struct{ held atomic.Int64 }

func (l *countingLease) Acquire(context.Context) error { return nil }
func (l *countingLease) Held(context.Context) error    { l.held.Add(1); return nil }
func (l *countingLease) Release(context.Context) error { return nil }
func (l *countingLease) HeldRecently() error           { return nil }

// TestNoLeaseRoundTripPerMessage: devices coming online cost the MQTT
// delivery goroutine no lease round trip each (at up to ttl/3 = 5 s each
// when Redis does not answer, a reconnect wave would stall every device's
// messages).
func TestNoLeaseRoundTripPerMessage(t *testing.T) {
	b := startBroker(t, broker.Config{DevAuth: true})
	l := &countingLease{}
	// No rollout tick during the test: each checks the lease, which is not
	// the delivery path this counts.
	m, err := Open(Config{DataDir: t.TempDir(), Broker: b, Lease: l, RolloutInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	before := l.held.Load()
	const n = 50
	for i := range n {
		st, _ := json.Marshal(fleetwire.Status{DeviceID: fmt.Sprintf("car-%d", i), State: "online", Version: "1.0", Time: time.Now()})
		if err := b.Publish(topics.Device(fmt.Sprintf("car-%d", i), fleetwire.SuffixStatus), st, true); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "registered", func() bool { ds, _ := m.Devices(); return len(ds) == n })
	t.Logf("%d Held calls for %d devices coming online", l.held.Load()-before, n)
	if got := l.held.Load() - before; got != 0 {
		t.Errorf("%d lease round trips on the delivery path for %d status messages", got, n)
	}
}
