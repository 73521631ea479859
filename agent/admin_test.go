package agent

import (
	"net/http"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/internal/metrics/metricstest"
)

// pprof is off by default and, with --admin-listen, served on its own
// listener, never on the local API.
func TestAdminListener(t *testing.T) {
	off, url := startAgent(t, testConfig(t))
	if off.AdminAddr() != "" {
		t.Fatalf("admin listener on by default: %s", off.AdminAddr())
	}
	if resp, err := http.Get(url + "/debug/pprof/"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("local API serves pprof: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	cfg := testConfig(t)
	cfg.AdminListen = "127.0.0.1:0"
	a, _ := startAgent(t, cfg)
	metricstest.CheckPprof(t, a.AdminAddr())
	bad := testConfig(t)
	bad.AdminListen = "no-port"
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), `"AdminListen"`) {
		t.Fatalf("bad --admin-listen: %v", err)
	}
}
