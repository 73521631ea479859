package cloud

import (
	"context"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet"
	"github.com/phaseless/phaseless/internal/mosquittotest"
	"github.com/phaseless/phaseless/transport/pki"
)

// TestRevokeReachesMosquitto: a cloud on an external Mosquitto with the
// dynamic security plugin (--mqtt-url, --mqtt-dynsec). A device put on the
// deny list (phaselessctl pki revoke) is kicked off the broker and refused
// by it within the deny list's reread interval; one revoked while the
// cloud was down is disabled when it starts; other devices stay.
func TestRevokeReachesMosquitto(t *testing.T) {
	const admin, adminPw = "dynsec-admin", "admin-pw-1"
	brokerURL := mosquittotest.StartDynsec(t, admin, adminPw)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	devices := map[string]string{"car-9": "pw-car-9", "car-10": "pw-car-10", "car-11": "pw-car-11"}
	if err := fleet.RunDynsec(ctx, &fleet.External{URL: brokerURL, Username: admin, Password: adminPw},
		fleet.DynsecFleetSetup("phaseless/", "phaseless-cloud", "cloud-pw-1", devices)...); err != nil {
		t.Fatal(err)
	}
	conns := map[string]*mosquittotest.Device{}
	for id, pw := range devices {
		d, err := mosquittotest.Connect(t, brokerURL, id, pw)
		if err != nil {
			t.Fatal(err)
		}
		conns[id] = d
	}
	dir := t.TempDir()
	if err := pki.Init(dir, []string{"localhost"}); err != nil {
		t.Fatal(err)
	}
	if _, err := pki.Revoke(dir, "car-11", "lost while the cloud was down", time.Now()); err != nil {
		t.Fatal(err)
	}
	startCloud(t, func(cfg *Config) {
		cfg.PKIDir, cfg.MQTTDynsec = dir, true
		if err := cfg.MQTTURL.Set("mqtt://phaseless-cloud:cloud-pw-1@" + brokerURL[len("mqtt://"):]); err != nil {
			t.Fatal(err)
		}
	})
	gone := func(id string) {
		t.Helper()
		select {
		case <-conns[id].Gone:
		case <-ctx.Done():
			t.Fatalf("revoked %s still connected to mosquitto", id)
		}
		if _, err := mosquittotest.Connect(t, brokerURL, id, devices[id]); err == nil {
			t.Fatalf("revoked %s logged in again", id)
		}
	}
	gone("car-11")
	if _, err := pki.Revoke(dir, "car-9", "stolen", time.Now()); err != nil {
		t.Fatal(err)
	}
	gone("car-9")
	select {
	case <-conns["car-10"].Gone:
		t.Fatal("a device that was not revoked lost its connection")
	default:
	}
}
