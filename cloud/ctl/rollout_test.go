package ctl

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/cloud/fleet"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// TestRolloutMaxFailures: a limit of 0% that an operator types stays 0, on
// the command line and in the API; only a spec that leaves the limit out
// gets the default.
func TestRolloutMaxFailures(t *testing.T) {
	dir := t.TempDir()
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	defer srv.Close()
	_, m := startFleet(t, fleet.Config{PublicURL: srv.URL})
	mux.Handle(fleet.APIPrefix, m.Handler())
	payload := filepath.Join(dir, "agent.bin")
	if err := os.WriteFile(payload, []byte("new agent"), 0o644); err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(dir, "b.plota")
	if _, err := runCtl(t, "ota", "keygen", "--dir", dir); err != nil {
		t.Fatal(err)
	}
	if out, err := runCtl(t, "ota", "sign", "--key", filepath.Join(dir, "ota-key.pem"), "--version", "2.1", "--board", "rpi4", "--out", bundle, payload); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	out, err := runCtl(t, "fleet", "rollout", "create", "--cloud", srv.URL, "--artifact", bundle, "--stages", "100%", "--max-failures", "0%")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	id := strings.TrimSuffix(strings.Fields(out)[1], ":")
	if out, err := runCtl(t, "fleet", "rollout", "status", "--cloud", srv.URL, id); err != nil || !strings.Contains(out, "max failures 0%") || !strings.Contains(out, "stage 1 bytes: 0 B planned of 0 B whole bundles, 0 B transferred") {
		t.Errorf("rollout status: %v\n%s", err, out)
	}

	first, err := m.Rollout(id)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		body string
		want float64
	}{
		{`{"artifact":%q,"stages":[1],"max_failures":0}`, 0},
		{`{"artifact":%q,"stages":[1]}`, 0.05},
		{`{"artifact":%q,"stages":[1],"max_failures":0.2}`, 0.2},
	} {
		resp, err := http.Post(srv.URL+"/v1/fleet/rollouts", "application/json", strings.NewReader(strings.Replace(tt.body, "%q", `"`+first.Spec.Artifact+`"`, 1)))
		if err != nil {
			t.Fatal(err)
		}
		var r fleet.Rollout
		err = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if err != nil || resp.StatusCode/100 != 2 || r.Spec.MaxFailures == nil || *r.Spec.MaxFailures != tt.want {
			t.Errorf("POST %s: %d %v, max_failures %v, want %g", tt.body, resp.StatusCode, err, r.Spec.MaxFailures, tt.want)
		}
	}
}

func TestByteCount(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 80 << 10: "80.0 KiB", 3 << 20: "3.0 MiB", 5 << 30: "5.0 GiB"} {
		if got := byteCount(n); got != want {
			t.Errorf("byteCount(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestUpdateLine(t *testing.T) {
	u := &fleetwire.UpdateStatus{Kind: "agent", Version: "2.0", State: fleetwire.UpdateDeferred, FullBytes: 1 << 20, OnMetered: "defer", Metered: true}
	if got, want := updateLine(u), "agent 2.0 deferred: 0 B planned of 1.0 MiB, 0 B transferred; link metered, no bandwidth cap, on metered: defer"; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}
