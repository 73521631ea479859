package fleet

import (
	"context"
	"encoding/json"
	"maps"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

func (d *simDevice) lastDesired() (fleetwire.DesiredConfig, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.desired) == 0 {
		return fleetwire.DesiredConfig{}, false
	}
	return d.desired[len(d.desired)-1], true
}

// TestConfigLayersOnBroker sets fleet defaults, board/region/cohort groups
// and a device override on the embedded broker and checks what each device
// receives: the merge in the documented order, a new version exactly when
// a device's merged values change (a layer, a label or its board), and the
// source of each key.
func TestConfigLayersOnBroker(t *testing.T) {
	b := startBroker(t, broker.Config{DevAuth: true})
	m := openManager(t, Config{DataDir: t.TempDir(), Broker: b})
	url := "mqtt://" + b.TCPAddr()
	ctx := context.Background()
	s := func(v string) *string { return &v }
	set := func(scope string, kv ...string) {
		t.Helper()
		u := ConfigUpdate{Merge: true, Values: map[string]*string{}}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "-" {
				u.Values[kv[i]] = nil
			} else {
				u.Values[kv[i]] = s(kv[i+1])
			}
		}
		if _, err := m.SetConfigLayer(ctx, scope, u); err != nil {
			t.Fatal(err)
		}
	}
	boards := map[string]string{"car-1": "rk3588", "car-2": "rk3588", "car-3": "generic"}
	devs := map[string]*simDevice{}
	for id, board := range boards {
		devs[id] = newSimDevice(t, url, id, simOpts{})
		st, _ := json.Marshal(fleetwire.Status{State: "online", Version: "sim-1", Board: board, Time: time.Now()})
		waitFor(t, id+" online", func() bool { d, err := m.Device(id); return err == nil && d.State() == "online" })
		if _, err := devs[id].cm.Publish(ctx, pub(topics.Device(id, fleetwire.SuffixStatus), st, true)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, id+" board", func() bool { d, _ := m.Device(id); return d.Status.Board == board })
	}
	for id, labels := range map[string]map[string]*string{"car-1": {"region": s("eu")}, "car-2": {"region": s("us"), "cohort": s("beta")}} {
		if _, err := m.SetLabels(id, labels); err != nil {
			t.Fatal(err)
		}
	}
	set("fleet", "route-threshold", "0.5", "log-level", "info")
	set("board=rk3588", "route-threshold", "0.6")
	set("region=eu", "route-threshold", "0.7", "local-queue", "8")
	set("cohort=beta", "log-level", "debug")
	if _, err := m.SetConfig(ctx, "car-1", ConfigUpdate{Merge: true, Values: map[string]*string{"local-queue": s("16")}}); err != nil {
		t.Fatal(err)
	}

	want := map[string]map[string]string{
		"car-1": {"route-threshold": "0.7", "log-level": "info", "local-queue": "16"},
		"car-2": {"route-threshold": "0.6", "log-level": "debug"},
		"car-3": {"route-threshold": "0.5", "log-level": "info"},
	}
	arrived := func(id string, vals map[string]string) {
		t.Helper()
		waitFor(t, id+" receives its merged config", func() bool {
			dc, ok := devs[id].lastDesired()
			return ok && maps.Equal(dc.Values, vals)
		})
	}
	for id, vals := range want {
		arrived(id, vals)
	}
	d1, _ := m.Device("car-1")
	if src := d1.ConfigSources; src["route-threshold"] != "region=eu" || src["local-queue"] != "device" || src["log-level"] != "fleet" {
		t.Fatalf("car-1 sources %v", src)
	}
	versions := map[string]uint64{}
	for id := range want {
		d, _ := m.Device(id)
		versions[id] = d.Desired.Version
	}

	// A group change that only car-2 falls in moves car-2's version alone.
	set("cohort=beta", "log-level", "warn")
	want["car-2"]["log-level"] = "warn"
	arrived("car-2", want["car-2"])
	for id := range want {
		d, _ := m.Device(id)
		if grew := d.Desired.Version - versions[id]; (id == "car-2") != (grew == 1) || grew > 1 {
			t.Fatalf("%s version %d → %d after a cohort=beta change", id, versions[id], d.Desired.Version)
		}
	}
	// A label brings car-3 into a group; a new board takes car-2 out of one.
	if _, err := m.SetLabels("car-3", map[string]*string{"region": s("eu")}); err != nil {
		t.Fatal(err)
	}
	arrived("car-3", map[string]string{"route-threshold": "0.7", "log-level": "info", "local-queue": "8"})
	st, _ := json.Marshal(fleetwire.Status{State: "online", Version: "sim-1", Board: "imx8", Time: time.Now()})
	if _, err := devs["car-2"].cm.Publish(ctx, pub(topics.Device("car-2", fleetwire.SuffixStatus), st, true)); err != nil {
		t.Fatal(err)
	}
	arrived("car-2", map[string]string{"route-threshold": "0.5", "log-level": "warn"})
	// Removing a fleet key removes it where no other layer sets it.
	set("fleet", "log-level", "-")
	arrived("car-1", map[string]string{"route-threshold": "0.7", "local-queue": "16"})
	arrived("car-3", map[string]string{"route-threshold": "0.7", "local-queue": "8"})

	ls, err := m.ConfigLayers()
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, l := range ls {
		order = append(order, l.Scope)
	}
	if got := order; len(got) != 4 || got[0] != "fleet" || got[1] != "board=rk3588" || got[2] != "region=eu" || got[3] != "cohort=beta" {
		t.Fatalf("layers in order %v", got)
	}
	if ls[1].Devices != 1 || ls[2].Devices != 2 {
		t.Fatalf("layer device counts %+v", ls)
	}

	// The merge survives a restart of the Manager: the state is in bbolt.
	dir := m.cfg.DataDir
	m.Close()
	m2 := openManager(t, Config{DataDir: dir, Broker: b})
	d1, _ = m2.Device("car-1")
	if !maps.Equal(d1.Desired.Values, map[string]string{"route-threshold": "0.7", "local-queue": "16"}) {
		t.Fatalf("after restart: %+v", d1.Desired)
	}
	checkStore(t, m2)
}
