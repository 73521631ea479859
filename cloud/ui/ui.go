// Package ui is the operator's dashboard that phaseless-cloud serves at
// /ui/: the fleet (devices, one device's detail, rollouts) and the cloud
// (pools, workers, live TTFT and ITL). Pages are rendered on the server with
// html/template from an embedded file system; a small vanilla script polls
// /ui/api/live to update live values and charts without reloading. There is
// no build step.
//
// The dashboard sits behind the cloud's API keys: a browser signs in once at
// /ui/login and carries the key in an HttpOnly cookie; scripts may send the
// key as the API does (Authorization: Bearer, x-api-key). With --dev the
// cloud passes no authenticator and the dashboard is open.
package ui

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"net/http"
	"sync"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet"
	"github.com/phaseless/phaseless/internal/metrics"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Prefix is where the cloud mounts the dashboard.
const Prefix = "/ui/"

// cookieName carries the API key of a signed-in browser.
const cookieName = "phaseless_key"

// Fleet is what the dashboard reads from and does with the fleet manager
// (*fleet.Manager implements it).
type Fleet interface {
	Devices() ([]*fleet.Device, error)
	Device(id string) (*fleet.Device, error)
	StatusHistory(id string) []fleet.StatusEvent
	SendCommand(ctx context.Context, id, name string, args map[string]string) (*fleet.CommandState, error)
	Export(ctx context.Context, w io.Writer, since time.Time, device string) (int, error)
}

var _ Fleet = (*fleet.Manager)(nil)

// Pool is one worker pool as the coordinator sees it now.
type Pool struct {
	Name                      string
	Workers                   int
	Running, Capacity, Queued int
}

// Utilization is running sequences over capacity.
func (p Pool) Utilization() float64 {
	if p.Capacity == 0 {
		return 0
	}
	return float64(p.Running) / float64(p.Capacity)
}

// Worker is one worker as the coordinator last probed it.
type Worker struct {
	Name, Pool      string
	Healthy         bool
	ProbeError      string
	Inflight        int
	Queued          int
	Capacity        int     // 0 = unknown
	KVUsage         float64 // 0..1
	PrefixHitTokens uint64  // cumulative; 0 = unknown
	PromptTokens    uint64
	OutputTokens    uint64
}

// PrefixHitShare is the share of the worker's prompt tokens served from its
// prefix cache, over its lifetime (the live view shows the recent share).
func (w Worker) PrefixHitShare() float64 {
	if w.PromptTokens == 0 {
		return 0
	}
	return float64(w.PrefixHitTokens) / float64(w.PromptTokens)
}

// Cloud is what the dashboard reads from the coordinator.
type Cloud interface {
	Pools() []Pool
	Workers() []Worker
	// Latency returns the cumulative TTFT, ITL and batch-size histograms
	// (all pools merged) and the tokens streamed so far.
	Latency() (ttft, itl, batch metrics.HistogramSnapshot, outputTokens float64)
}

// Config configures the dashboard. Fleet or Cloud may be nil (a cloud
// without a fleet manager shows no devices).
type Config struct {
	Fleet Fleet
	Cloud Cloud
	// Authenticate checks a request's API key (the cloud's key file); nil
	// leaves the dashboard open (--dev).
	Authenticate func(*http.Request) (string, error)
	// Now is the clock (default time.Now).
	Now func() time.Time
	// RouteWindow is how far back the device list reads telemetry for each
	// device's route mix (default 15 minutes).
	RouteWindow time.Duration
}

// Server serves the dashboard.
type Server struct {
	cfg   Config
	pages map[string]*template.Template
	mux   *http.ServeMux
	live  liveSampler
}

// New builds the dashboard's handler.
func New(cfg Config) (*Server, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.RouteWindow == 0 {
		cfg.RouteWindow = 15 * time.Minute
	}
	if cfg.RouteWindow < 0 {
		return nil, fmt.Errorf("ui: RouteWindow %v must be positive", cfg.RouteWindow)
	}
	s := &Server{cfg: cfg, pages: map[string]*template.Template{}, mux: http.NewServeMux()}
	s.live.now = cfg.Now
	for _, p := range []string{"devices", "device", "rollouts", "pools", "login", "error"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+p+".html")
		if err != nil {
			return nil, fmt.Errorf("ui: template %s: %w", p, err)
		}
		s.pages[p] = t
	}
	static, _ := fs.Sub(staticFS, "static")
	s.mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)))
	s.mux.HandleFunc("GET /ui/login", s.loginPage)
	s.mux.HandleFunc("POST /ui/login", s.login)
	s.mux.HandleFunc("GET /ui/{$}", s.guard(s.devices))
	s.mux.HandleFunc("GET /ui/devices/{id}", s.guard(s.device))
	s.mux.HandleFunc("POST /ui/devices/{id}/commands", s.guard(s.sendCommand))
	s.mux.HandleFunc("GET /ui/rollouts", s.guard(s.rollouts))
	s.mux.HandleFunc("POST /ui/rollouts/{id}/state", s.guard(s.setRolloutState))
	s.mux.HandleFunc("GET /ui/pools", s.guard(s.pools))
	s.mux.HandleFunc("GET /ui/api/live", s.guard(s.liveJSON))
	return s, nil
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The pages hold operator actions: no framing by other sites.
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:")
	s.mux.ServeHTTP(w, r)
}

