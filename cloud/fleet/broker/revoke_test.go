package broker

import (
	"testing"
	"time"

	"github.com/phaseless/phaseless/transport/fleetwire"
	"github.com/phaseless/phaseless/transport/pki"
)

// A revoked device is cut off the broker at once, whether it came with a
// certificate or a password, and cannot come back; other devices stay.
func TestRevokedDeviceDisconnected(t *testing.T) {
	dir := t.TempDir()
	if err := pki.EnsureDev(dir, "car-7", "car-9"); err != nil {
		t.Fatal(err)
	}
	deny, err := pki.LoadDenyList(dir)
	if err != nil {
		t.Fatal(err)
	}
	stls, err := pki.ServerTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	pki.DenyRevoked(stls, deny)
	b := startBroker(t, Config{TLS: stls, TCPAddr: "127.0.0.1:0", TLSAddr: "127.0.0.1:0",
		Passwords: passwordsFor(t, "car-8"), Revoked: deny.Revoked})
	dtls := func(id string) dialOpts {
		tc, err := pki.DeviceTLS(dir, id)
		if err != nil {
			t.Fatal(err)
		}
		tc.ServerName = "localhost"
		return dialOpts{tls: tc}
	}
	byCert, err := dial(t, b.TLSAddr(), "car-7", dtls("car-7"))
	if err != nil {
		t.Fatal(err)
	}
	byPassword, err := dial(t, b.TCPAddr(), "car-8", dialOpts{user: "car-8", pass: "pw-car-8"})
	if err != nil {
		t.Fatal(err)
	}
	bystander, err := dial(t, b.TLSAddr(), "car-9", dtls("car-9"))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"car-7", "car-8"} {
		if _, err := pki.Revoke(dir, id, "stolen", time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := deny.Reload(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id string
		c  *mqttClient
	}{{"car-7", byCert}, {"car-8", byPassword}} {
		if !b.DisconnectDevice(c.id) {
			t.Fatalf("%s: no connection closed", c.id)
		}
		select {
		case <-c.c.Done():
		case <-time.After(10 * time.Second): // hang guard
			t.Fatalf("%s still connected", c.id)
		}
	}
	if b.DisconnectDevice("car-404") {
		t.Fatal("closed a device that is not connected")
	}
	if c, err := dial(t, b.TLSAddr(), "car-7", dtls("car-7")); err == nil {
		c.close()
		t.Fatal("revoked certificate reconnected")
	}
	if c, err := dial(t, b.TCPAddr(), "car-8", dialOpts{user: "car-8", pass: "pw-car-8"}); err == nil || c.connack == nil || c.connack.ReasonCode < 0x80 {
		t.Fatalf("revoked password device reconnected: %v", err)
	}
	tp := fleetwire.Topics{}
	if _, err := publish(t, bystander, tp.Device("car-9", fleetwire.SuffixStatus), `{"state":"online"}`, true); err != nil {
		t.Fatalf("another device: %v", err)
	}
}
