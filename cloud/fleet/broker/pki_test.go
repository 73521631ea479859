package broker

import (
	"testing"

	"github.com/phaseless/phaseless/transport/fleetwire"
	"github.com/phaseless/phaseless/transport/pki"
)

// TestFleetPKI runs the TLS listener with the project's PKI as the cloud
// gets it (pki.ServerTLS: client certificates required) and a device with
// pki.DeviceTLS, as phaselessctl pki init/device make them.
func TestFleetPKI(t *testing.T) {
	dir := t.TempDir()
	if err := pki.Init(dir, nil); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"car-7", "car-8"} {
		if err := pki.IssueDevice(dir, id); err != nil {
			t.Fatal(err)
		}
	}
	stls, err := pki.ServerTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	b := startBroker(t, Config{TLS: stls, TCPAddr: "", TLSAddr: "127.0.0.1:0"})
	if b.TCPAddr() != "" {
		t.Fatal("TLS-only broker has a plain listener")
	}
	dtls, err := pki.DeviceTLS(dir, "car-7")
	if err != nil {
		t.Fatal(err)
	}
	c, err := dial(t, b.TLSAddr(), "car-7", dialOpts{tls: dtls})
	if err != nil {
		t.Fatal(err)
	}
	tp := fleetwire.Topics{}
	if _, err := publish(t, c, tp.Device("car-7", fleetwire.SuffixStatus), `{"state":"online"}`, true); err != nil {
		t.Fatal(err)
	}
	if resp, err := publish(t, c, tp.Device("car-8", fleetwire.SuffixStatus), `{"state":"online"}`, true); err == nil || resp.ReasonCode != 0x87 {
		t.Fatalf("car-7 publishing as car-8: %+v %v", resp, err)
	}
	// car-7's certificate cannot connect as car-8.
	if _, err := dial(t, b.TLSAddr(), "car-8", dialOpts{tls: dtls}); err == nil {
		t.Fatal("client id car-8 with car-7's certificate admitted")
	}
}