// guard admits requests with a valid key (header or sign-in cookie); a
// browser without one is sent to the sign-in page.
func (s *Server) guard(h http.HandlerFunc) http.HandlerFunc {
	if s.cfg.Authenticate == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if _, err := s.cfg.Authenticate(withCookieKey(r)); err != nil {
			if r.Method == http.MethodGet && r.URL.Path != "/ui/api/live" {
				http.Redirect(w, r, "/ui/login?next="+r.URL.Path, http.StatusSeeOther)
				return
			}
			http.Error(w, "unauthorized: "+err.Error(), http.StatusUnauthorized)
			return
		}
		h(w, r)
	}
}

// withCookieKey returns r with the sign-in cookie's key as a bearer token
// when r carries no key of its own.
func withCookieKey(r *http.Request) *http.Request {
	if r.Header.Get("Authorization") != "" || r.Header.Get("x-api-key") != "" {
		return r
	}
	c, err := r.Cookie(cookieName)
	if err != nil || c.Value == "" {
		return r
	}
	r2 := r.Clone(r.Context())
	r2.Header.Set("Authorization", "Bearer "+c.Value)
	return r2
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	s.render(w, http.StatusOK, "login", map[string]any{"Next": safeNext(r.URL.Query().Get("next"))})
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	key := r.PostFormValue("key")
	next := safeNext(r.PostFormValue("next"))
	if s.cfg.Authenticate != nil {
		probe := r.Clone(r.Context())
		probe.Header.Set("Authorization", "Bearer "+key)
		if _, err := s.cfg.Authenticate(probe); err != nil {
			s.render(w, http.StatusUnauthorized, "login", map[string]any{"Next": next, "Error": err.Error()})
			return
		}
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: key, Path: Prefix, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// safeNext keeps redirects after sign-in inside the dashboard.
func safeNext(p string) string {
	if len(p) < len(Prefix) || p[:len(Prefix)] != Prefix || (len(p) > 1 && p[1] == '/') {
		return Prefix
	}
	return p
}

func (s *Server) render(w http.ResponseWriter, status int, page string, data map[string]any) {
	if data == nil {
		data = map[string]any{}
	}
	data["Page"] = page
	data["HasFleet"] = s.cfg.Fleet != nil
	data["HasCloud"] = s.cfg.Cloud != nil
	data["Now"] = s.cfg.Now()
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := s.pages[page].Execute(w, data); err != nil {
		// Headers are gone; the truncated page says the rest.
		fmt.Fprintf(w, "<p>template error: %s</p>", template.HTMLEscapeString(err.Error()))
	}
}

func (s *Server) fail(w http.ResponseWriter, status int, err error) {
	s.render(w, status, "error", map[string]any{"Status": status, "Error": err.Error()})
}

var errNoFleet = errors.New("this cloud runs no fleet manager (start it with --mqtt or --mqtt-url)")

// liveSampler keeps a short history of the coordinator's cumulative
// histograms, sampled when the live view asks (at most once a second), so
// every chart point covers the interval since the previous sample.
type liveSampler struct {
	now     func() time.Time
	mu      sync.Mutex // guards samples
	samples []liveSample
}

type liveSample struct {
	at             time.Time
	ttft, itl, bsz metrics.HistogramSnapshot
	tokens         float64
}

const liveHistory = 120

func (l *liveSampler) sample(c Cloud) []liveSample {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if n := len(l.samples); n == 0 || now.Sub(l.samples[n-1].at) >= time.Second {
		ttft, itl, bsz, tokens := c.Latency()
		l.samples = append(l.samples, liveSample{at: now, ttft: ttft, itl: itl, bsz: bsz, tokens: tokens})
		if len(l.samples) > liveHistory+1 {
			l.samples = append([]liveSample(nil), l.samples[len(l.samples)-liveHistory-1:]...)
		}
	}
	return append([]liveSample(nil), l.samples...)
}
