// Package ui is the operator's dashboard that phaseless-cloud serves at
// /ui/: the fleet (devices, one device's detail, rollouts) and the cloud
// (pools, workers, live TTFT and ITL). Pages are rendered on the server with
// html/template from an embedded file system; a small vanilla script polls
// /ui/api/live to update live values and charts without reloading. There is
// no build step.
//
// The dashboard obeys the fleet admin API's roles and audit log
// (ingress.Gate): viewer keys read, operator keys also act, inference and
// worker keys reach nothing. A browser signs in once at /ui/login and
// carries the key in an HttpOnly, SameSite=Strict cookie beside a random
// session cookie; scripts may read pages with the key as the API does
// (Authorization: Bearer, x-api-key) but act through /v1/fleet/. Every
// POST must come from the dashboard's own origin (Sec-Fetch-Site, Origin)
// and carry the session's form token; every action and every refusal is a
// line in the cloud's audit.jsonl.
package ui

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet"
	"github.com/phaseless/phaseless/cloud/ingress"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/llm"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Prefix is where the cloud mounts the dashboard.
const Prefix = "/ui/"

// cookieName carries the API key of a signed-in browser.
const cookieName = "phaseless_key"

// sessionCookie carries a browser's random session id, which its form
// tokens are bound to; sign-in replaces it.
const sessionCookie = "phaseless_session"

// csrfField is the form field that carries the session's token.
const csrfField = "csrf"

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
	// Gate admits keys by the fleet admin API's roles and writes its audit
	// log (*ingress.Gate); required. A gate without keys (--dev) admits
	// anyone, and still audits and checks form tokens.
	Gate Gate
	// Now is the clock (default time.Now).
	Now func() time.Time
	// RouteWindow is how far back the device list reads telemetry for each
	// device's route mix (default 15 minutes).
	RouteWindow time.Duration
}

// Gate is the cloud's door for keys (*ingress.Gate implements it).
type Gate interface {
	// AdminKey authenticates r and checks its key's role may make r's
	// method on the fleet admin surface.
	AdminKey(r *http.Request) (ingress.Key, error)
	// Audit writes one audit line for r.
	Audit(r *http.Request, k ingress.Key, status int, outcome, reason string) error
}

var _ Gate = (*ingress.Gate)(nil)

// Server serves the dashboard.
type Server struct {
	cfg    Config
	pages  map[string]*template.Template
	mux    *http.ServeMux
	live   liveSampler
	secret []byte // keys the form tokens (HMAC); new each start
	origin *http.CrossOriginProtection
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
	if cfg.Gate == nil {
		return nil, errors.New("ui: Config.Gate is required (an ingress.Gate without keys leaves the dashboard open)")
	}
	s := &Server{cfg: cfg, pages: map[string]*template.Template{}, mux: http.NewServeMux(), secret: make([]byte, 32), origin: http.NewCrossOriginProtection()}
	rand.Read(s.secret)
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
	s.mux.Handle("POST /ui/login", s.origin.Handler(http.HandlerFunc(s.login)))
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

// guard admits a request whose key's role may make it (Gate.AdminKey:
// viewer reads, operator acts). A browser with no key, or a key the cloud
// no longer knows, is sent to sign in; a key of another role gets 403.
// POSTs must also come from this origin and carry the session's form
// token; each is audited with its outcome, and so is every refusal of a
// key that was presented.
func (s *Server) guard(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		keyed := withCookieKey(r)
		presented := keyed.Header.Get("Authorization") != "" || keyed.Header.Get("x-api-key") != ""
		k, err := s.cfg.Gate.AdminKey(keyed)
		if err != nil {
			status := http.StatusUnauthorized
			switch llm.CodeOf(err) {
			case llm.CodePermission:
				status = http.StatusForbidden
			case llm.CodeBudget:
				status = http.StatusTooManyRequests
			}
			if presented || r.Method != http.MethodGet {
				s.cfg.Gate.Audit(r, k, status, "denied", err.Error())
			}
			if status == http.StatusUnauthorized && r.Method == http.MethodGet && r.URL.Path != "/ui/api/live" {
				http.Redirect(w, r, "/ui/login?next="+r.URL.Path, http.StatusSeeOther)
				return
			}
			s.fail(w, r, status, err)
			return
		}
		sess := s.session(w, r, k)
		r = r.WithContext(context.WithValue(r.Context(), sessionKey{}, sess))
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			h(w, r)
			return
		}
		if err := s.checkPost(r, sess); err != nil {
			s.cfg.Gate.Audit(r, k, http.StatusForbidden, "denied", err.Error())
			s.fail(w, r, http.StatusForbidden, err)
			return
		}
		// Hold the answer (a redirect) until its audit line is on disk: an
		// acknowledged action is always in the log, as on the admin API.
		rec := &heldResponse{header: http.Header{}, status: http.StatusOK}
		h(rec, r)
		outcome := "done"
		if rec.status >= 400 || rec.failed {
			outcome = "failed"
		}
		if err := s.cfg.Gate.Audit(r, k, rec.status, outcome, rec.reason); err != nil {
			s.fail(w, r, http.StatusInternalServerError, fmt.Errorf("audit log: %w (the action was carried out)", err))
			return
		}
		for name, vs := range rec.header {
			w.Header()[name] = vs
		}
		w.WriteHeader(rec.status)
		w.Write(rec.body)
	}
}

