package fleetclient

import (
	"path/filepath"
	"strings"
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/phaseless/phaseless/agent/fleetclient/internal/brokertest"
	"github.com/phaseless/phaseless/transport/fleetwire"
	"github.com/phaseless/phaseless/transport/pki"
)

// TestDeviceCertificateOverTLS connects with a device certificate from the
// fleet PKI to a broker that requires one, and checks the status arrives.
func TestDeviceCertificateOverTLS(t *testing.T) {
	dir := t.TempDir()
	if err := pki.Init(dir, nil); err != nil {
		t.Fatal(err)
	}
	const id = "dev-tls"
	if err := pki.IssueDevice(dir, id); err != nil {
		t.Fatal(err)
	}
	serverTLS, err := pki.ServerTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	deviceTLS, err := pki.DeviceTLS(dir, id)
	if err != nil {
		t.Fatal(err)
	}
	b := brokertest.StartMochiTLS(t, serverTLS)
	got := make(chan string, 4)
	// Observe from inside the broker: the fake cloud would need its own
	// certificate, and this test is about the device's side of TLS.
	if err := b.Server().Subscribe(fleetwire.Topics{}.Device(id, fleetwire.SuffixStatus), 1, func(_ *mqtt.Client, _ packets.Subscription, pk packets.Packet) {
		got <- string(pk.Payload)
	}); err != nil {
		t.Fatal(err)
	}
	startDevice(t, Config{BrokerURL: b.URL(), DeviceID: id, TLS: deviceTLS, Version: "tls-1"})
	select {
	case s := <-got:
		if !strings.Contains(s, `"state":"online"`) || !strings.Contains(s, `"version":"tls-1"`) {
			t.Errorf("status = %s", s)
		}
	case <-timeout():
		t.Fatal("no status over TLS")
	}

	// A certificate for another device is refused before connecting.
	if err := pki.IssueDevice(dir, "other"); err != nil {
		t.Fatal(err)
	}
	otherTLS, _ := pki.DeviceTLS(dir, "other")
	_, err = New(Config{BrokerURL: b.URL(), DeviceID: id, TLS: otherTLS, StatePath: filepath.Join(dir, "s.db")})
	if err == nil || !strings.Contains(err.Error(), "TLS client certificate") {
		t.Errorf("mismatched certificate: %v", err)
	}
}

// TestUsernamePassword connects to a broker that checks credentials.
func TestUsernamePassword(t *testing.T) {
	b := brokertest.StartMochiUsers(t, map[string]string{"dev-pw": "s3cret"})
	const id = "dev-pw"
	got := make(chan string, 4)
	if err := b.Server().Subscribe(fleetwire.Topics{}.Device(id, fleetwire.SuffixStatus), 1, func(_ *mqtt.Client, _ packets.Subscription, pk packets.Packet) {
		got <- string(pk.Payload)
	}); err != nil {
		t.Fatal(err)
	}
	startDevice(t, Config{BrokerURL: b.URL(), DeviceID: id, Username: id, Password: "s3cret"})
	select {
	case s := <-got:
		if !strings.Contains(s, `"state":"online"`) {
			t.Errorf("status = %s", s)
		}
	case <-timeout():
		t.Fatal("no status with username/password")
	}
}
