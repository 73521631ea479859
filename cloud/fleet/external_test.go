package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/phaseless/phaseless/transport/fleetwire"
)

// TestExternalMosquitto runs the same Manager logic over a real Mosquitto
// with the fleet ACL: a device publishing as another is refused, and a
// Manager that is down for a while loses nothing and counts nothing twice
// (Mosquitto queues telemetry in the Manager's persistent session, devices
// resend what was not acknowledged).
func TestExternalMosquitto(t *testing.T) {
	users := map[string]string{"phaseless-cloud": "cloud-pw"}
	var ids []string
	for i := range 4 {
		id := fmt.Sprintf("m-%d", i)
		ids = append(ids, id)
		users[id] = "pw-" + id
	}
	brokerURL := startMosquitto(t, users, "phaseless-cloud")
	dir := t.TempDir()
	ext := func() *External {
		return &External{URL: brokerURL, Username: "phaseless-cloud", Password: "cloud-pw", ClientID: "phaseless-cloud-test"}
	}
	m1 := openManager(t, Config{DataDir: dir, External: ext()})
	waitFor(t, "manager connected", func() bool { return m1.Ready() == nil })

	var devs []*simDevice
	for _, id := range ids {
		devs = append(devs, newSimDevice(t, brokerURL, id, simOpts{user: id, pass: users[id], retryAfter: 300 * time.Millisecond}))
	}
	waitFor(t, "statuses", func() bool {
		ds, _ := m1.Devices()
		return len(ds) == len(ids)
	})

	t.Run("acl denies publishing as another device", func(t *testing.T) {
		forger := devs[0]
		batch, _ := json.Marshal(fleetwire.TelemetryBatch{DeviceID: "m-1", BatchID: "forged", Records: []fleetwire.Record{{Seq: 999999, Kind: "request"}}})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := forger.cm.Publish(ctx, pub(topics.Device("m-1", fleetwire.SuffixTelemetry), batch, false))
		// Mosquitto 2.0 answers a denied v5 publish with PUBACK 0x87 (not
		// authorized), as the embedded broker does.
		if err == nil || resp == nil || resp.ReasonCode != 0x87 {
			t.Fatalf("denied publish: want PUBACK 0x87, got %+v %v", resp, err)
		}
		// An allowed publish on the same connection afterwards: once it is
		// stored, the denied one would have been too.
		forger.generate(1)
		waitFor(t, "allowed telemetry", forger.ackedAll)
		if dev, _ := m1.Device("m-1"); dev.Telemetry.LastSeq == 999999 {
			t.Fatal("forged telemetry ingested")
		}
		// Reading another device's commands: Mosquitto 2.0.11 grants the
		// SUBACK and enforces read access at delivery, so check delivery.
		sa, err := forger.cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topics.Device("m-1", fleetwire.SuffixCmd), QoS: 1}}})
		if err == nil {
			t.Logf("mosquitto SUBACK for another device's commands: %v", sa.Reasons)
		}
		cs, err := m1.SendCommand(ctx, "m-1", "update", nil)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "command at its device", func() bool {
			devs[1].mu.Lock()
			defer devs[1].mu.Unlock()
			return len(devs[1].cmds) == 1 && devs[1].cmds[0].ID == cs.ID
		})
		// Then one for the forger itself: MQTT orders deliveries per
		// session, so when it arrives the other one would have too.
		own, err := m1.SendCommand(ctx, "m-0", "update", nil)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "own command", func() bool {
			forger.mu.Lock()
			defer forger.mu.Unlock()
			return len(forger.cmds) > 0 && forger.cmds[len(forger.cmds)-1].ID == own.ID
		})
		forger.mu.Lock()
		defer forger.mu.Unlock()
		for _, c := range forger.cmds {
			if c.ID == cs.ID {
				t.Fatal("device received another device's command")
			}
		}
	})
	if t.Failed() {
		return
	}

	for _, d := range devs {
		d.generate(300)
	}
	waitFor(t, "some telemetry stored", func() bool { c, _ := m1.Counts(); return c.Stored >= 300 })
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		d.generate(200) // while the cloud is down
	}
	waitFor(t, "resends while down", func() bool { _, sent := devs[0].stats(); return sent > 8 })
	m2 := openManager(t, Config{DataDir: dir, External: ext()})
	for _, d := range devs {
		waitFor(t, d.id+" acked", d.ackedAll)
	}
	want := 501 // 1 + 300 + 200 for the forger, 500 for the rest
	got := exportSeqs(t, m2, "")
	total := 0
	for i, id := range ids {
		n := 500
		if i == 0 {
			n = want
		}
		if len(got[id]) != n {
			t.Fatalf("%s: %d records, want %d", id, len(got[id]), n)
		}
		for j, s := range got[id] {
			if s != uint64(j+1) {
				t.Fatalf("%s: missing seq %d", id, j+1)
			}
		}
		total += n
	}
	c, _ := m2.Counts()
	if c.Stored != uint64(total) || c.Ingested != uint64(total) {
		t.Fatalf("counts %+v, want %d", c, total)
	}
	if c.Duplicates == 0 {
		t.Log("no duplicates seen: the outage did not cause resends this run")
	}

	// Config and commands go out through Mosquitto as well.
	v := "cloud"
	if _, err := m2.SetConfig(context.Background(), "m-2", ConfigUpdate{Values: map[string]*string{"route": &v}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "desired config via mosquitto", func() bool {
		devs[2].mu.Lock()
		defer devs[2].mu.Unlock()
		return len(devs[2].desired) > 0 && devs[2].desired[len(devs[2].desired)-1].Values["route"] == "cloud"
	})
	checkStore(t, m2)
}

// TestExternalRefusesBadCredentials: with a wrong password the Manager
// keeps retrying and is not ready; Close still returns promptly.
func TestExternalRefusesBadCredentials(t *testing.T) {
	brokerURL := startMosquitto(t, map[string]string{"phaseless-cloud": "right"}, "phaseless-cloud")
	m := openManager(t, Config{DataDir: t.TempDir(), External: &External{URL: brokerURL, Username: "phaseless-cloud", Password: "wrong"}})
	// A device-level check of the same broker: the right password works.
	u, _ := url.Parse(brokerURL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	connected := make(chan struct{}, 1)
	cm, err := autopaho.NewConnection(ctx, autopaho.ClientConfig{
		ServerUrls: []*url.URL{u}, ConnectUsername: "phaseless-cloud", ConnectPassword: []byte("right"),
		OnConnectionUp: func(*autopaho.ConnectionManager, *paho.Connack) { connected <- struct{}{} },
		ClientConfig:   paho.ClientConfig{ClientID: "probe"},
	})
	if err != nil {
		t.Fatal(err)
	}
	<-connected
	_ = cm.Disconnect(ctx)
	<-cm.Done()
	if err := m.Ready(); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("ready with a wrong password: %v", err)
	}
	if _, err := m.SetConfig(context.Background(), "dev-1", ConfigUpdate{}); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("SetConfig while not connected: %v", err)
	}
}