// session is what a guarded request's page needs to know of its caller.
type session struct {
	role  ingress.Role // "" with open access
	id    string       // the session cookie's value
	token string       // the form token for this session and key
}

type sessionKey struct{}

// CanAct reports whether the caller may use the page's forms.
func (s session) CanAct() bool { return s.role == "" || s.role == ingress.RoleOperator }

// session reads the browser's session id, starting one (a random cookie)
// when it has none, and derives the form token bound to it and to the key.
func (s *Server) session(w http.ResponseWriter, r *http.Request, k ingress.Key) session {
	id := ""
	if c, err := r.Cookie(sessionCookie); err == nil && len(c.Value) == 32 {
		id = c.Value
	} else if r.Method == http.MethodGet {
		id = s.newSession(w, r)
	}
	return session{role: k.Role, id: id, token: s.token(id, k.ID)}
}

func (s *Server) newSession(w http.ResponseWriter, r *http.Request) string {
	b := make([]byte, 16)
	rand.Read(b)
	id := fmt.Sprintf("%x", b)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: Prefix, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	return id
}

// token is HMAC(secret, session id, key id): a page from this server, for
// this browser's session and this key, is the only place to learn it.
func (s *Server) token(session, keyID string) string {
	if session == "" {
		return ""
	}
	m := hmac.New(sha256.New, s.secret)
	m.Write([]byte(session))
	m.Write([]byte{0})
	m.Write([]byte(keyID))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkPost refuses a state change from another origin (Sec-Fetch-Site,
// Origin: net/http's CrossOriginProtection) or without the session's form
// token. Forms are for browsers; scripts act through /v1/fleet/.
func (s *Server) checkPost(r *http.Request, sess session) error {
	if err := s.origin.Check(r); err != nil {
		return fmt.Errorf("refused: %w", err)
	}
	if sess.id == "" {
		return errors.New("refused: no dashboard session (sign in at /ui/login; scripts use /v1/fleet/)")
	}
	got := r.PostFormValue(csrfField)
	if got == "" || !hmac.Equal([]byte(got), []byte(sess.token)) {
		return errors.New("refused: the form token is missing or not this session's (reload the page)")
	}
	return nil
}

// heldResponse holds a POST handler's answer until it is audited.
type heldResponse struct {
	header http.Header
	status int
	wrote  bool
	body   []byte
	failed bool   // the handler redirected back with an error
	reason string // that error
}

func (h *heldResponse) Header() http.Header { return h.header }

func (h *heldResponse) WriteHeader(status int) {
	if !h.wrote {
		h.status, h.wrote = status, true
	}
}

func (h *heldResponse) Write(p []byte) (int, error) {
	h.wrote = true
	h.body = append(h.body, p...)
	return len(p), nil
}

// failAction answers a form whose action failed: back to the page with
// the error, recorded as failed in the audit log.
func failAction(w http.ResponseWriter, r *http.Request, back string, err error) {
	if h, ok := w.(*heldResponse); ok {
		h.failed, h.reason = true, err.Error()
	}
	http.Redirect(w, r, back+"error="+url.QueryEscape(err.Error()), http.StatusSeeOther)
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
	s.render(w, r, http.StatusOK, "login", map[string]any{"Next": safeNext(r.URL.Query().Get("next"))})
}

// login admits operator and viewer keys only (a GET on the admin surface
// is what signing in asks for), and starts a new session so a session id
// planted before sign-in is worth nothing after it.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	key := r.PostFormValue("key")
	next := safeNext(r.PostFormValue("next"))
	probe := r.Clone(r.Context())
	probe.Method = http.MethodGet
	probe.Header.Del("x-api-key")
	probe.Header.Set("Authorization", "Bearer "+key)
	if k, err := s.cfg.Gate.AdminKey(probe); err != nil {
		status := http.StatusUnauthorized
		if llm.CodeOf(err) == llm.CodePermission {
			status = http.StatusForbidden
		}
		s.cfg.Gate.Audit(r, k, status, "denied", err.Error())
		s.render(w, r, status, "login", map[string]any{"Next": next, "Error": err.Error()})
		return
	}
	s.newSession(w, r)
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

func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, page string, data map[string]any) {
	if data == nil {
		data = map[string]any{}
	}
	data["Page"] = page
	data["HasFleet"] = s.cfg.Fleet != nil
	data["HasCloud"] = s.cfg.Cloud != nil
	data["Now"] = s.cfg.Now()
	if sess, ok := r.Context().Value(sessionKey{}).(session); ok {
		data["CSRF"], data["CanAct"] = sess.token, sess.CanAct()
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := s.pages[page].Execute(w, data); err != nil {
		// Headers are gone; the truncated page says the rest.
		fmt.Fprintf(w, "<p>template error: %s</p>", template.HTMLEscapeString(err.Error()))
	}
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	s.render(w, r, status, "error", map[string]any{"Status": status, "Error": err.Error()})
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
