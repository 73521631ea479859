package agent

import (
	"context"
	"testing"

	"github.com/phaseless/phaseless/cloud/fleet"
	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/transport/fleetwire"
	"github.com/phaseless/phaseless/transport/pki"
)

// TestRouterBoundReported: with router-alpha set by the fleet and its
// cloud reachable, a device reports its bound on wrong local answers in
// force, and the fleet shows it; when the cloud goes, every request runs
// locally whatever its score, and the device reports the bound suspended
// within seconds, without reconnecting to the broker; in force again when
// the cloud is back.
func TestRouterBoundReported(t *testing.T) {
	pkiDir := t.TempDir()
	if err := pki.EnsureDev(pkiDir, "car-b1"); err != nil {
		t.Fatal(err)
	}
	addr := freeUDPAddr(t)
	cloud := startCloud(t, pkiDir, addr, &gatedEngine{held: make(chan struct{})})
	tc, err := pki.ServerTLS(pkiDir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.Start(broker.Config{TLSAddr: "127.0.0.1:0", TLS: tc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	m, _, _ := startFleetCloudWith(t, fleet.Config{Broker: b})
	cfg := testConfig(t)
	cfg.Cloud, cfg.DeviceID, cfg.PKIDir, cfg.MQTT = addr, "car-b1", pkiDir, "tls://"+b.TLSAddr()
	a, _ := startAgent(t, cfg)
	bound := func(want string) {
		t.Helper()
		waitUntil(t, "the fleet shows the bound "+want, func() bool {
			d, err := m.Device("car-b1")
			return err == nil && d.Status != nil && d.Status.State == "online" && d.Status.RouterBound == want
		})
	}
	waitUntil(t, "the uplink", func() bool { return a.cloud.Link().Connected })
	bound("") // no router-alpha: no bound
	v := "0.05"
	if _, err := m.SetConfigLayer(context.Background(), "fleet", fleet.ConfigUpdate{Merge: true, Values: map[string]*string{"router-alpha": &v}}); err != nil {
		t.Fatal(err)
	}
	bound(fleetwire.RouterBoundInForce)
	connects := a.fleet.Stats().Connects
	cloud.stop(t)
	bound(fleetwire.RouterBoundSuspended)
	cloud = startCloud(t, pkiDir, addr, &gatedEngine{held: make(chan struct{})})
	t.Cleanup(func() { cloud.stop(t) })
	bound(fleetwire.RouterBoundInForce)
	if got := a.fleet.Stats().Connects; got != connects {
		t.Fatalf("the broker connection was redialled (%d connects, was %d): the bound's change must go out on the live one", got, connects)
	}
}
