// Package cloud wires the coordinator: QUIC and HTTP ingress, admission, the
// phase-less scheduler, batching, worker pools and the fleet manager. Each of
// those lives in its own sub-package; this package builds them from a Config
// and runs them together.
package cloud

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/phaseless/phaseless/transport/cli"
	"github.com/phaseless/phaseless/transport/metrics"
)

// Config is everything the coordinator is configured with. Flag names are the
// contract in DESIGN.md §4.
type Config struct {
	HTTP    string
	QUIC    string
	MQTT    string // embedded broker address; empty = none
	DataDir string
	PKIDir  string
	Dev     bool
	Model   string
	Workers cli.StringList
	Redis   string
	APIKeys string
}

// RegisterFlags binds c's fields to fs with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.HTTP, "http", ":8080", "HTTP API address (OpenAI/Anthropic compatible, admin, metrics)")
	fs.StringVar(&c.QUIC, "quic", ":4433", "QUIC listener for agents (UDP)")
	fs.StringVar(&c.MQTT, "mqtt", ":1883", "embedded MQTT broker address; empty disables it")
	fs.StringVar(&c.DataDir, "data-dir", "phaseless-cloud-data", "directory for state (bbolt), and the dev PKI")
	fs.StringVar(&c.PKIDir, "pki-dir", "", "directory with the CA and server certificate (phaselessctl pki init)")
	fs.BoolVar(&c.Dev, "dev", false, "development mode: no API keys required; creates a PKI in the data dir when none is given")
	fs.StringVar(&c.Model, "model", "", "GGUF model for the built-in engine (default: the shipped cloud model)")
	fs.Var(&c.Workers, "worker", "OpenAI-compatible engine URL (repeatable)")
	fs.StringVar(&c.Redis, "redis", "", "Redis URL for shared admission state, e.g. redis://127.0.0.1:6379/0")
	fs.StringVar(&c.APIKeys, "api-keys", "", "file of API keys, one per line (key [tenant] [budget])")
}

// Validate reports the first bad field.
func (c *Config) Validate() error {
	for _, f := range []struct{ name, addr string }{{"http", c.HTTP}, {"quic", c.QUIC}, {"mqtt", c.MQTT}} {
		if f.addr == "" && f.name == "mqtt" {
			continue
		}
		if _, _, err := net.SplitHostPort(f.addr); err != nil {
			return &cli.FieldError{Field: f.name, Err: err}
		}
	}
	for _, w := range c.Workers {
		if u, err := url.Parse(w); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return &cli.FieldError{Field: "worker", Err: fmt.Errorf("%q is not an http(s) URL", w)}
		}
	}
	if c.Redis != "" {
		if u, err := url.Parse(c.Redis); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
			return &cli.FieldError{Field: "redis", Err: fmt.Errorf("%q is not a redis:// URL", c.Redis)}
		}
	}
	if !c.Dev && c.APIKeys == "" {
		return &cli.FieldError{Field: "api-keys", Err: errors.New("required unless --dev")}
	}
	if c.DataDir == "" {
		return &cli.FieldError{Field: "data-dir", Err: errors.New("must not be empty")}
	}
	return nil
}

// Cloud is a running coordinator.
type Cloud struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics.Registry
}

// New builds a coordinator from a validated config.
func New(cfg Config, log *slog.Logger) (*Cloud, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Cloud{cfg: cfg, log: log, metrics: metrics.NewRegistry()}, nil
}

// Run serves until ctx ends, then shuts down gracefully.
func (c *Cloud) Run(ctx context.Context) error {
	mux := http.NewServeMux()
	metrics.Health(mux, c.metrics, nil)
	ln, err := net.Listen("tcp", c.cfg.HTTP)
	if err != nil {
		return fmt.Errorf("listen %s: %w", c.cfg.HTTP, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 8 << 10}
	c.log.Info("HTTP API listening", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(shutdownCtx)
}
