package httpapi

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/internal/metrics"
)

func TestLocalGuard(t *testing.T) {
	g := LocalGuard{Hosts: []string{"HeadUnit.local", "10.0.0.7"}, Origins: []string{"http://localhost:3000", "https://ui.example:443"}}
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := g.Wrap(inner)
	const json_ = "application/json"
	cases := []struct {
		name, method, path, host, origin, ctype string
		unix                                    bool
		status                                  int
		shape                                   string // "openai" or "anthropic" error body; "" for none
		code                                    string // OpenAI error.code or Anthropic error.type
	}{
		{"loopback v4", "POST", "/v1/chat/completions", "127.0.0.1:7070", "", json_, false, 418, "", ""},
		{"loopback v4 range", "POST", "/v1/chat/completions", "127.1.2.3:7070", "", json_, false, 418, "", ""},
		{"loopback v6", "POST", "/v1/chat/completions", "[::1]:7070", "", json_, false, 418, "", ""},
		{"localhost no port", "POST", "/v1/chat/completions", "localhost", "", json_, false, 418, "", ""},
		{"localhost upper, trailing dot", "POST", "/v1/chat/completions", "LOCALHOST.:7070", "", json_, false, 418, "", ""},
		{"configured name", "POST", "/v1/chat/completions", "headunit.local:7070", "", "application/json; charset=utf-8", false, 418, "", ""},
		{"configured address", "GET", "/v1/models", "10.0.0.7:7070", "", "", false, 418, "", ""},
		{"rebinding name", "POST", "/v1/chat/completions", "evil.example.com:7070", "", json_, false, 403, "openai", "forbidden_host"},
		{"rebinding name, Anthropic", "POST", "/v1/messages", "evil.example.com", "", json_, false, 403, "anthropic", "permission_error"},
		{"non-loopback address", "GET", "/v1/models", "192.168.1.9:7070", "", "", false, 403, "openai", "forbidden_host"},
		{"localhost suffix", "GET", "/v1/models", "localhost.evil.example", "", "", false, 403, "openai", "forbidden_host"},
		{"empty host", "GET", "/v1/models", "", "", "", false, 403, "openai", "forbidden_host"},
		{"foreign origin", "POST", "/v1/chat/completions", "127.0.0.1:7070", "https://evil.example", json_, false, 403, "openai", "forbidden_origin"},
		{"null origin", "POST", "/v1/messages", "127.0.0.1:7070", "null", json_, false, 403, "anthropic", "permission_error"},
		{"allowed origin", "POST", "/v1/chat/completions", "127.0.0.1:7070", "http://localhost:3000", json_, false, 418, "", ""},
		{"allowed origin, default port", "POST", "/v1/chat/completions", "127.0.0.1:7070", "https://ui.example", json_, false, 418, "", ""},
		{"allowed origin preflight", "OPTIONS", "/v1/chat/completions", "127.0.0.1:7070", "http://localhost:3000", "", false, 204, "", ""},
		{"text/plain body", "POST", "/v1/chat/completions", "127.0.0.1:7070", "", "text/plain;charset=UTF-8", false, 415, "openai", "unsupported_media_type"},
		{"form body, Anthropic", "POST", "/v1/messages", "127.0.0.1:7070", "", "application/x-www-form-urlencoded", false, 415, "anthropic", "invalid_request_error"},
		{"no content type", "POST", "/v1/chat/completions", "127.0.0.1:7070", "", "", false, 415, "openai", "unsupported_media_type"},
		{"unix socket", "POST", "/v1/chat/completions", "evil.example.com", "https://evil.example", "text/plain", true, 418, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(c.method, c.path, strings.NewReader(`{}`))
			r.Host = c.host
			if c.origin != "" {
				r.Header.Set("Origin", c.origin)
			}
			if c.ctype != "" {
				r.Header.Set("Content-Type", c.ctype)
			}
			if c.unix {
				r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.UnixAddr{Name: "/run/agent.sock", Net: "unix"}))
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != c.status {
				t.Fatalf("status %d, want %d: %s", w.Code, c.status, w.Body)
			}
			switch c.shape {
			case "openai":
				var b oaiErrorBody
				if err := json.Unmarshal(w.Body.Bytes(), &b); err != nil || b.Error.Code == nil || *b.Error.Code != c.code || b.Error.Message == "" {
					t.Fatalf("OpenAI error body %s, want code %q", w.Body, c.code)
				}
			case "anthropic":
				var b antErrorBody
				if err := json.Unmarshal(w.Body.Bytes(), &b); err != nil || b.Type != "error" || b.Error.Type != c.code || b.Error.Message == "" {
					t.Fatalf("Anthropic error body %s, want type %q", w.Body, c.code)
				}
			}
			allowedOrigin := c.origin != "" && c.status != 403 && !c.unix
			if got := w.Header().Get("Access-Control-Allow-Origin"); (got != "") != allowedOrigin || allowedOrigin && got != c.origin {
				t.Errorf("Access-Control-Allow-Origin %q for origin %q", got, c.origin)
			}
		})
	}
}

func TestLocalGuardValidate(t *testing.T) {
	for _, g := range []LocalGuard{
		{Hosts: []string{""}}, {Hosts: []string{"http://x"}}, {Hosts: []string{"x:80"}},
		{Origins: []string{"localhost:3000"}}, {Origins: []string{"http://x/path"}}, {Origins: []string{"*"}}, {Origins: []string{"ftp://x"}},
	} {
		if g.Validate() == nil {
			t.Errorf("%+v accepted", g)
		}
	}
	if err := (LocalGuard{Hosts: []string{"::1", "car.local"}, Origins: []string{"http://[::1]:8080"}}).Validate(); err != nil {
		t.Error(err)
	}
}

// FuzzLocalGuard feeds hostile Host, Origin and Content-Type headers: the
// guard never panics, and whatever it lets through names a loopback
// address, localhost or the configured host, carries an allowed origin (or
// none) and a JSON body.
func FuzzLocalGuard(f *testing.F) {
	f.Add("127.0.0.1:7070", "", "application/json")
	f.Add("evil.example.com", "https://evil.example", "text/plain")
	f.Add("[::1]:80", "http://localhost:3000", "application/json; charset=utf-8")
	f.Add("localhost.:x:y", "null", "")
	f.Add("car.local", "HTTP://LOCALHOST:3000/", "application/JSON")
	g := LocalGuard{Hosts: []string{"car.local"}, Origins: []string{"http://localhost:3000"}}
	passed := false
	h := g.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { passed = true }))
	f.Fuzz(func(t *testing.T, host, origin, ctype string) {
		r := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader("{}"))
		r.Host = host
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		r.Header.Set("Content-Type", ctype)
		passed = false
		h.ServeHTTP(httptest.NewRecorder(), r)
		if !passed {
			return
		}
		if !metrics.NewLoopbackHosts([]string{"car.local"}).Allow(host) {
			t.Fatalf("Host %q let through", host)
		}
		if c, err := canonicalOrigin(origin); origin != "" && (err != nil || c != "http://localhost:3000") {
			t.Fatalf("Origin %q let through", origin)
		}
		if !strings.HasPrefix(strings.ToLower(strings.TrimSpace(ctype)), "application/json") {
			t.Fatalf("Content-Type %q let through", ctype)
		}
	})
}
