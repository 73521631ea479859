package fleet

import (
	"encoding/json"
	"testing"

	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// TestDeviceBacklog: the registry shows the backlog the device reported
// with its newest batch; a late redelivery of an older batch does not bring
// back a stale, larger one.
func TestDeviceBacklog(t *testing.T) {
	b := startBroker(t, broker.Config{DevAuth: true})
	m := openManager(t, Config{DataDir: t.TempDir(), Broker: b})
	send := func(first, n, pending uint64) {
		tb := fleetwire.TelemetryBatch{DeviceID: "car-b", BatchID: "x", Pending: pending}
		for s := first; s < first+n; s++ {
			tb.Records = append(tb.Records, fleetwire.Record{Seq: s, Kind: "request", Data: json.RawMessage(`{}`)})
		}
		p, _ := json.Marshal(tb)
		m.deliver(topics.Device("car-b", fleetwire.SuffixTelemetry), p)
	}
	pending := func() uint64 {
		d, err := m.Device("car-b")
		if err != nil {
			t.Fatal(err)
		}
		return d.Telemetry.PendingOnDevice
	}
	send(1, 10, 900)
	send(11, 10, 890)
	if got := pending(); got != 890 {
		t.Fatalf("backlog %d after the second batch, want 890", got)
	}
	send(1, 10, 900) // the first batch again, acked late
	if got := pending(); got != 890 {
		t.Fatalf("a redelivered old batch set the backlog to %d", got)
	}
}
