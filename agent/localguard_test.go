package agent

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// The local API against a web page in the head unit's browser: a DNS
// rebinding page (its own name in Host), a cross-origin form/fetch POST
// (foreign Origin, text/plain body) are refused in the caller's API shape;
// SDK-style calls, a configured origin (with CORS headers) and the Unix
// socket still work. Issue 21 found both attacks answered with 200.
func TestLocalAPIRefusesBrowserAttacks(t *testing.T) {
	cfg := testConfig(t)
	cfg.AllowOrigins = []string{"http://localhost:3000"}
	cfg.AllowHosts = []string{"headunit.local"}
	cfg.Socket = filepath.Join(t.TempDir(), "agent.sock")
	_, url := startAgent(t, cfg)
	const chat = `{"messages":[{"role":"user","content":"turn on the AC"}],"max_tokens":4}`
	const msgs = `{"model":"auto","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`
	send := func(c *http.Client, path, body, host string, hdr ...string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest("POST", url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}
	const jsonCT = "application/json"
	cases := []struct {
		name, path, body, host string
		hdr                    []string
		status                 int
		want                   string // substring of the body
	}{
		{"rebinding Host", "/v1/chat/completions", chat, "evil.example.com:7070", []string{"Content-Type", jsonCT}, 403, `"code":"forbidden_host"`},
		{"rebinding Host, Anthropic", "/v1/messages", msgs, "evil.example.com", []string{"Content-Type", jsonCT, "anthropic-version", "2023-06-01"}, 403, `"type":"permission_error"`},
		{"cross-origin text/plain", "/v1/chat/completions", chat, "", []string{"Content-Type", "text/plain;charset=UTF-8", "Origin", "https://evil.example"}, 403, `"code":"forbidden_origin"`},
		{"text/plain without origin", "/v1/chat/completions", chat, "", []string{"Content-Type", "text/plain"}, 415, `"code":"unsupported_media_type"`},
		{"SDK call", "/v1/chat/completions", chat, "", []string{"Content-Type", jsonCT}, 200, `"choices"`},
		{"configured host", "/v1/messages", msgs, "headunit.local:7070", []string{"Content-Type", jsonCT}, 200, `"content"`},
		{"allowed origin", "/v1/chat/completions", chat, "localhost:7070", []string{"Content-Type", jsonCT, "Origin", "http://localhost:3000"}, 200, `"choices"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := send(client, c.path, c.body, c.host, c.hdr...)
			if resp.StatusCode != c.status || !strings.Contains(body, c.want) {
				t.Fatalf("status %d body %s, want %d with %s", resp.StatusCode, body, c.status, c.want)
			}
			if origin := resp.Header.Get("Access-Control-Allow-Origin"); (c.name == "allowed origin") != (origin == "http://localhost:3000") {
				t.Errorf("Access-Control-Allow-Origin %q", origin)
			}
		})
	}
	// No browser reaches the Unix socket: it is not checked.
	unix := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", cfg.Socket)
	}}}
	defer unix.CloseIdleConnections()
	if resp, body := send(unix, "/v1/chat/completions", chat, "unix", "Content-Type", jsonCT); resp.StatusCode != 200 {
		t.Fatalf("unix socket: %d %s", resp.StatusCode, body)
	}
}

func TestLocalGuardConfig(t *testing.T) {
	for _, c := range []struct {
		listen string
		want   bool // 192.168.1.5 accepted
	}{{"127.0.0.1:7070", false}, {"0.0.0.0:7070", false}, {":7070", false}, {"192.168.1.5:7070", true}} {
		g := localGuard(Config{Listen: c.listen})
		got := false
		for _, h := range g.Hosts {
			got = got || h == "192.168.1.5"
		}
		if got != c.want {
			t.Errorf("listen %s: hosts %v", c.listen, g.Hosts)
		}
	}
	cfg := testConfig(t)
	cfg.AllowOrigins = []string{"evil.example"}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "AllowOrigins") {
		t.Errorf("bad origin: %v", err)
	}
}
