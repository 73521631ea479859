package fleetclient

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/phaseless/phaseless/transport/fleetwire"
)

// TestBrokerRestartsWithTelemetryInFlight restarts the broker three times
// (mosquitto with SIGKILL, the embedded broker by closing it) while the
// device appends and uplinks telemetry, so QoS 1 batches and their acks
// are in flight at every restart. Every record reaches the cloud, the
// store drains, and the device reconnects once per restart rather than
// looping: its connection count stays within two per broker life.
func TestBrokerRestartsWithTelemetryInFlight(t *testing.T) {
	for _, bk := range brokers {
		t.Run(bk.name, func(t *testing.T) {
			b := bk.start(t)
			cloud := startCloud(t, b.URL(), fleetwire.Topics{})
			const id = "dev-flight"
			store := openStore(t)
			d := startDevice(t, Config{BrokerURL: b.URL(), DeviceID: id, Store: store,
				BatchSize: 16, UplinkRate: -1, AckTimeout: time.Second})
			waitUntil(t, "device connected", d.Connected)

			var mu sync.Mutex // guards all
			var all []uint64
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Go(func() {
				for i := 0; ctx.Err() == nil; i++ {
					seq, err := store.AppendRequest(context.Background(), fleetwire.RequestRecord{TraceID: fmt.Sprint("flight-", i), Decision: "local", Outcome: "ok"})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					all = append(all, seq)
					mu.Unlock()
					time.Sleep(2 * time.Millisecond) // a steady flow, not one burst
				}
			})
			const restarts = 3
			for r := range restarts {
				// Restart only once this life has carried traffic.
				mu.Lock()
				want := len(all) + 20
				mu.Unlock()
				cloud.waitFor(fmt.Sprintf("traffic before restart %d", r), func() bool { return len(cloud.seen[id]) >= want-20 && cloud.batches > 0 })
				b.Stop()
				waitUntil(t, "device notices the outage", func() bool { return !d.Connected() })
				b.Restart()
				waitUntil(t, "device reconnects", d.Connected)
			}
			cancel()
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) { // hang guard
				cloud.mu.Lock()
				got := len(cloud.seen[id])
				cloud.mu.Unlock()
				if got == len(all) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("cloud has %d of %d records; store %+v; device %+v", got, len(all), store.Stats(), d.Stats())
				}
			}
			waitUntil(t, "store drained", func() bool { return store.Stats().Records == 0 })
			cloud.mu.Lock()
			for _, seq := range all {
				if _, ok := cloud.seen[id][seq]; !ok {
					t.Errorf("seq %d lost", seq)
				}
			}
			redeliv := cloud.redeliv
			cloud.mu.Unlock()
			st := d.Stats()
			if st.Connects < restarts+1 || st.Connects > 2*(restarts+1) {
				t.Fatalf("%d connects over %d broker lives: %+v", st.Connects, restarts+1, st)
			}
			t.Logf("%d records over %d restarts, %d redelivered and deduplicated, %d connects", len(all), restarts, redeliv, st.Connects)
		})
	}
}
