package broker

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/eclipse/paho.golang/paho"

	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// TestDeviceCannotFillBroker is issue 27's finding 4 against the real
// broker, with a persistent store, and a device authenticated by its
// certificate: 40 retained 1.3 MB publishes to a subtopic of its own once
// grew broker.db from 32 KB to 97 MB. Now a device writes only the
// protocol's topics, retains only status and config/reported, and within
// each topic's size limit; the store does not grow.
func TestDeviceCannotFillBroker(t *testing.T) {
	pki := newTestPKI(t)
	dbPath := filepath.Join(t.TempDir(), "broker.db")
	reg := metrics.NewRegistry()
	b := startBroker(t, Config{TLS: pki.serverTLS(), StorePath: dbPath, Passwords: passwordsFor(t, "ops"), Admins: []string{"ops"}, Metrics: reg})
	tp := fleetwire.Topics{}
	certDial := func(id string, will *paho.WillMessage) (*mqttClient, error) {
		return dial(t, b.TLSAddr(), id, dialOpts{tls: pki.clientTLS(t, id), will: will})
	}
	dev, err := certDial("car-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := dial(t, b.TCPAddr(), "ops-console", dialOpts{user: "ops", pass: "pw-ops"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := subscribe(t, admin, tp.Device("car-1", "#")); err != nil {
		t.Fatal(err)
	}
	size := func() int64 {
		fi, err := os.Stat(dbPath)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	before := size()

	big := strings.Repeat("x", 1300<<10) // the attack's 1.3 MB
	for _, c := range []struct {
		name    string
		suffix  string
		payload string
		retain  bool
		reason  byte
	}{
		{"unlisted subtopic", "junk", big, true, 0x87},
		{"unlisted subtopic, small", "logs/1", "{}", false, 0x87},
		{"cloud's topic", fleetwire.SuffixConfigDesired, "{}", true, 0x87},
		{"cloud's command topic", fleetwire.SuffixCmd, "{}", false, 0x87},
		{"retained telemetry", fleetwire.SuffixTelemetry, "{}", true, 0x87},
		{"retained command result", fleetwire.SuffixCmdResult, "{}", true, 0x87},
		{"oversize status", fleetwire.SuffixStatus, big, true, 0x97},
		{"oversize config/reported", fleetwire.SuffixConfigReported, big, true, 0x97},
		{"oversize telemetry", fleetwire.SuffixTelemetry, strings.Repeat("x", fleetwire.MaxTelemetryBytes+1), false, 0x97},
		{"oversize command result", fleetwire.SuffixCmdResult, strings.Repeat("x", fleetwire.MaxCmdResultBytes+1), false, 0x97},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, err := publish(t, dev, tp.Device("car-1", c.suffix), c.payload, c.retain)
			if resp == nil || resp.ReasonCode != c.reason {
				t.Fatalf("want PUBACK %#x, got %+v %v", c.reason, resp, err)
			}
		})
	}
	// The attack itself: 40 retained 1.3 MB messages, each refused.
	for i := range 40 {
		if resp, _ := publish(t, dev, tp.Device("car-1", "blob/"+string(rune('a'+i%26))), big, true); resp == nil || resp.ReasonCode != 0x87 {
			t.Fatalf("attack publish %d: %+v", i, resp)
		}
	}
	// A QoS 0 publish has no PUBACK to refuse it with: it is dropped.
	if _, err := dev.Publish(context.Background(), &paho.Publish{QoS: 0, Topic: tp.Device("car-1", fleetwire.SuffixStatus), Payload: []byte(big)}); err != nil {
		t.Fatal(err)
	}

	// Forty 1.3 MB messages once grew the store by 97 MB; a session's
	// own records stay far below a megabyte.
	if got, limit := size()-before, int64(1<<20); got >= limit {
		t.Errorf("broker.db grew by %d bytes (from %d), want under %d: refused messages were stored", got, before, limit)
	}
	t.Logf("broker.db %d → %d bytes after the refused publishes", before, size())

	// The protocol's own flows still pass, retained where it retains;
	// the admin sees only them (MQTT orders one connection's messages, so
	// anything refused above would have arrived first).
	legit := []struct {
		suffix, payload string
		retain          bool
	}{
		{fleetwire.SuffixStatus, `{"device_id":"car-1","state":"online"}`, true},
		{fleetwire.SuffixConfigReported, `{"version":3,"applied":true}`, true},
		{fleetwire.SuffixTelemetry, strings.Repeat("t", 300<<10), false}, // a full batch and more
		{fleetwire.SuffixCmdResult, `{"id":"c1","ok":true}`, false},
	}
	for _, l := range legit {
		if _, err := publish(t, dev, tp.Device("car-1", l.suffix), l.payload, l.retain); err != nil {
			t.Fatalf("%s: %v", l.suffix, err)
		}
	}
	msgs := admin.waitMsgs(t, len(legit))
	for i, m := range msgs {
		if i >= len(legit) || m.Topic != tp.Device("car-1", legit[i].suffix) || string(m.Payload) != legit[i].payload {
			t.Fatalf("admin message %d: %s (%d bytes), want only the legitimate ones", i, m.Topic, len(m.Payload))
		}
	}

	// Wills are published without mochi's ACL: the broker checks them at
	// connect against the same rules.
	for _, c := range []struct {
		name string
		will paho.WillMessage
	}{
		{"will on an unlisted subtopic", paho.WillMessage{Topic: "phaseless/dev/car-2/junk", Payload: []byte("x"), Retain: true, QoS: 1}},
		{"will on another device", paho.WillMessage{Topic: "phaseless/dev/car-1/status", Payload: []byte("x"), Retain: true, QoS: 1}},
		{"oversize retained will", paho.WillMessage{Topic: "phaseless/dev/car-2/status", Payload: []byte(big), Retain: true, QoS: 1}},
		{"retained telemetry will", paho.WillMessage{Topic: "phaseless/dev/car-2/telemetry", Payload: []byte("x"), Retain: true, QoS: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := certDial("car-2", &c.will); err == nil {
				t.Fatal("admitted")
			}
		})
	}
	w := paho.WillMessage{Topic: "phaseless/dev/car-2/status", Payload: []byte(`{"state":"offline"}`), Retain: true, QoS: 1}
	if _, err := certDial("car-2", &w); err != nil {
		t.Fatalf("the agent's own last will: %v", err)
	}

	refused := reg.LabeledCounter("phaseless_fleet_broker_publish_refused_total", "", "reason")
	if refused.With("retain").Value() != 2 || refused.With("size").Value() != 5 {
		t.Errorf("publish_refused retain=%v size=%v, want 2 and 5", refused.With("retain").Value(), refused.With("size").Value())
	}

	// After a restart only the protocol's retained messages come back.
	admin.close()
	dev.close()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b2 := startBroker(t, Config{StorePath: dbPath, Passwords: passwordsFor(t, "ops"), Admins: []string{"ops"}})
	admin2, err := dial(t, b2.TCPAddr(), "ops-2", dialOpts{user: "ops", pass: "pw-ops"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := subscribe(t, admin2, tp.Device("car-1", "#")); err != nil {
		t.Fatal(err)
	}
	// Retained messages are sent while the SUBSCRIBE is handled, so a
	// publish after it arrives after every one of them.
	sentinel := tp.Device("car-1", "zz-sentinel")
	if _, err := publish(t, admin2, sentinel, "end", false); err != nil {
		t.Fatal(err)
	}
	got := admin2.waitMsgs(t, 3)
	for i, m := range got {
		want := []string{tp.Device("car-1", fleetwire.SuffixStatus), tp.Device("car-1", fleetwire.SuffixConfigReported), sentinel}
		if i >= 3 || !slices.Contains(want, m.Topic) || (i == 2) != (m.Topic == sentinel) {
			t.Errorf("after restart, message %d: %s (%d bytes); want the two retained ones, then the sentinel", i, m.Topic, len(m.Payload))
		}
	}
}
