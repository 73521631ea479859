package fleet

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/eclipse/paho.golang/packets"

	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// TestPendingCommandSentWhenDeviceComesOnline: a command issued while its
// device is away (its publish reaches nobody: the device keeps no session)
// is sent again when the device's status says it is online, from the
// pending count the status transaction read.
func TestPendingCommandSentWhenDeviceComesOnline(t *testing.T) {
	b := startBroker(t, broker.Config{DevAuth: true})
	m := openManager(t, Config{DataDir: t.TempDir(), Broker: b})
	cs, err := m.SendCommand(context.Background(), "car-7", "reload-model", nil)
	if err != nil {
		t.Fatal(err)
	}
	d := &rawDevice{id: "car-7"}
	if err := d.connect(b.TCPAddr()); err != nil {
		t.Fatal(err)
	}
	defer d.conn.Close()
	sp := packets.NewControlPacket(packets.SUBSCRIBE)
	sp.Content.(*packets.Subscribe).PacketID = 3
	sp.Content.(*packets.Subscribe).Subscriptions = []packets.SubOptions{{Topic: topics.Device("car-7", fleetwire.SuffixCmd), QoS: 1}}
	if err := d.write(sp); err != nil {
		t.Fatal(err)
	}
	if r, err := d.read(); err != nil {
		t.Fatal(err)
	} else if _, ok := r.Content.(*packets.Suback); !ok {
		t.Fatalf("want SUBACK, got %v", r.Content)
	}
	pp := packets.NewControlPacket(packets.PUBLISH)
	p := pp.Content.(*packets.Publish)
	p.QoS, p.PacketID, p.Topic = 1, 4, topics.Device("car-7", fleetwire.SuffixStatus)
	p.Payload, _ = json.Marshal(fleetwire.Status{State: "online", Version: "1.0.0"})
	if err := d.write(pp); err != nil {
		t.Fatal(err)
	}
	for {
		r, err := d.read() // 60 s hang guard
		if err != nil {
			t.Fatal(err)
		}
		if pub, ok := r.Content.(*packets.Publish); ok && pub.Topic == topics.Device("car-7", fleetwire.SuffixCmd) {
			var c fleetwire.Command
			if err := json.Unmarshal(pub.Payload, &c); err != nil || c.ID != cs.ID {
				t.Fatalf("command %s (%v), want %s", pub.Payload, err, cs.ID)
			}
			return
		}
	}
}
