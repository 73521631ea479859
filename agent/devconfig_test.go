package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/agent/route"
	"github.com/phaseless/phaseless/cloud/fleet"
	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// TestFleetConfigApplies sets device settings from a real fleet manager
// over a real broker: a valid config applies the router threshold at once
// and names the settings that wait for a restart; an invalid one and an
// unknown key are refused with the reason and change nothing; after a
// restart the kept config is in force.
func TestFleetConfigApplies(t *testing.T) {
	b, err := broker.Start(broker.Config{TCPAddr: "127.0.0.1:0", DevAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m, err := fleet.Open(fleet.Config{DataDir: t.TempDir(), Broker: b})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	cfg := testConfig(t)
	cfg.MQTT, cfg.DeviceID = "mqtt://"+b.TCPAddr(), "car-cfg"
	a, _ := startAgent(t, cfg)
	threshold := func(a *Agent) float64 {
		return a.disp.Router().Decide(&llm.Request{Messages: []llm.Message{{Role: "user", Content: "open the window"}}}, route.Link{}, route.Load{}).Threshold
	}
	if got := threshold(a); got != 0.5 {
		t.Fatalf("threshold before %g", got)
	}
	reported := func(v uint64) *fleetwire.ReportedConfig {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if d, err := m.Device("car-cfg"); err == nil && d.Reported != nil && d.Reported.Version == v {
				return d.Reported
			}
		}
		t.Fatalf("version %d never reported", v)
		return nil
	}
	set := func(kv ...string) uint64 {
		t.Helper()
		u := fleet.ConfigUpdate{Values: map[string]*string{}}
		for i := 0; i < len(kv); i += 2 {
			u.Values[kv[i]] = &kv[i+1]
		}
		dc, err := m.SetConfig(context.Background(), "car-cfg", u)
		if err != nil {
			t.Fatal(err)
		}
		return dc.Version
	}

	v := set("route-threshold", "0.8", "cloud-first-token-timeout", "4s", "log-level", "debug")
	r := reported(v)
	if !r.Applied || strings.Join(r.RestartPending, ",") != "cloud-first-token-timeout" {
		t.Fatalf("report %+v, want applied with cloud-first-token-timeout pending", r)
	}
	if got := threshold(a); got != 0.8 {
		t.Fatalf("live threshold %g, want 0.8", got)
	}

	// route-mode applies live: requests that pin no route follow it, a
	// request's own header still wins.
	decide := func(pin string) route.Decision {
		return a.disp.Router().Decide(&llm.Request{Messages: []llm.Message{{Role: "user", Content: "open the window"}}, Hints: llm.Hints{Route: pin}}, route.Link{Configured: true, Connected: true}, route.Load{})
	}
	if d := decide(""); d.Path != route.PathLocal || strings.HasPrefix(d.Reason, "route-mode") {
		t.Fatalf("before route-mode: %s (%s)", d.Path, d.Reason)
	}
	if r := reported(set("route-threshold", "0.8", "cloud-first-token-timeout", "4s", "log-level", "debug", "route-mode", "cloud")); !r.Applied {
		t.Fatalf("route-mode=cloud refused: %+v", r)
	}
	if d := decide(""); d.Path != route.PathCloud || d.Reason != "route-mode: cloud" {
		t.Fatalf("route-mode=cloud: %s (%s)", d.Path, d.Reason)
	}
	if d := decide("local"); d.Path != route.PathLocal || d.Reason != "x-phaseless-route: local" {
		t.Fatalf("header under route-mode=cloud: %s (%s)", d.Path, d.Reason)
	}
	if got := threshold(a); got != 0.8 {
		t.Fatalf("threshold %g after route-mode", got)
	}

	// router-alpha (set by the fleet with a calibrated threshold) applies
	// live; this agent has no cloud, so its status reports the bound
	// suspended, where without the key it reports none.
	if got := a.routerBound(); got != "" {
		t.Fatalf("bound %q without router-alpha", got)
	}
	if r := reported(set("route-threshold", "0.8", "cloud-first-token-timeout", "4s", "log-level", "debug", "route-mode", "cloud", "router-alpha", "0.05")); !r.Applied {
		t.Fatalf("router-alpha refused: %+v", r)
	}
	if got := a.routerBound(); got != fleetwire.RouterBoundSuspended {
		t.Fatalf("bound %q with router-alpha and no cloud, want %q", got, fleetwire.RouterBoundSuspended)
	}

	// The update link policy applies live and the status reports it.
	if r := reported(set("route-threshold", "0.8", "cloud-first-token-timeout", "4s", "log-level", "debug", "route-mode", "cloud", "router-alpha", "0.05",
		"update-bandwidth", "50000", "update-on-metered", "allow", "metered", "true")); !r.Applied {
		t.Fatalf("update link policy refused: %+v", r)
	}
	if st := a.ota.UpdateStatus(); st.Bandwidth != 50000 || st.OnMetered != "allow" || !st.Metered {
		t.Fatalf("update status %+v after the link policy was set", st)
	}

	for _, bad := range [][]string{
		{"update-on-metered", "sometimes"},        // not a policy
		{"route-mode", "sideways"},                // not a mode
		{"route-threshold", "1.5"},                // out of range
		{"local-queue", "many"},                   // does not parse
		{"colour", "blue"},                        // not a device setting
		{"route-threshold", "0.7", "listen", "x"}, // settable keys only, all or nothing
	} {
		r := reported(set(bad...))
		if r.Applied || !strings.Contains(r.Error, bad[len(bad)-2]) {
			t.Errorf("%v: report %+v, want refused naming %s", bad, r, bad[len(bad)-2])
		}
		if got := threshold(a); got != 0.8 {
			t.Fatalf("%v changed the threshold to %g", bad, got)
		}
	}

	// A restart puts the kept config in force, restart-only settings too.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.MQTT = "" // the kept copy applies without the fleet
	a2, _ := startAgent(t, cfg)
	if a2.cfg.CloudFirstToken != 4*time.Second || threshold(a2) != 0.8 || a2.cfg.RouteMode != "cloud" {
		t.Fatalf("after restart: first-token timeout %v, threshold %g", a2.cfg.CloudFirstToken, threshold(a2))
	}
}
