package ctl

import (
	"strings"
	"testing"

	"github.com/phaseless/phaseless/cloud/fleetapi"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// TestRouterLine: fleet status shows a device's α, the
// realised share of wrong local answers and the threshold in force, with
// its source, and a bound the device reports suspended.
func TestRouterLine(t *testing.T) {
	d := &fleetapi.Device{ID: "car-1"}
	if got := routerLine(d); !strings.Contains(got, "no scored shadow grades") {
		t.Errorf("uncalibrated: %q", got)
	}
	d.Router = &fleetapi.RouterCalibration{Alpha: 0.05, Delta: 0.1, Router: "1.1", Threshold: 0.42, Certified: true, Outcomes: 800, Realised: 0.031}
	d.Desired = &fleetwire.DesiredConfig{Version: 3, Values: map[string]string{"route-threshold": "0.42"}}
	d.ConfigSources = map[string]string{"route-threshold": fleetapi.SourceCalibrated}
	d.Status = &fleetwire.Status{RouterBound: fleetwire.RouterBoundSuspended}
	got := routerLine(d)
	for _, want := range []string{"α 0.05", "δ 0.1", "router 1.1", "realised 3.1%", "800 graded", "route-threshold 0.42 from calibrated", "bound suspended"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
}
