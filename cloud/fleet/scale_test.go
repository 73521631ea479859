package fleet

import (
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"

	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// rawDevice is a minimal synchronous MQTT v5 device (one goroutine, no
// client library goroutines), so a thousand fit in one test process.
type rawDevice struct {
	id   string
	conn net.Conn
	pass string // the MQTT password (user = id), for a broker that wants one
	will []byte // a retained last will on the status topic, when set
}

func (d *rawDevice) write(cp *packets.ControlPacket) error {
	_, err := cp.WriteTo(d.conn)
	return err
}

// read returns the next packet, acknowledging QoS 1 publishes.
func (d *rawDevice) read() (*packets.ControlPacket, error) {
	d.conn.SetReadDeadline(time.Now().Add(60 * time.Second)) // hang guard
	cp, err := packets.ReadPacket(d.conn)
	if err != nil {
		return nil, err
	}
	if p, ok := cp.Content.(*packets.Publish); ok && p.QoS == 1 {
		ack := packets.NewControlPacket(packets.PUBACK)
		ack.Content.(*packets.Puback).PacketID = p.PacketID
		if err := d.write(ack); err != nil {
			return nil, err
		}
	}
	return cp, nil
}

func (d *rawDevice) connect(addr string) error {
	var err error
	if d.conn, err = net.Dial("tcp", addr); err != nil {
		return err
	}
	cp := packets.NewControlPacket(packets.CONNECT)
	c := cp.Content.(*packets.Connect)
	c.ClientID, c.CleanStart, c.KeepAlive = d.id, true, 120
	if d.pass != "" {
		c.Username, c.UsernameFlag, c.Password, c.PasswordFlag = d.id, true, []byte(d.pass), true
	}
	if d.will != nil {
		c.WillFlag, c.WillQOS, c.WillRetain = true, 1, true
		c.WillTopic, c.WillMessage = topics.Device(d.id, fleetwire.SuffixStatus), d.will
	}
	if err := d.write(cp); err != nil {
		return err
	}
	r, err := d.read()
	if err != nil {
		return err
	}
	if ca, ok := r.Content.(*packets.Connack); !ok || ca.ReasonCode != 0 {
		return fmt.Errorf("%s: CONNACK %v", d.id, r.Content)
	}
	sp := packets.NewControlPacket(packets.SUBSCRIBE)
	s := sp.Content.(*packets.Subscribe)
	s.PacketID = 1
	s.Subscriptions = []packets.SubOptions{{Topic: topics.Device(d.id, fleetwire.SuffixTelemetryAck), QoS: 1}}
	if err := d.write(sp); err != nil {
		return err
	}
	r, err = d.read()
	if err != nil {
		return err
	}
	if sa, ok := r.Content.(*packets.Suback); !ok || sa.Reasons[0] != 1 {
		return fmt.Errorf("%s: SUBACK %v", d.id, r.Content)
	}
	return nil
}

// uplink publishes one batch and waits for the cloud's TelemetryAck.
func (d *rawDevice) uplink(first, n uint64) error {
	pp := packets.NewControlPacket(packets.PUBLISH)
	p := pp.Content.(*packets.Publish)
	p.QoS, p.PacketID, p.Topic = 1, 2, topics.Device(d.id, fleetwire.SuffixTelemetry)
	p.Payload = batch(d.id, d.id+"-1", first, n)
	if err := d.write(pp); err != nil {
		return err
	}
	for {
		r, err := d.read()
		if err != nil {
			return err
		}
		if ack, ok := r.Content.(*packets.Publish); ok {
			var a fleetwire.TelemetryAck
			if err := json.Unmarshal(ack.Payload, &a); err != nil {
				return err
			}
			if a.UpTo != first+n-1 {
				return fmt.Errorf("%s: ack up to %d", d.id, a.UpTo)
			}
			return nil
		}
	}
}

// TestThousandDevices connects 1,000 devices (200 under -race) to one
// embedded broker at once, each sends a batch of 10 and waits for its ack;
// the registry and the store must hold exactly n devices and 10n records.
func TestThousandDevices(t *testing.T) {
	const per = 10
	n := 1000
	if raceEnabled {
		n = 200 // make test runs the full thousand without the race detector
	}
	b := startBroker(t, broker.Config{DevAuth: true})
	m := openManager(t, Config{DataDir: t.TempDir(), Broker: b})
	devs := make([]*rawDevice, n)
	for i := range devs {
		devs[i] = &rawDevice{id: fmt.Sprintf("fleet-%04d", i)}
	}
	defer func() {
		for _, d := range devs {
			if d.conn != nil {
				d.conn.Close()
			}
		}
	}()
	start := time.Now()
	run := func(step string, fn func(d *rawDevice) error) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, n)
		sem := make(chan struct{}, 128) // bounded dialing, as a fleet reconnecting with jitter
		for _, d := range devs {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if err := fn(d); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("%s: %v", step, err)
		}
		t.Logf("%s: %d devices, %v since start", step, n, time.Since(start).Round(time.Millisecond))
	}
	run("connect", func(d *rawDevice) error { return d.connect(b.TCPAddr()) })
	if got := b.Connected(); got != n {
		t.Fatalf("connected %d", got)
	}
	run("uplink", func(d *rawDevice) error { return d.uplink(1, per) })
	c, err := m.Counts()
	if err != nil {
		t.Fatal(err)
	}
	if c.Devices != n || c.Stored != uint64(n*per) || c.Duplicates != 0 {
		t.Fatalf("counts %+v", c)
	}
	// Everyone sends the same batch again (all acks lost): all duplicates.
	run("redeliver", func(d *rawDevice) error { return d.uplink(1, per) })
	if c, _ := m.Counts(); c.Stored != uint64(n*per) || c.Duplicates != uint64(n*per) {
		t.Fatalf("after redelivery %+v", c)
	}
}
