package ingress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/phaseless/phaseless/internal/httplimit"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/transport/httpapi"
)

// HTTPConfig configures the HTTP listener.
type HTTPConfig struct {
	Addr string
	// Listener, when set, is served instead of listening on Addr: the
	// caller bound it early to know its port. NewHTTP owns it once it
	// succeeds.
	Listener net.Listener
	// API serves /v1/ (an httpapi.Handler, which authenticates itself).
	API http.Handler
	// Admin, when set, is mounted at AdminPrefix (the fleet manager's
	// routes, /v1/fleet/). It authenticates itself: the cloud wraps it in
	// Gate.Admin (roles, audit log).
	Admin       http.Handler
	AdminPrefix string
	// UI, when set, is the dashboard, mounted at /ui/; it checks API keys
	// itself (a browser signs in once and carries a cookie).
	UI http.Handler
	// Public are handlers by mux pattern served without authentication
	// (the signed artifacts devices download).
	Public  map[string]http.Handler
	Metrics *metrics.Registry
	// MetricsGuard wraps /metrics (Gate.Metrics: a viewer or operator
	// key); nil serves it to anyone, as --dev without keys does.
	MetricsGuard func(http.Handler) http.Handler
	// Ready backs /readyz.
	Ready  func() error
	Logger *slog.Logger
	// Limits bounds each connection's time and the listener's connection
	// count (zero fields: httplimit's defaults).
	Limits httplimit.Config
}

// HTTPServer is the coordinator's HTTP listener.
type HTTPServer struct {
	srv  *http.Server
	ln   net.Listener
	log  *slog.Logger
	once sync.Once
}

// NewHTTP listens on cfg.Addr; Serve starts answering.
func NewHTTP(cfg HTTPConfig) (*HTTPServer, error) {
	if cfg.API == nil {
		return nil, errors.New("ingress: HTTPConfig.API is required")
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.NewRegistry()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", cfg.API)
	if cfg.Admin != nil {
		if cfg.AdminPrefix == "" || !strings.HasSuffix(cfg.AdminPrefix, "/") {
			return nil, fmt.Errorf("ingress: HTTPConfig.AdminPrefix %q must end with /", cfg.AdminPrefix)
		}
		mux.Handle(cfg.AdminPrefix, cfg.Admin)
	}
	if cfg.UI != nil {
		mux.Handle("/ui/", cfg.UI)
	}
	for pattern, h := range cfg.Public {
		mux.Handle(pattern, h)
	}
	metrics.Probes(mux, cfg.Ready)
	var scrape http.Handler = cfg.Metrics.Handler()
	if cfg.MetricsGuard != nil {
		scrape = cfg.MetricsGuard(scrape)
	}
	mux.Handle("GET /metrics", scrape)
	if err := cfg.Limits.Validate(); err != nil {
		return nil, err
	}
	ln := cfg.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.Addr); err != nil {
			return nil, fmt.Errorf("listen %s: %w", cfg.Addr, err)
		}
	}
	srv := cfg.Limits.Server(mux)
	srv.MaxHeaderBytes = httpapi.ServerMaxHeaderBytes
	return &HTTPServer{srv: srv, ln: cfg.Limits.Listener(ln), log: cfg.Logger}, nil
}

// Addr is the bound address.
func (s *HTTPServer) Addr() string { return s.ln.Addr().String() }

// Serve answers until ctx ends, then shuts down gracefully (streams in
// flight get 10 s to finish).
func (s *HTTPServer) Serve(ctx context.Context) error {
	s.log.Info("HTTP API listening", "addr", s.Addr())
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.srv.Shutdown(shutdown)
	<-errc
	return err
}

// Close stops the listener at once. Idempotent.
func (s *HTTPServer) Close() error {
	var err error
	s.once.Do(func() { err = s.srv.Close() })
	return err
}
