package ui_test

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/agent/fleetclient"
	"github.com/phaseless/phaseless/cloud"
)

// TestDashboardRoles runs the real cloud with a keys file of two tenants
// and every role, one device connected over the embedded broker, and checks
// the dashboard as the fleet admin API is checked (issue 27): inference
// keys, of this tenant or another, reach no page and no action; a viewer
// reads and cannot act; an operator acts only with the session's form
// token and from the dashboard's own origin; a command to a device that
// never connected is refused without creating it; and every action and
// refusal is a line in audit.jsonl.
func TestDashboardRoles(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	os.WriteFile(keys, []byte("sk-app-a-0001 apps\nsk-ops-a-0001 ops role=operator\nsk-view-a-001 dash role=viewer\nsk-app-b-0001 other\n"), 0o600)
	cfg := cloud.Config{}
	fs := flag.NewFlagSet("cloud", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	// --dev only for the embedded broker's device auth; keys, once given,
	// are enforced in --dev too.
	// No MQTT/TLS listener: its default port (8883) is shared by every test
	// on the machine.
	cfg.HTTP, cfg.QUIC, cfg.MQTT, cfg.MQTTTLS, cfg.DataDir, cfg.Dev, cfg.BuiltinWorkers, cfg.APIKeys = "127.0.0.1:0", "", "127.0.0.1:0", "", dir, true, 1, keys
	c, err := cloud.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := c.Serving(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	dev, err := fleetclient.New(fleetclient.Config{BrokerURL: "mqtt://" + c.MQTTAddr(), DeviceID: "car-1", Version: "t",
		StatePath: filepath.Join(t.TempDir(), "fleet.db"), UplinkRate: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	devDone := make(chan error, 1)
	go func() { devDone <- dev.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-devDone
		if err := wait(); err != nil {
			t.Errorf("cloud: %v", err)
		}
	})
	base := "http://" + c.HTTPAddr()

	// browser is a client with a cookie jar that does not follow redirects.
	browser := func() *http.Client {
		jar, _ := cookiejar.New(nil)
		return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	do := func(cl *http.Client, method, path string, form url.Values, hdr ...string) (int, string, http.Header) {
		t.Helper()
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, _ := http.NewRequest(method, base+path, body)
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	login := func(key string) (*http.Client, int) {
		cl := browser()
		status, _, _ := do(cl, "POST", "/ui/login", url.Values{"key": {key}, "next": {"/ui/devices/car-1"}})
		return cl, status
	}

	// The device is known once its status has arrived.
	ops, status := login("sk-ops-a-0001")
	if status != http.StatusSeeOther {
		t.Fatalf("operator sign-in: %d", status)
	}
	// Polled until it shows; go test's -timeout is the only bound, so the
	// test never fails on a wall-clock budget of its own.
	for {
		if status, _, _ := do(ops, "GET", "/ui/devices/car-1", nil); status == 200 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, page, _ := do(ops, "GET", "/ui/devices/car-1", nil)
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("the operator's device page has no form token:\n%s", page)
	}
	token := m[1]
	cmd := func(tok string) url.Values {
		v := url.Values{"name": {"reload-predictor"}, "args": {"path=/x.onnx"}}
		if tok != "" {
			v.Set("csrf", tok)
		}
		return v
	}

	// Inference keys: no sign-in, no page, no action, whichever tenant,
	// whether in a header or in a planted cookie.
	for _, key := range []string{"sk-app-a-0001", "sk-app-b-0001"} {
		if _, status := login(key); status != http.StatusForbidden {
			t.Errorf("sign-in with inference key %s: %d, want 403", key, status)
		}
		for _, path := range []string{"/ui/", "/ui/devices/car-1", "/ui/rollouts", "/ui/pools", "/ui/api/live"} {
			if status, body, _ := do(http.DefaultClient, "GET", path, nil, "x-api-key", key); status != http.StatusForbidden || strings.Contains(body, "/x.onnx") {
				t.Errorf("GET %s with inference key %s: %d, want 403", path, key, status)
			}
		}
		planted := browser()
		u, _ := url.Parse(base + "/ui/")
		planted.Jar.SetCookies(u, []*http.Cookie{{Name: "phaseless_key", Value: key, Path: "/ui/"}})
		if status, _, _ := do(planted, "GET", "/ui/devices/car-1", nil); status != http.StatusForbidden {
			t.Errorf("GET with inference key %s in the cookie: %d, want 403", key, status)
		}
		if status, _, _ := do(planted, "POST", "/ui/devices/car-1/commands", cmd(token)); status != http.StatusForbidden {
			t.Errorf("POST with inference key %s: %d, want 403", key, status)
		}
		if status, _, _ := do(http.DefaultClient, "POST", "/ui/rollouts/r1/state", url.Values{"state": {"aborted"}}, "x-api-key", key); status != http.StatusForbidden {
			t.Errorf("rollout POST with inference key %s: %d, want 403", key, status)
		}
	}

	// A viewer reads, sees no form, and cannot act even with the
	// operator's token.
	view, status := login("sk-view-a-001")
	if status != http.StatusSeeOther {
		t.Fatalf("viewer sign-in: %d", status)
	}
	if status, body, _ := do(view, "GET", "/ui/devices/car-1", nil); status != 200 || strings.Contains(body, "command-form") {
		t.Errorf("viewer GET device page: %d, form shown %v", status, strings.Contains(body, "command-form"))
	}
	if status, _, _ := do(view, "POST", "/ui/devices/car-1/commands", cmd(token)); status != http.StatusForbidden {
		t.Errorf("viewer POST: %d, want 403", status)
	}

	// The operator: without the token, with another session's token, or
	// from another site, refused; with it, the command is queued.
	if status, _, _ := do(ops, "POST", "/ui/devices/car-1/commands", cmd("")); status != http.StatusForbidden {
		t.Errorf("operator POST without token: %d, want 403", status)
	}
	ops2, _ := login("sk-ops-a-0001")
	if status, _, _ := do(ops2, "POST", "/ui/devices/car-1/commands", cmd(token)); status != http.StatusForbidden {
		t.Errorf("operator POST with another session's token: %d, want 403", status)
	}
	if status, _, _ := do(ops, "POST", "/ui/devices/car-1/commands", cmd(token), "Sec-Fetch-Site", "cross-site"); status != http.StatusForbidden {
		t.Errorf("operator POST from another site: %d, want 403", status)
	}
	if status, _, _ := do(ops, "POST", "/ui/devices/car-1/commands", cmd(token), "Origin", "http://evil.example"); status != http.StatusForbidden {
		t.Errorf("operator POST with a foreign Origin: %d, want 403", status)
	}
	status, _, hdr := do(ops, "POST", "/ui/devices/car-1/commands", cmd(token), "Origin", base, "Sec-Fetch-Site", "same-origin")
	if status != http.StatusSeeOther || !strings.Contains(hdr.Get("Location"), "sent=") {
		t.Fatalf("operator POST with token: %d → %q", status, hdr.Get("Location"))
	}
	// A device that never connected gets no command and no record.
	if status, _, _ := do(ops, "POST", "/ui/devices/car-404/commands", cmd(token)); status != http.StatusNotFound {
		t.Errorf("command to car-404: %d, want 404", status)
	}
	if status, _, _ := do(http.DefaultClient, "GET", "/v1/fleet/devices/car-404", nil, "x-api-key", "sk-ops-a-0001"); status != http.StatusNotFound {
		t.Errorf("car-404 after the refused command: %d, want 404 (no record)", status)
	}

	// The audit log: the command is there with the operator's tenant, and
	// each refusal with its caller.
	f, err := os.Open(filepath.Join(dir, cloud.AuditLogFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e struct{ Tenant, Method, Path, Outcome string }
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		got[e.Tenant+" "+e.Method+" "+e.Path+" "+e.Outcome]++
	}
	for line, n := range map[string]int{
		"ops POST /ui/devices/car-1/commands done":     1,
		"ops POST /ui/devices/car-1/commands denied":   4,
		"ops POST /ui/devices/car-404/commands failed": 1,
		"dash POST /ui/devices/car-1/commands denied":  1,
		"apps POST /ui/login denied":                   1,
		"other GET /ui/devices/car-1 denied":           2,
		"other POST /ui/devices/car-1/commands denied": 1,
		"apps POST /ui/rollouts/r1/state denied":       1,
	} {
		if got[line] != n {
			t.Errorf("audit %q: %d lines, want %d (log: %v)", line, got[line], n, got)
		}
	}
}
