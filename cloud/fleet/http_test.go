package fleet

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

func TestHandler(t *testing.T) {
	b := startBroker(t, broker.Config{DevAuth: true})
	m := openManager(t, Config{DataDir: t.TempDir(), Broker: b})
	m.deliver(topics.Device("h-1", fleetwire.SuffixTelemetry), batch("h-1", "b", 1, 3))
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()

	for _, c := range []struct {
		method, path, body string
		status             int
		want               string
	}{
		{"GET", "/v1/fleet/devices", "", 200, `"id": "h-1"`},
		{"GET", "/v1/fleet/devices/h-1", "", 200, `"ingested": 3`},
		{"GET", "/v1/fleet/devices/nope", "", 404, "unknown device"},
		{"PUT", "/v1/fleet/devices/h-1/config", `{"values":{"a":"1"}}`, 200, `"version": 1`},
		{"PUT", "/v1/fleet/devices/h-1/config", `{"values":{"a":"1"},"extra":1}`, 400, "unknown field"},
		{"PUT", "/v1/fleet/devices/bad%20id/config", `{"values":{}}`, 400, "device id"},
		{"PUT", "/v1/fleet/devices/h-1/config", `{"values":{"":"x"}}`, 400, "empty config key"},
		{"POST", "/v1/fleet/devices/h-1/commands", `{"name":"update","args":{"v":"2"}}`, 202, `"state": "pending"`},
		{"POST", "/v1/fleet/devices/h-1/commands", `{"args":{}}`, 400, "name is required"},
		{"GET", "/v1/fleet/devices/h-1/commands/unknown", "", 404, "unknown command"},
		{"GET", "/v1/fleet/telemetry/count", "", 200, `"stored": 3`},
		{"GET", "/v1/fleet/telemetry/count?device=h-1", "", 200, `"last_seq": 3`},
		{"GET", "/v1/fleet/telemetry/count?device=zz", "", 404, "unknown device"},
		{"GET", "/v1/fleet/telemetry/export?since=yesterday", "", 400, "RFC 3339"},
		{"GET", "/v1/fleet/telemetry/export?device=h-1&since=2000-01-01T00:00:00Z", "", 200, `"seq":3`},
		{"GET", "/v1/fleet/telemetry/export?since=2999-01-01T00:00:00Z", "", 200, ""},
		{"DELETE", "/v1/fleet/devices/h-1", "", 405, ""},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader(c.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var sb strings.Builder
		_, _ = io.Copy(&sb, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(sb.String(), c.want) {
			t.Errorf("%s %s: %d %q, want %d containing %q", c.method, c.path, resp.StatusCode, sb.String(), c.status, c.want)
		}
		if c.path == "/v1/fleet/telemetry/export?since=2999-01-01T00:00:00Z" && sb.Len() != 0 {
			t.Errorf("future since exported %q", sb.String())
		}
		if resp.StatusCode >= 400 && resp.StatusCode != 405 {
			var e apiError
			if err := json.Unmarshal([]byte(sb.String()), &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
				t.Errorf("%s %s: error body %q", c.method, c.path, sb.String())
			}
		}
	}
}
