package ui

import (
	"math"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet"
	tfleet "github.com/phaseless/phaseless/transport/fleetwire"
)

func TestDeviceFilter(t *testing.T) {
	d := &fleet.Device{ID: "car-17", Status: &tfleet.Status{State: "online", Version: "1.4.2", Board: "rk3588", Slot: "b"}}
	for _, tt := range []struct {
		f    deviceFilter
		want bool
	}{
		{deviceFilter{}, true},
		{deviceFilter{Q: "CAR-1"}, true},
		{deviceFilter{Q: "1.4"}, true},
		{deviceFilter{Q: "rk35"}, true},
		{deviceFilter{Q: "imx8"}, false},
		{deviceFilter{State: "online"}, true},
		{deviceFilter{State: "offline"}, false},
		{deviceFilter{Q: "car", State: "offline"}, false},
	} {
		if got := tt.f.match(d); got != tt.want {
			t.Errorf("%+v: %v", tt.f, got)
		}
	}
	if !(deviceFilter{State: "unknown"}).match(&fleet.Device{ID: "new"}) {
		t.Error("a device without a status is unknown")
	}
}

func TestRouteMix(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	rows := []requestRow{
		{At: t0, Ingested: t0.Add(time.Second), RequestRecord: tfleet.RequestRecord{Path: "local", Outcome: "ok"}},
		{At: t0, Ingested: t0.Add(time.Second), RequestRecord: tfleet.RequestRecord{Path: "cloud", Outcome: "ok"}},
		{At: t0, Ingested: t0.Add(time.Second), RequestRecord: tfleet.RequestRecord{Path: "local", Outcome: "ok"}},
		{At: t0, Ingested: t0.Add(time.Second), RequestRecord: tfleet.RequestRecord{Path: "cloud/stream/builtin-2", Outcome: "ok"}},
		{At: t0, Ingested: t0.Add(90 * time.Second), RequestRecord: tfleet.RequestRecord{Path: "local", Outcome: "error"}},
	}
	m := mixOf(rows)
	if m.Local != 2 || m.Cloud != 2 || m.Errors != 1 || m.LocalShare() != 2.0/4 || m.Lag != 90*time.Second {
		t.Errorf("%+v share %v", m, m.LocalShare())
	}
	if !math.IsNaN(mixOf(nil).LocalShare()) {
		t.Error("no requests has no share")
	}
}
