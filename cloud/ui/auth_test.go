package ui

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/cloud/ingress"
)

// Outside --dev the dashboard takes the cloud's operator and viewer keys: a
// browser without one is sent to sign in, a wrong key or an inference key is
// refused, and the right key sets a cookie that opens the pages; scripts may
// send the key as the API does.
func TestDashboardKeys(t *testing.T) {
	keys, err := ingress.ParseKeys(strings.NewReader("sk-ops-key ops role=operator\nsk-app-key apps\n"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Gate: ingress.NewGate(keys, nil, nil, nil)})
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string, hdr ...string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		return rec
	}
	if rec := get("/ui/rollouts"); rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/ui/login?next=/ui/rollouts" {
		t.Fatalf("no key: %d %q", rec.Code, rec.Header().Get("Location"))
	}
	if rec := get("/ui/api/live"); rec.Code != http.StatusUnauthorized {
		t.Fatalf("live without key: %d", rec.Code)
	}
	if rec := get("/ui/login"); rec.Code != 200 || !strings.Contains(rec.Body.String(), `name="key"`) {
		t.Fatalf("login page: %d", rec.Code)
	}
	login := func(key, next string) *httptest.ResponseRecorder {
		form := url.Values{"key": {key}, "next": {next}}
		req := httptest.NewRequest("POST", "/ui/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		return rec
	}
	if rec := login("sk-wrong-key", "/ui/rollouts"); rec.Code != http.StatusUnauthorized || len(rec.Result().Cookies()) != 0 {
		t.Fatalf("wrong key: %d, cookies %v", rec.Code, rec.Result().Cookies())
	}
	if rec := login("sk-app-key", "/ui/"); rec.Code != http.StatusForbidden || len(rec.Result().Cookies()) != 0 {
		t.Fatalf("inference key: %d, cookies %v", rec.Code, rec.Result().Cookies())
	}
	rec := login("sk-ops-key", "//evil.example/ui/")
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/ui/" {
		t.Fatalf("right key: %d → %q (an outside next must not be followed)", rec.Code, rec.Header().Get("Location"))
	}
	var cookies []*http.Cookie
	for _, c := range rec.Result().Cookies() {
		if c.Name == cookieName {
			cookies = append(cookies, c)
		}
		if !c.HttpOnly || c.Path != "/ui/" || c.SameSite != http.SameSiteStrictMode {
			t.Fatalf("cookie %+v", c)
		}
	}
	if len(cookies) != 1 || len(rec.Result().Cookies()) != 2 {
		t.Fatalf("cookies %+v: want the key and a session", rec.Result().Cookies())
	}
	// No fleet and no coordinator: the page answers 404 with the reason,
	// which proves the guard let the request through.
	if rec := get("/ui/rollouts", "Cookie", cookies[0].Name+"="+cookies[0].Value); rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), "no fleet manager") {
		t.Fatalf("with cookie: %d %s", rec.Code, rec.Body.String())
	}
	if rec := get("/ui/rollouts", "Authorization", "Bearer sk-ops-key"); rec.Code != http.StatusNotFound {
		t.Fatalf("with bearer key: %d", rec.Code)
	}
	if rec := get("/ui/rollouts", "Cookie", cookieName+"=sk-forged-key"); rec.Code != http.StatusSeeOther {
		t.Fatalf("forged cookie: %d", rec.Code)
	}
	if rec := get("/ui/static/app.js"); rec.Code != 200 {
		t.Fatalf("static assets are public (no secrets): %d", rec.Code)
	}
}
