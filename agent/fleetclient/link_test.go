package fleetclient

import (
	"context"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/phaseless/phaseless/agent/fleetclient/internal/brokertest"
	"github.com/phaseless/phaseless/transport/fleetwire"
	"github.com/phaseless/phaseless/transport/linkemu"
)

// TestTelemetryAndConfigThroughLossyLinkAndTunnel runs the device's MQTT
// session (the agent's defaults for batching, rate and ack timeout) through
// the link emulator's TCP relay on lte-poor, then blacks the link out, as
// a tunnel does, while records pile up and the cloud publishes a new
// config. After the link returns, the cloud has every record once (by
// (device, seq); redeliveries are counted), the store is empty, and each
// config was applied once. It logs the backlog's drain time, measured from
// the link's return (docs/transport.md quotes it).
func TestTelemetryAndConfigThroughLossyLinkAndTunnel(t *testing.T) {
	if raceEnabled {
		t.Skip("waits on the emulated link for seconds; make test runs it without -race (RACE_FULL)")
	}
	b := brokertest.StartMochi(t)
	topics := fleetwire.Topics{}
	cloud := startCloud(t, b.URL(), topics) // in the data centre, next to the broker
	u, err := url.Parse(b.URL())
	if err != nil {
		t.Fatal(err)
	}
	p, _ := linkemu.Lookup("lte-poor")
	relay, err := linkemu.ListenTCP(linkemu.Config{Target: u.Host, Profile: p, Seed: 26}) // 26: two of the first 30 segments up, one of the first 10 down, lost
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()

	const id = "dev-tunnel"
	store := openStore(t)
	var mu sync.Mutex // guards applied
	applied := map[uint64]int{}
	d := startDevice(t, Config{BrokerURL: "mqtt://" + relay.Addr().String(), DeviceID: id, Store: store,
		OnConfig: func(_ context.Context, c fleetwire.DesiredConfig) ([]string, error) {
			mu.Lock()
			defer mu.Unlock()
			applied[c.Version]++
			return nil, nil
		}})
	cloud.waitFor("online", func() bool { _, ok := cloud.lastStatus(id); return ok })
	desired := topics.Device(id, fleetwire.SuffixConfigDesired)
	reported := func(v uint64) func() bool {
		return func() bool {
			r := cloud.reported[id]
			return len(r) > 0 && r[len(r)-1].Version == v && r[len(r)-1].Applied
		}
	}

	all := appendN(t, store, 50, "lossy")
	cloud.publish(desired, true, fleetwire.DesiredConfig{Version: 1, Values: map[string]string{"route": "auto"}})
	cloud.waitFor("records over lte-poor", func() bool { return len(cloud.seen[id]) == len(all) })
	cloud.waitFor("config v1 reported", reported(1))

	// The tunnel: nothing crosses for 1.5 s while the device keeps recording
	// and the cloud changes the config.
	relay.BlackOut()
	all = append(all, appendN(t, store, 300, "tunnel")...)
	cloud.publish(desired, true, fleetwire.DesiredConfig{Version: 2, Values: map[string]string{"route": "local"}})
	time.Sleep(1500 * time.Millisecond) // the blackout's length, not a wait for an outcome
	cloud.mu.Lock()
	during := len(cloud.seen[id])
	cloud.mu.Unlock()
	if during != 50 {
		t.Fatalf("%d records reached the cloud through a blackout", during-50)
	}
	relay.Restore()
	back := time.Now()
	cloud.waitFor("backlog ingested", func() bool { return len(cloud.seen[id]) == len(all) })
	waitUntil(t, "store drained", func() bool { return store.Stats().Records == 0 })
	drain := time.Since(back)
	cloud.waitFor("config v2 reported", reported(2))
	configAt := time.Since(back)

	cloud.mu.Lock()
	for _, seq := range all {
		if _, ok := cloud.seen[id][seq]; !ok {
			t.Errorf("seq %d lost", seq)
		}
	}
	distinct, redeliv := len(cloud.seen[id]), cloud.redeliv
	cloud.mu.Unlock()
	if distinct != len(all) {
		t.Errorf("cloud has %d distinct records, want %d", distinct, len(all))
	}
	mu.Lock()
	if applied[1] != 1 || applied[2] != 1 {
		t.Errorf("configs applied %v, want each version once", applied)
	}
	mu.Unlock()
	st := relay.Stats()
	// The config published in the dark waited for the link (the
	// telemetry did not: QoS 1 waits for the PUBACK of the batch in flight,
	// so the device sends nothing more until the link returns).
	if st.Down.BlackoutHeld == 0 || st.Up.Retransmits == 0 || st.Down.Retransmits == 0 {
		t.Errorf("the session did not cross the emulated link: %+v", st)
	}
	t.Logf("%d records, %d redelivered and deduplicated; after the link returned: backlog of 300 drained in %v, config v2 applied and reported in %v; device %+v; link %+v",
		len(all), redeliv, drain.Round(time.Millisecond), configAt.Round(time.Millisecond), d.Stats(), st)
}

