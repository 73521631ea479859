package cloud

import (
	"context"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/admit/redistest"
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

// TestRevokeAfterTakeover: a standby replica (--fleet-standby) on the
// same Mosquitto tells no broker anything while another holds the fleet
// lease; when it takes the fleet over it disables every device on the
// deny list, including one revoked while it stood by.
func TestRevokeAfterTakeover(t *testing.T) {
	const admin, adminPw = "dynsec-admin", "admin-pw-1"
	brokerURL := mosquittotest.StartDynsec(t, admin, adminPw)
	redisURL := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	devices := map[string]string{"car-9": "pw-car-9", "car-10": "pw-car-10"}
	if err := fleet.RunDynsec(ctx, &fleet.External{URL: brokerURL, Username: admin, Password: adminPw},
		fleet.DynsecFleetSetup("phaseless/", "phaseless-cloud", "cloud-pw-1", devices)...); err != nil {
		t.Fatal(err)
	}
	car9, err := mosquittotest.Connect(t, brokerURL, "car-9", devices["car-9"])
	if err != nil {
		t.Fatal(err)
	}
	// Another replica is the fleet's writer.
	other, err := fleet.NewRedisLease(redisURL, "", "the other replica", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := pki.Init(dir, []string{"localhost"}); err != nil {
		t.Fatal(err)
	}
	standby := startCloud(t, func(cfg *Config) {
		cfg.PKIDir, cfg.MQTTDynsec, cfg.FleetStandby, cfg.FleetDataDir = dir, true, true, t.TempDir()
		if err := cfg.Redis.Set(redisURL); err != nil {
			t.Fatal(err)
		}
		if err := cfg.MQTTURL.Set("mqtt://phaseless-cloud:cloud-pw-1@" + brokerURL[len("mqtt://"):]); err != nil {
			t.Fatal(err)
		}
	})
	if standby.fleetWriter() != nil {
		t.Fatal("the standby took the fleet while another replica holds the lease")
	}
	if _, err := pki.Revoke(dir, "car-9", "stolen while the other replica wrote", time.Now()); err != nil {
		t.Fatal(err)
	}
	// The standby's deny-list watch sees car-9 but leaves the broker to
	// the writer, which here never tells it (it is not a cloud).
	time.Sleep(2 * pki.DefaultWatchInterval)
	select {
	case <-car9.Gone:
		t.Fatal("a standby told the broker")
	default:
	}
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-car9.Gone:
	case <-ctx.Done():
		t.Fatal("after the takeover the revoked car-9 is still connected to mosquitto")
	}
	if _, err := mosquittotest.Connect(t, brokerURL, "car-9", devices["car-9"]); err == nil {
		t.Fatal("revoked car-9 logged in again after the takeover")
	}
	if standby.fleetWriter() == nil {
		t.Fatal("the standby did not take the fleet over")
	}
}
