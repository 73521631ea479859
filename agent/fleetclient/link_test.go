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

// tunnel is one device's MQTT session through a tunnel: the link
// emulator's TCP relay on lte-poor (seed 26, which loses two of the first
// 30 segments up and one of the first 10 down), 50 records and config v1
// over it, then a blackout while 300 records pile up and the cloud
// publishes config v2.
type tunnel struct {
	relay    *linkemu.TCPRelay
	cloud    *fakeCloud
	dev      *device
	id       string
	all      []uint64
	connects uint64 // the device's connections before the blackout
	// drain is how long after the link returned the backlog was ingested
	// and the store empty; configAt, config v2 applied and reported.
	drain, configAt time.Duration
}

// runTunnel runs the session with cfg (the broker URL, device id, store and
// config hook are set here), keeps the link dark for dark, calls inDark
// just before the link returns, and checks that afterwards the cloud has
// every record exactly once by (device, seq) — redeliveries are counted
// and dropped — the store is empty and each config version was applied
// once.
func runTunnel(t *testing.T, id string, cfg Config, dark time.Duration, inDark func(*tunnel)) *tunnel {
	t.Helper()
	b := brokertest.StartMochi(t)
	topics := fleetwire.Topics{}
	tn := &tunnel{id: id, cloud: startCloud(t, b.URL(), topics)} // in the data centre, next to the broker
	u, err := url.Parse(b.URL())
	if err != nil {
		t.Fatal(err)
	}
	p, _ := linkemu.Lookup("lte-poor")
	if tn.relay, err = linkemu.ListenTCP(linkemu.Config{Target: u.Host, Profile: p, Seed: 26}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tn.relay.Close() })

	store := openStore(t)
	var mu sync.Mutex // guards applied
	applied := map[uint64]int{}
	cfg.BrokerURL, cfg.DeviceID, cfg.Store = "mqtt://"+tn.relay.Addr().String(), id, store
	cfg.OnConfig = func(_ context.Context, c fleetwire.DesiredConfig) ([]string, error) {
		mu.Lock()
		defer mu.Unlock()
		applied[c.Version]++
		return nil, nil
	}
	tn.dev = startDevice(t, cfg)
	cloud := tn.cloud
	cloud.waitFor("online", func() bool { _, ok := cloud.lastStatus(id); return ok })
	desired := topics.Device(id, fleetwire.SuffixConfigDesired)
	reported := func(v uint64) func() bool {
		return func() bool {
			r := cloud.reported[id]
			return len(r) > 0 && r[len(r)-1].Version == v && r[len(r)-1].Applied
		}
	}

	tn.all = appendN(t, store, 50, "lossy")
	cloud.publish(desired, true, fleetwire.DesiredConfig{Version: 1, Values: map[string]string{"route": "auto"}})
	cloud.waitFor("records over lte-poor", func() bool { return len(cloud.seen[id]) == len(tn.all) })
	cloud.waitFor("config v1 reported", reported(1))
	tn.connects = tn.dev.Stats().Connects

	tn.relay.BlackOut()
	start := time.Now()
	tn.all = append(tn.all, appendN(t, store, 300, "tunnel")...)
	cloud.publish(desired, true, fleetwire.DesiredConfig{Version: 2, Values: map[string]string{"route": "local"}})
	time.Sleep(time.Until(start.Add(dark))) // the blackout's length, not a wait for an outcome
	inDark(tn)
	tn.relay.Restore()
	back := time.Now()
	cloud.waitFor("backlog ingested", func() bool { return len(cloud.seen[id]) == len(tn.all) })
	waitUntil(t, "store drained", func() bool { return store.Stats().Records == 0 })
	tn.drain = time.Since(back)
	cloud.waitFor("config v2 reported", reported(2))
	tn.configAt = time.Since(back)

	cloud.mu.Lock()
	for _, seq := range tn.all {
		if _, ok := cloud.seen[id][seq]; !ok {
			t.Errorf("seq %d lost", seq)
		}
	}
	if distinct := len(cloud.seen[id]); distinct != len(tn.all) {
		t.Errorf("cloud has %d distinct records, want %d", distinct, len(tn.all))
	}
	cloud.mu.Unlock()
	mu.Lock()
	if applied[1] != 1 || applied[2] != 1 {
		t.Errorf("configs applied %v, want each version once", applied)
	}
	mu.Unlock()
	return tn
}

// logf logs what the run measured (docs/transport.md quotes it).
func (tn *tunnel) logf(t *testing.T) {
	tn.cloud.mu.Lock()
	redeliv := tn.cloud.redeliv
	tn.cloud.mu.Unlock()
	st := tn.dev.Stats()
	t.Logf("%d records, %d redelivered and deduplicated; %d reconnects; after the link returned: backlog of 300 drained in %v, config v2 applied and reported in %v; device %+v; link %+v",
		len(tn.all), redeliv, st.Connects-tn.connects, tn.drain.Round(time.Millisecond), tn.configAt.Round(time.Millisecond), st, tn.relay.Stats())
}

// TestTelemetryAndConfigThroughLossyLinkAndTunnel runs the device's MQTT
// session (the agent's defaults for batching, rate and ack timeout)
// through lte-poor and a 1.5 s tunnel (runTunnel). While dark nothing
// reaches the cloud; afterwards every record is there once and each config
// applied once.
func TestTelemetryAndConfigThroughLossyLinkAndTunnel(t *testing.T) {
	if raceEnabled {
		t.Skip("waits on the emulated link for seconds; make test runs it without -race (RACE_FULL)")
	}
	tn := runTunnel(t, "dev-tunnel", Config{}, 1500*time.Millisecond, func(tn *tunnel) {
		tn.cloud.mu.Lock()
		during := len(tn.cloud.seen[tn.id])
		tn.cloud.mu.Unlock()
		if during != 50 {
			t.Fatalf("%d records reached the cloud through a blackout", during-50)
		}
	})
	st := tn.relay.Stats()
	// The config published in the dark waited for the link (the
	// telemetry did not: QoS 1 waits for the PUBACK of the batch in flight,
	// so the device sends nothing more until the link returns).
	if st.Down.BlackoutHeld == 0 || st.Up.Retransmits == 0 || st.Down.Retransmits == 0 {
		t.Errorf("the session did not cross the emulated link: %+v", st)
	}
	tn.logf(t)
}

// TestBlackoutPastKeepAlive: a tunnel longer than the MQTT keep-alive, so
// that the connection itself is given up — the device's client when its
// PINGREQ goes a keep-alive unanswered, the broker after 1.5 keep-alives of
// silence — and the device reconnects to its stored session when the link
// returns. A 1 s keep-alive stands in for the agent's 30 s (MQTT counts it
// in whole seconds, so 1 s is the shortest), and a 4 s blackout for a
// 2-minute one. runTunnel checks every record arrives once and each config
// is applied once.
func TestBlackoutPastKeepAlive(t *testing.T) {
	if raceEnabled {
		t.Skip("waits on the emulated link for seconds; make test runs it without -race (RACE_FULL)")
	}
	cfg := Config{KeepAlive: time.Second, BackoffMin: 100 * time.Millisecond, BackoffMax: time.Second}
	tn := runTunnel(t, "dev-long-tunnel", cfg, 4*time.Second, func(*tunnel) {})
	if st := tn.dev.Stats(); st.Connects <= tn.connects {
		t.Fatalf("the MQTT connection outlived a blackout of 4 keep-alives (connects %d before, %d after)", tn.connects, st.Connects)
	}
	tn.logf(t)
}
