// Package agent wires the device side of Phaseless: the local HTTP API, the
// router, the local engine, the QUIC uplink to the cloud, the telemetry
// buffer and the fleet client. Each of those lives in its own sub-package;
// this package only builds them from a Config and runs them together.
package agent

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/phaseless/phaseless/transport/cli"
	"github.com/phaseless/phaseless/transport/metrics"
)

// Config is everything the agent is configured with. Flag names are the
// contract in DESIGN.md §4.
type Config struct {
	Listen    string // local API address
	Socket    string // optional Unix socket for the local API
	DeviceID  string
	Board     string // board profile, checked against OTA bundles
	Cloud     string // host:port of the cloud's QUIC listener; empty = offline-only
	PKIDir    string
	MQTT      string // broker URL; empty = no fleet management
	DataDir   string
	Model     string // GGUF file for the built-in engine
	LocalURL  string // OpenAI-compatible local server instead of the built-in engine
	Predictor string // ONNX router model; empty = entropy rule
}

// RegisterFlags binds c's fields to fs with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", "127.0.0.1:7070", "local API address (HTTP)")
	fs.StringVar(&c.Socket, "socket", "", "also serve the local API on this Unix socket")
	fs.StringVar(&c.DeviceID, "device-id", "", "this device's id (the CN of its certificate)")
	fs.StringVar(&c.Board, "board", "generic", "board profile name, checked against OTA bundles")
	fs.StringVar(&c.Cloud, "cloud", "", "cloud QUIC address host:port; empty runs offline-only")
	fs.StringVar(&c.PKIDir, "pki-dir", "", "directory with ca.pem and this device's certificate (phaselessctl pki device)")
	fs.StringVar(&c.MQTT, "mqtt", "", "fleet MQTT broker URL, e.g. mqtt://127.0.0.1:1883")
	fs.StringVar(&c.DataDir, "data-dir", "phaseless-agent-data", "directory for the telemetry buffer, OTA slots and state")
	fs.StringVar(&c.Model, "model", "", "GGUF model for the built-in engine (default: the shipped edge model)")
	fs.StringVar(&c.LocalURL, "local-url", "", "OpenAI-compatible local server URL instead of the built-in engine")
	fs.StringVar(&c.Predictor, "predictor", "", "ONNX router model (default: the shipped predictor)")
}

// Validate reports the first bad field.
func (c *Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return &cli.FieldError{Field: "listen", Err: err}
	}
	if c.Cloud != "" {
		if _, _, err := net.SplitHostPort(c.Cloud); err != nil {
			return &cli.FieldError{Field: "cloud", Err: err}
		}
		if c.DeviceID == "" {
			return &cli.FieldError{Field: "device-id", Err: errors.New("required when --cloud is set")}
		}
	}
	if c.Model != "" && c.LocalURL != "" {
		return &cli.FieldError{Field: "local-url", Err: errors.New("give either --model or --local-url, not both")}
	}
	if c.DataDir == "" {
		return &cli.FieldError{Field: "data-dir", Err: errors.New("must not be empty")}
	}
	return nil
}

// Agent is a running device agent.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics.Registry
}

// New builds an agent from a validated config.
func New(cfg Config, log *slog.Logger) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Agent{cfg: cfg, log: log, metrics: metrics.NewRegistry()}, nil
}

// Run serves until ctx ends, then shuts down gracefully.
func (a *Agent) Run(ctx context.Context) error {
	mux := http.NewServeMux()
	metrics.Health(mux, a.metrics, nil)
	ln, err := net.Listen("tcp", a.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", a.cfg.Listen, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 8 << 10}
	a.log.Info("local API listening", "addr", ln.Addr().String())
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
