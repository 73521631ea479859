package ui

import (
	"html/template"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/fleetapi"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// TestDevicePageShowsRouterCalibration: the device page shows the
// device's α, its realised share of wrong local answers, the threshold
// (calibrated, or the fleet's while too few samples certify one) and the
// bound the device reports.
func TestDevicePageShowsRouterCalibration(t *testing.T) {
	page, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/device.html")
	if err != nil {
		t.Fatal(err)
	}
	render := func(d *fleetapi.Device) string {
		var b strings.Builder
		if err := page.Execute(&b, map[string]any{"Device": d, "Now": time.Now(), "Page": "device", "HasFleet": true}); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	d := &fleetapi.Device{ID: "car-1"}
	if got := render(d); !strings.Contains(got, "no scored shadow grades yet") {
		t.Error("uncalibrated device: no placeholder")
	}
	d.Router = &fleetapi.RouterCalibration{Alpha: 0.05, Delta: 0.1, Router: "1.1", Threshold: 0.42, Certified: true, Outcomes: 800, Realised: 0.031}
	d.Status = &fleetwire.Status{State: "online", RouterBound: fleetwire.RouterBoundSuspended}
	got := render(d)
	for _, want := range []string{"0.05", "δ (router-delta)</dt><dd>0.1<", "router</dt><dd>1.1<", "3.1% of 800 graded samples", "0.420 (calibrated)", "suspended"} {
		if !strings.Contains(got, want) {
			t.Errorf("device page lacks %q", want)
		}
	}
	d.Router.Certified = false
	if got := render(d); !strings.Contains(got, "(too few samples to certify one)") {
		t.Error("uncertified device: the fleet's threshold not named")
	}
}

// The device page shows the device's update download and link policy.
func TestDevicePageShowsUpdate(t *testing.T) {
	page, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/device.html")
	if err != nil {
		t.Fatal(err)
	}
	d := &fleetapi.Device{ID: "car-1", Status: &fleetwire.Status{State: "online", Update: &fleetwire.UpdateStatus{
		Kind: "model", Version: "2.0", State: fleetwire.UpdateDownloading, FullBytes: 3 << 20, PlannedBytes: 80 << 10, TransferredBytes: 40 << 10,
		Bandwidth: 100 << 10, OnMetered: "defer", Metered: true}}}
	var b strings.Builder
	if err := page.Execute(&b, map[string]any{"Device": d, "Now": time.Now(), "Page": "device", "HasFleet": true}); err != nil {
		t.Fatal(err)
	}
	if want := "model 2.0 downloading: 40.0 KiB of 80.0 KiB planned (3.0 MiB whole) · link metered, 100.0 KiB/s cap, on metered: defer"; !strings.Contains(b.String(), want) {
		t.Errorf("device page lacks %q:\n%s", want, b.String())
	}
}
