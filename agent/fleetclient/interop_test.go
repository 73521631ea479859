package fleetclient

import (
	"context"
	"sync"
	"testing"

	cfleet "github.com/phaseless/phaseless/cloud/fleet"
	cbroker "github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// TestWithCloudManager runs this device client against the real cloud side
// (cloud/fleet's embedded broker with its auth and ACL, and its Manager),
// so a drift in the shared contract fails here. Tests may cross the
// agent/cloud line; the agent binary does not (see its deps_test).
func TestWithCloudManager(t *testing.T) {
	b, err := cbroker.Start(cbroker.Config{TCPAddr: "127.0.0.1:0", DevAuth: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m, err := cfleet.Open(cfleet.Config{DataDir: t.TempDir(), Broker: b, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	const id = "dev-interop"
	store := openStore(t)
	appendN(t, store, 1000, "before-connect")
	var mu sync.Mutex
	var applied []fleetwire.DesiredConfig
	d := startDevice(t, Config{BrokerURL: "mqtt://" + b.TCPAddr(), DeviceID: id, Version: "9.9", Store: store, UplinkRate: -1,
		OnConfig: func(_ context.Context, c fleetwire.DesiredConfig) ([]string, error) {
			mu.Lock()
			defer mu.Unlock()
			applied = append(applied, c)
			return nil, nil
		}})
	d.Handle("ping", func(context.Context, fleetwire.Command) (string, error) { return "pong", nil })

	waitUntil(t, "cloud ingests the backlog", func() bool { c, _ := m.Counts(); return c.Ingested == 1000 })
	waitUntil(t, "device deletes what the cloud acknowledged", func() bool { return store.Stats().Records == 0 })
	route := "local"
	if _, err := m.SetConfig(context.Background(), id, cfleet.ConfigUpdate{Values: map[string]*string{"route": &route}}); err != nil {
		t.Fatal(err)
	}
	cs, err := m.SendCommand(context.Background(), id, "ping", nil)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "command result", func() bool { c, _ := m.Command(id, cs.ID); return c != nil && c.Result != nil })
	waitUntil(t, "config report", func() bool {
		dv, _ := m.Device(id)
		return dv != nil && dv.Reported != nil && dv.Reported.Version == 1
	})

	c, _ := m.Command(id, cs.ID)
	if r := c.Result; !r.OK || r.Output != "pong" {
		t.Errorf("command result %+v", r)
	}
	dv, _ := m.Device(id)
	if !dv.Reported.Applied || dv.Status == nil || dv.Status.State != "online" || dv.Status.Version != "9.9" {
		t.Errorf("device as the cloud sees it: status %+v reported %+v", dv.Status, dv.Reported)
	}
	if cnt, _ := m.Counts(); cnt.Ingested != 1000 || cnt.Stored != 1000 {
		t.Errorf("counts %+v", cnt)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(applied) != 1 || applied[0].Values["route"] != "local" {
		t.Errorf("applied %+v", applied)
	}
}
