package agent

import (
	"io"
	"net/http"
	"strings"
	"testing"
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
	resp, err := http.Get("http://" + a.AdminAddr() + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "goroutine profile:") {
		t.Fatalf("goroutine profile: %d %.200s", resp.StatusCode, body)
	}
	bad := testConfig(t)
	bad.AdminListen = "no-port"
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), `"admin-listen"`) {
		t.Fatalf("bad --admin-listen: %v", err)
	}
}
