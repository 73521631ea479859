package fleet

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet/pgtest"
	"github.com/phaseless/phaseless/cloud/fleetapi"
)

// TestActiveActiveManagers runs three Managers on one PostgreSQL database
// and one Mosquitto, as three clouds would: no lease, each with its own
// MQTT session in the shared-subscription group. Telemetry is split
// between them and stored once; a rollout stepped by all three at once
// sends each device one update command.
func TestActiveActiveManagers(t *testing.T) {
	db := pgtest.CreateDB(t, pgtest.Start(t), "fleet")
	users := map[string]string{"phaseless-cloud": "cloud-pw"}
	var ids []string
	for i := range 6 {
		id := fmt.Sprintf("aa-%d", i)
		ids = append(ids, id)
		users[id] = "pw-" + id
	}
	brokerURL := startMosquitto(t, users, "phaseless-cloud")
	dir := t.TempDir()
	var ms []*Manager
	for i := range 3 {
		m := openManager(t, Config{DataDir: dir, DB: db, RolloutInterval: time.Hour, External: &External{
			URL: brokerURL, Username: "phaseless-cloud", Password: "cloud-pw", ClientID: fmt.Sprintf("phaseless-cloud-%d", i)}})
		waitFor(t, "manager connected", func() bool { return m.Ready() == nil })
		ms = append(ms, m)
	}
	var devs []*simDevice
	for _, id := range ids {
		d := newSimDevice(t, brokerURL, id, simOpts{user: id, pass: users[id]})
		devs = append(devs, d)
	}
	waitFor(t, "every device registered", func() bool {
		ds, _ := ms[2].Devices()
		return len(ds) == len(ids)
	})
	for _, d := range devs {
		d.generate(300)
	}
	for _, d := range devs {
		waitFor(t, d.id+" acknowledged", d.ackedAll)
	}
	c, err := ms[1].Counts()
	if err != nil {
		t.Fatal(err)
	}
	if c.Stored != 1800 || c.Ingested != 1800 {
		t.Fatalf("counts %+v: want each of 1,800 records stored once", c)
	}
	// Each batch went to one manager of the group, not to all three.
	shared, received, published := 0, 0.0, 0
	for i, m := range ms {
		n := m.mBatches.Value()
		t.Logf("manager %d: %v batches", i, n)
		if n > 0 {
			shared++
		}
		received += n
	}
	for _, d := range devs {
		_, sent := d.stats()
		published += sent
	}
	if shared < 2 || received > float64(published) {
		t.Fatalf("devices published %d batches, managers received %v, %d managers got some: the shared subscription did not split them", published, received, shared)
	}

	// A rollout that every manager steps at the same moment.
	r := &Rollout{ID: "r-aa", Spec: RolloutSpec{Stages: []float64{0.5, 1}, UpdateTimeout: fleetapi.Duration(time.Hour)},
		Kind: "agent", Version: "9.9", URL: "http://example.invalid/a.plota", State: RolloutRunning, Devices: map[string]*RolloutDevice{}}
	if err := ms[0].st.putRollout(r); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 3 {
		for _, m := range ms {
			wg.Go(func() { m.StepRollouts(context.Background()) })
		}
	}
	wg.Wait()
	got, err := ms[2].Rollout("r-aa")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Devices) != 3 {
		t.Fatalf("stage 1 of 2 holds %d devices, want 3", len(got.Devices))
	}
	time.Sleep(time.Second) // any second publish would land by now (a hang guard would not show one)
	sent := 0
	for _, d := range devs {
		d.mu.Lock()
		n := len(d.cmds)
		var cid string
		if n > 0 {
			cid = d.cmds[0].ID
		}
		d.mu.Unlock()
		rd := got.Devices[d.id]
		switch {
		case n > 1:
			t.Errorf("%s got %d update commands", d.id, n)
		case rd == nil && n != 0:
			t.Errorf("%s is not in stage 1 but got a command", d.id)
		case rd != nil && (n != 1 || cid != rd.Command):
			t.Errorf("%s: got %d commands (%s), the rollout recorded %q", d.id, n, cid, rd.Command)
		}
		sent += n
	}
	if sent != 3 {
		t.Fatalf("%d commands sent, want 3", sent)
	}
}

// TestClosedManagerLeavesTheShare: a manager that stops cleanly leaves the
// shared-subscription group at once. Its session outlives it (so a restart
// resumes it), and Mosquitto keeps handing such a session its share of the
// devices' messages until it expires; telemetry sent after the stop must
// reach the managers still there without waiting for a device's resend
// (the device here never resends).
func TestClosedManagerLeavesTheShare(t *testing.T) {
	db := pgtest.CreateDB(t, pgtest.Start(t), "fleet")
	users := map[string]string{"phaseless-cloud": "cloud-pw", "leave-1": "pw-1"}
	brokerURL := startMosquitto(t, users, "phaseless-cloud")
	dir := t.TempDir()
	var ms []*Manager
	for i := range 2 {
		m := openManager(t, Config{DataDir: dir, DB: db, RolloutInterval: time.Hour, External: &External{
			URL: brokerURL, Username: "phaseless-cloud", Password: "cloud-pw", ClientID: fmt.Sprintf("phaseless-cloud-leave-%d", i)}})
		waitFor(t, "manager connected", func() bool { return m.Ready() == nil })
		ms = append(ms, m)
	}
	d := newSimDevice(t, brokerURL, "leave-1", simOpts{user: "leave-1", pass: "pw-1", retryAfter: time.Hour})
	waitFor(t, "device registered", func() bool {
		ds, _ := ms[1].Devices()
		return len(ds) == 1
	})
	if err := ms[0].Close(); err != nil {
		t.Fatal(err)
	}
	d.generate(1000) // ten batches, each sent once
	waitFor(t, "every batch acknowledged by the manager still there", d.ackedAll)
	if n := ms[1].mBatches.Value(); n != 10 {
		t.Fatalf("the remaining manager stored %v batches, want 10", n)
	}
}
