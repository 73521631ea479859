package cloud

import (
	"context"
	"errors"
	"testing"

	"github.com/phaseless/phaseless/cloud/admit/redistest"
	"github.com/phaseless/phaseless/cloud/fleet"
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