// TestBlackoutPastKeepAlive: a tunnel longer than the MQTT keep-alive, so
// that both ends give the connection up — the device when its PINGREQ goes
// unanswered for a keep-alive, the broker after 1.5 keep-alives of silence —
// and the device reconnects to its stored session when the link returns. A
// 1 s keep-alive stands in for the agent's 30 s (MQTT counts it in whole
// seconds, so 1 s is the shortest), and a 4 s blackout for a 2-minute one.
// Afterwards the cloud has every record once by (device, seq), the store is
// empty, and the config published in the dark was applied once.
func TestBlackoutPastKeepAlive(t *testing.T) {
	if raceEnabled {
		t.Skip("waits on the emulated link for seconds; make test runs it without -race (RACE_FULL)")
	}
	b := brokertest.StartMochi(t)
	topics := fleetwire.Topics{}
	cloud := startCloud(t, b.URL(), topics)
	u, err := url.Parse(b.URL())
	if err != nil {
		t.Fatal(err)
	}
	p, _ := linkemu.Lookup("lte-poor")
	relay, err := linkemu.ListenTCP(linkemu.Config{Target: u.Host, Profile: p, Seed: 26}) // as above
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()

	const id = "dev-long-tunnel"
	store := openStore(t)
	var mu sync.Mutex // guards applied
	applied := map[uint64]int{}
	d := startDevice(t, Config{BrokerURL: "mqtt://" + relay.Addr().String(), DeviceID: id, Store: store,
		KeepAlive: time.Second, BackoffMin: 100 * time.Millisecond, BackoffMax: time.Second,
		OnConfig: func(_ context.Context, c fleetwire.DesiredConfig) ([]string, error) {
			mu.Lock()
			defer mu.Unlock()
			applied[c.Version]++
			return nil, nil
		}})
	cloud.waitFor("online", func() bool { _, ok := cloud.lastStatus(id); return ok })
	desired := topics.Device(id, fleetwire.SuffixConfigDesired)
	reported := func(v uint64) func() bool {
		return func() bool {
			r := cloud.reported[id]
			return len(r) > 0 && r[len(r)-1].Version == v && r[len(r)-1].Applied
		}
	}
	all := appendN(t, store, 50, "before")
	cloud.publish(desired, true, fleetwire.DesiredConfig{Version: 1, Values: map[string]string{"route": "auto"}})
	cloud.waitFor("records before the tunnel", func() bool { return len(cloud.seen[id]) == len(all) })
	cloud.waitFor("config v1 reported", reported(1))
	connects := d.Stats().Connects

	relay.BlackOut()
	dark := time.Now()
	all = append(all, appendN(t, store, 300, "tunnel")...)
	cloud.publish(desired, true, fleetwire.DesiredConfig{Version: 2, Values: map[string]string{"route": "local"}})
	time.Sleep(time.Until(dark.Add(4 * time.Second))) // the blackout's length, not a wait for an outcome
	relay.Restore()
	back := time.Now()
	cloud.waitFor("backlog ingested", func() bool { return len(cloud.seen[id]) == len(all) })
	waitUntil(t, "store drained", func() bool { return store.Stats().Records == 0 })
	drain := time.Since(back)
	cloud.waitFor("config v2 reported", reported(2))
	configAt := time.Since(back)

	st := d.Stats()
	if st.Connects <= connects {
		t.Fatalf("the MQTT connection outlived a blackout of 4 keep-alives (connects %d before, %d after)", connects, st.Connects)
	}
	cloud.mu.Lock()
	for _, seq := range all {
		if _, ok := cloud.seen[id][seq]; !ok {
			t.Errorf("seq %d lost", seq)
		}
	}
	distinct, redeliv := len(cloud.seen[id]), cloud.redeliv
	cloud.mu.Unlock()
	if distinct != len(all) {
		t.Errorf("cloud has %d distinct records, want %d", distinct, len(all))
	}
	mu.Lock()
	if applied[1] != 1 || applied[2] != 1 {
		t.Errorf("configs applied %v, want each version once", applied)
	}
	mu.Unlock()
	t.Logf("%d records, %d redelivered and deduplicated; %d reconnects; after the link returned: backlog of 300 drained in %v, config v2 applied and reported in %v; device %+v; link %+v",
		len(all), redeliv, st.Connects-connects, drain.Round(time.Millisecond), configAt.Round(time.Millisecond), st, relay.Stats())
}
