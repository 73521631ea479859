package cloud

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/admit/redistest"
	"github.com/phaseless/phaseless/cloud/fleet"
	"github.com/phaseless/phaseless/cloud/fleet/broker"
)

// TestSecondFleetManagerRefused starts two cloud processes' worth of
// configuration on one Redis, both with a fleet manager: the first holds
// the fleet lease and serves, the second refuses to start naming it, so
// rollouts are never driven by two stores at once.
func TestSecondFleetManagerRefused(t *testing.T) {
	url := redistest.Start(t)
	withFleet := func(cfg *Config) {
		cfg.MQTT, cfg.MQTTTLS, cfg.BuiltinWorkers = "127.0.0.1:0", "", 1
		if err := cfg.Redis.Set(url); err != nil {
			t.Fatal(err)
		}
	}
	first := startCloud(t, withFleet)
	if first.MQTTAddr() == "" {
		t.Fatal("the first cloud runs no fleet manager")
	}
	cfg := Config{HTTP: "127.0.0.1:0", DataDir: t.TempDir(), Dev: true, Budget: 1000}
	withFleet(&cfg)
	c, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Start(context.Background()); !errors.Is(err, fleet.ErrLeaseHeld) {
		t.Fatalf("second fleet manager on the same Redis: %v, want %v", err, fleet.ErrLeaseHeld)
	}
}

// TestFleetStandbyReplicas runs two cloud replicas with --fleet-standby on
// one Redis, one broker both reach (--mqtt-url) and one shared
// --fleet-data-dir: the first is the fleet's writer; the second serves
// inference (ready) and answers the fleet API with 503 naming the writer.
// When the first stops, the second takes over and serves the fleet from
// the shared store (a config layer the first set is there).
func TestFleetStandbyReplicas(t *testing.T) {
	url := redistest.Start(t)
	pw, err := broker.HashPassword("phaseless-cloud", "pw")
	if err != nil {
		t.Fatal(err)
	}
	passwords, err := broker.ParsePasswords(strings.NewReader(pw + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.Start(broker.Config{TCPAddr: "127.0.0.1:0", Passwords: passwords, Admins: []string{"phaseless-cloud"}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	shared := t.TempDir()
	replica := func(cfg *Config) {
		cfg.BuiltinWorkers, cfg.FleetStandby, cfg.FleetDataDir = 1, true, shared
		if err := cfg.Redis.Set(url); err != nil {
			t.Fatal(err)
		}
		if err := cfg.MQTTURL.Set("mqtt://phaseless-cloud:pw@" + b.TCPAddr()); err != nil {
			t.Fatal(err)
		}
	}
	get := func(c *Cloud, path string) (int, string) {
		resp, err := http.Get("http://" + c.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	first := startCloud(t, replica)
	waitHTTP := func(c *Cloud, path string, want int) string {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			code, body := get(c, path)
			if code == want {
				return body
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d %s, want %d", path, code, body, want)
			}
		}
	}
	waitHTTP(first, "/readyz", 200)
	req, _ := http.NewRequest(http.MethodPut, "http://"+first.HTTPAddr()+"/v1/fleet/config/fleet", strings.NewReader(`{"values":{"route-threshold":"0.6"}}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("set a fleet config layer on the writer: %s", resp.Status)
	}

	second := startCloud(t, replica)
	if code, body := get(second, "/v1/fleet/devices"); code != http.StatusServiceUnavailable || !strings.Contains(body, "standby") {
		t.Fatalf("standby's fleet API: %d %s", code, body)
	}
	if code, body := get(second, "/readyz"); code != 200 {
		t.Fatalf("a standby replica is not ready to serve inference: %d %s", code, body)
	}
	first.Close() // releases the lease
	body := waitHTTP(second, "/v1/fleet/config", 200)
	if !strings.Contains(body, `"route-threshold": "0.6"`) {
		t.Fatalf("the new writer does not have the shared store's config layers:\n%s", body)
	}
}
