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
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	agentfleet "github.com/phaseless/phaseless/agent/fleet"
	"github.com/phaseless/phaseless/agent/local"
	"github.com/phaseless/phaseless/agent/route"
	"github.com/phaseless/phaseless/agent/telemetry"
	"github.com/phaseless/phaseless/models/predictor"
	"github.com/phaseless/phaseless/transport/cli"
	"github.com/phaseless/phaseless/transport/fleet"
	"github.com/phaseless/phaseless/transport/httpapi"
	"github.com/phaseless/phaseless/transport/metrics"
	"github.com/phaseless/phaseless/transport/pki"
	"github.com/phaseless/phaseless/transport/quic"
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
	Predictor string // ONNX router model; empty = the shipped one; "entropy" = the 4.2-bit rule
	OTAPub    string // trusted ed25519 key for OTA bundles; empty = updates refused

	LocalModel       string        // model name sent to the --local-url server
	LocalConcurrency int           // generations the local engine runs at once
	LocalQueue       int           // requests that may wait for the local engine before 503s
	RouteThreshold   float64       // cloud probability at which the router prefers the cloud; 0 = the model's
	RouteHysteresis  float64       // width of the band around the threshold
	MaxOutputTokens  int           // largest max_tokens accepted
	CloudRetryMax    time.Duration // longest wait between reconnect attempts to the cloud
	AdminListen      string        // pprof and /metrics on their own listener; empty = off
	CloudFirstToken  time.Duration // cloud requests without a token by then run locally
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
	fs.StringVar(&c.OTAPub, "ota-pub", "", "the fleet's OTA public key (phaselessctl ota keygen); without it update commands are refused")
	fs.StringVar(&c.Predictor, "predictor", "", `ONNX router model (default: the shipped predictor; "entropy": the 4.2 bits/byte rule)`)
	fs.StringVar(&c.LocalModel, "local-model", "", "model name to request from the --local-url server (default: the request's)")
	fs.IntVar(&c.LocalConcurrency, "local-concurrency", 4, "generations the local engine runs at once")
	fs.IntVar(&c.LocalQueue, "local-queue", 64, "requests that may wait for the local engine; more get 503 overloaded")
	fs.Float64Var(&c.RouteThreshold, "route-threshold", 0, "cloud probability at or above which requests go to the cloud; 0 = the predictor model's own threshold (0.5 without one)")
	fs.Float64Var(&c.RouteHysteresis, "route-hysteresis", 0.1, "band around --route-threshold in which the previous path is kept")
	fs.IntVar(&c.MaxOutputTokens, "max-output-tokens", httpapi.DefaultMaxOutputTokens, "largest max_tokens a request may ask for")
	fs.DurationVar(&c.CloudFirstToken, "cloud-first-token-timeout", 15*time.Second, "cloud requests that have produced no token by then are cancelled and run locally")
	fs.DurationVar(&c.CloudRetryMax, "cloud-retry-max", 30*time.Second, "longest wait between reconnect attempts while the cloud is unreachable")
	fs.StringVar(&c.AdminListen, "admin-listen", "", "diagnostics listener: Go pprof at /debug/pprof/ and /metrics, unauthenticated (keep it on loopback); empty disables it")
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
		if c.PKIDir == "" {
			return &cli.FieldError{Field: "pki-dir", Err: errors.New("required when --cloud is set (phaselessctl pki device)")}
		}
	}
	if c.AdminListen != "" {
		if _, _, err := net.SplitHostPort(c.AdminListen); err != nil {
			return &cli.FieldError{Field: "admin-listen", Err: err}
		}
	}
	if c.MQTT != "" && c.DeviceID == "" {
		return &cli.FieldError{Field: "device-id", Err: errors.New("required when --mqtt is set")}
	}
	if c.Model != "" && c.LocalURL != "" {
		return &cli.FieldError{Field: "local-url", Err: errors.New("give either --model or --local-url, not both")}
	}
	if c.DataDir == "" {
		return &cli.FieldError{Field: "data-dir", Err: errors.New("must not be empty")}
	}
	if c.LocalConcurrency < 1 {
		return &cli.FieldError{Field: "local-concurrency", Err: fmt.Errorf("%d must be at least 1", c.LocalConcurrency)}
	}
	if c.LocalQueue < 0 {
		return &cli.FieldError{Field: "local-queue", Err: fmt.Errorf("%d must not be negative", c.LocalQueue)}
	}
	if err := (route.Config{Threshold: c.RouteThreshold, Hysteresis: c.RouteHysteresis}).Validate(); err != nil {
		field := "route-threshold"
		if c.RouteThreshold > 0 && c.RouteThreshold < 1 {
			field = "route-hysteresis"
		}
		return &cli.FieldError{Field: field, Err: err}
	}
	if c.CloudRetryMax < 250*time.Millisecond {
		return &cli.FieldError{Field: "cloud-retry-max", Err: fmt.Errorf("%v must be at least 250ms", c.CloudRetryMax)}
	}
	if c.CloudFirstToken < 100*time.Millisecond {
		return &cli.FieldError{Field: "cloud-first-token-timeout", Err: fmt.Errorf("%v must be at least 100ms", c.CloudFirstToken)}
	}
	if c.MaxOutputTokens < 1 {
		return &cli.FieldError{Field: "max-output-tokens", Err: fmt.Errorf("%d must be at least 1", c.MaxOutputTokens)}
	}
	return nil
}

// Agent is a running device agent.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics.Registry

	engine  *localEngine
	runner  *local.Runner
	cloud   *quic.Client // nil when offline-only
	store   *telemetry.Store
	sink    *telemetrySink
	fleet   *agentfleet.Client // nil without --mqtt
	ota     *ota
	pred    *predictor.Swappable // nil with the entropy rule
	handler http.Handler
	srv     *http.Server
	lns     []net.Listener
	admin   *metrics.Admin // nil without --admin-listen

	closeOnce sync.Once
	closeErr  error
}

// New builds an agent from a validated config: it opens the telemetry
// store, loads the local engine and the predictor, starts connecting to the
// cloud in the background, and binds the listeners (so Addr is known before
// Run). Close releases everything if Run is never called.
func New(cfg Config, log *slog.Logger) (a *Agent, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a = &Agent{cfg: cfg, log: log, metrics: metrics.NewRegistry()}
	built := a // a "return nil, err" below sets a to nil before this defer runs
	defer func() {
		if err != nil {
			built.Close()
			a = nil
		}
	}()
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, &cli.FieldError{Field: "data-dir", Err: err}
	}
	if a.store, err = telemetry.Open(filepath.Join(cfg.DataDir, "telemetry.db"), telemetry.Config{}); err != nil {
		return nil, fmt.Errorf("telemetry store: %w", err)
	}
	a.sink = newTelemetrySink(a.store, a.metrics, log, sinkWriters)
	if a.ota, err = openOTA(cfg, log); err != nil {
		return nil, err
	}

	if a.engine, err = openEngine(cfg); err != nil {
		return nil, err
	}
	kv := a.engine.kvFaults
	if a.runner, err = local.NewRunner(a.engine.gen, local.Config{Concurrency: cfg.LocalConcurrency, QueueDepth: cfg.LocalQueue, KVFaultsPerMs: kv}); err != nil {
		return nil, err
	}
	pred, predName, err := loadPredictor(cfg.Predictor)
	if err != nil {
		return nil, &cli.FieldError{Field: "predictor", Err: err}
	}
	var rp route.Predictor // a nil *Swappable must stay a nil interface
	if pred != nil {
		a.pred, rp = pred, pred
	}
	router, err := route.NewRouter(route.Config{Threshold: cfg.RouteThreshold, Hysteresis: cfg.RouteHysteresis}, rp)
	if err != nil {
		return nil, err
	}
	dcfg := route.DispatcherConfig{
		Router: router, Local: a.runner, Record: a.sink.record, Metrics: a.metrics, Logger: log,
		CloudFirstToken: cfg.CloudFirstToken,
		Load: func() route.Load {
			l := a.runner.Load()
			return route.Load{Waiting: l.Waiting, Running: l.Running, Capacity: l.QueueDepth, KVFaultsPerMs: l.KVFaultsPerMs}
		},
	}
	if cfg.Cloud != "" {
		tc, err := pki.DeviceTLS(cfg.PKIDir, cfg.DeviceID)
		if err != nil {
			return nil, &cli.FieldError{Field: "pki-dir", Err: err}
		}
		// Background: an agent must start, and serve locally, while the
		// cloud is unreachable; the client keeps redialling.
		if a.cloud, err = quic.Dial(context.Background(), cfg.Cloud, quic.ClientConfig{
			TLS: tc, Background: true, Logger: log.With("component", "uplink"),
			Backoff: quic.Backoff{Initial: min(250*time.Millisecond, cfg.CloudRetryMax), Max: cfg.CloudRetryMax},
		}); err != nil {
			return nil, &cli.FieldError{Field: "cloud", Err: err}
		}
		dcfg.Cloud = a.cloud
		dcfg.Link = func() route.Link {
			ls := a.cloud.Link()
			return route.Link{Configured: true, Connected: ls.Connected, RTT: ls.SmoothedRTT, Loss: ls.LossRate}
		}
	}
	disp, err := route.NewDispatcher(dcfg)
	if err != nil {
		return nil, err
	}
	api, err := httpapi.NewHandler(disp, httpapi.Options{
		MaxOutputTokens: cfg.MaxOutputTokens,
		Models:          func() []httpapi.Model { return []httpapi.Model{{ID: a.engine.name, OwnedBy: "device"}} },
		Logger:          log, Metrics: a.metrics,
	})
	if err != nil {
		return nil, err
	}
	if cfg.MQTT != "" {
		if a.fleet, err = a.newFleetClient(); err != nil {
			return nil, &cli.FieldError{Field: "mqtt", Err: err}
		}
	}
	a.registerGauges()
	mux := http.NewServeMux()
	metrics.Health(mux, a.metrics, a.ready)
	mux.Handle("/v1/", api)
	a.handler = mux
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: httpapi.ServerMaxHeaderBytes}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, &cli.FieldError{Field: "listen", Err: err}
	}
	a.lns = append(a.lns, ln)
	if cfg.Socket != "" {
		uln, err := listenUnix(cfg.Socket)
		if err != nil {
			return nil, &cli.FieldError{Field: "socket", Err: err}
		}
		a.lns = append(a.lns, uln)
	}
	if cfg.AdminListen != "" {
		if a.admin, err = metrics.ListenAdmin(cfg.AdminListen, a.metrics); err != nil {
			return nil, &cli.FieldError{Field: "admin-listen", Err: err}
		}
	}
	log.Info("agent ready", "listen", ln.Addr().String(), "socket", cfg.Socket, "engine", a.engine.name, "predictor", predName, "cloud", cfg.Cloud)
	return a, nil
}

// loadPredictor returns the router model named by --predictor: the shipped
// one by default, a file, or nil for the entropy rule.
func loadPredictor(spec string) (*predictor.Swappable, string, error) {
	switch spec {
	case "entropy":
		return nil, "entropy rule (4.2 bits/byte)", nil
	case "":
		m, err := predictor.Default()
		if err != nil {
			return nil, "", fmt.Errorf("shipped predictor: %w", err)
		}
		return predictor.NewSwappable(m), "shipped", nil
	}
	m, err := predictor.Load(spec)
	if err != nil {
		return nil, "", err
	}
	s := predictor.NewSwappable(predictor.EntropyRule{})
	if err := s.SwapTo(m); err != nil {
		return nil, "", err
	}
	return s, spec, nil
}

// newFleetClient builds the MQTT fleet client that drains the telemetry
// store to the cloud and takes commands; it starts in Run.
func (a *Agent) newFleetClient() (*agentfleet.Client, error) {
	fc := agentfleet.Config{
		BrokerURL: a.cfg.MQTT, DeviceID: a.cfg.DeviceID, Version: cli.Version, Board: a.cfg.Board,
		Store: a.store, StatePath: filepath.Join(a.cfg.DataDir, "fleet.db"), Logger: a.log.With("component", "fleet"),
		Slot: a.ota.slot,
	}
	if a.cfg.PKIDir != "" {
		tc, err := pki.DeviceTLS(a.cfg.PKIDir, a.cfg.DeviceID)
		if err != nil {
			return nil, err
		}
		fc.TLS = tc
	}
	c, err := agentfleet.New(fc)
	if err != nil {
		return nil, err
	}
	c.Handle("update", a.ota.update)
	c.Handle("ota-commit", a.ota.commit)
	c.Handle("ota-rollback", a.ota.rollback)
	// The router's model is swapped in place: requests in flight finish on
	// the old one, a file that fails validation leaves the old one serving.
	c.Handle("reload-predictor", func(_ context.Context, cmd fleet.Command) (string, error) {
		if a.pred == nil {
			return "", errors.New("the agent runs the entropy rule (--predictor entropy); restart it with a model to swap")
		}
		path := cmd.Args["path"]
		if path == "" {
			return "", errors.New(`argument "path" (an ONNX file on the device) is required`)
		}
		if err := a.pred.Swap(path); err != nil {
			return "", err
		}
		return "predictor now " + path, nil
	})
	return c, nil
}

// listenUnix binds a Unix socket, replacing a stale one left by a crash but
// never a file that is not a socket.
func listenUnix(path string) (net.Listener, error) {
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s is in use by another process", path)
		}
		os.Remove(path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	// Apps of the device's service group may use the API; others may not.
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

func (a *Agent) registerGauges() {
	a.metrics.GaugeFunc("phaseless_agent_local_waiting", "requests waiting for the local engine", func() float64 { return float64(a.runner.Load().Waiting) })
	a.metrics.GaugeFunc("phaseless_agent_local_running", "requests running on the local engine", func() float64 { return float64(a.runner.Load().Running) })
	a.metrics.CounterFunc("phaseless_agent_local_refused_total", "requests refused because the local queue was full", func() float64 { return float64(a.runner.Load().Refused) })
	if f := a.engine.kvFaultsTotal; f != nil {
		a.metrics.CounterFunc("phaseless_agent_local_kv_faults_total", "KV block allocations of the local engine that evicted a cached prefix or preempted a sequence", func() float64 { return float64(f()) })
	}
	if a.cloud != nil {
		a.metrics.GaugeFunc("phaseless_agent_cloud_connected", "1 while the QUIC uplink is connected", func() float64 {
			if a.cloud.Link().Connected {
				return 1
			}
			return 0
		})
		a.metrics.GaugeFunc("phaseless_agent_cloud_rtt_seconds", "smoothed RTT of the QUIC uplink", func() float64 { return a.cloud.Link().SmoothedRTT.Seconds() })
	}
}

// ready is /readyz: the local engine answers and the telemetry store is open.
// A missing cloud does not make the agent unready: it serves locally.
func (a *Agent) ready() error {
	if a.engine.ready != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := a.engine.ready(ctx); err != nil {
			return err
		}
	}
	return a.sink.err()
}

// AdminAddr is the diagnostics listener's address, empty without
// --admin-listen.
func (a *Agent) AdminAddr() string {
	if a.admin == nil {
		return ""
	}
	return a.admin.Addr()
}

// Addr is the TCP address of the local API.
func (a *Agent) Addr() net.Addr { return a.lns[0].Addr() }

// Handler is the agent's whole HTTP surface (API, health, metrics), for
// tests and benchmarks that drive it without a socket.
func (a *Agent) Handler() http.Handler { return a.handler }

// Telemetry is the agent's telemetry store (the fleet uplink reads it).
func (a *Agent) Telemetry() *telemetry.Store { return a.store }

// Run serves until ctx ends, then shuts down gracefully and closes the agent.
func (a *Agent) Run(ctx context.Context) error {
	errc := make(chan error, len(a.lns))
	for _, ln := range a.lns {
		go func() { errc <- a.srv.Serve(ln) }()
	}
	fleetCtx, stopFleet := context.WithCancel(context.WithoutCancel(ctx))
	fleetDone := make(chan error, 1)
	if a.fleet != nil {
		go func() { fleetDone <- a.fleet.Run(fleetCtx) }()
	} else {
		fleetDone <- nil
	}
	adminDone := make(chan error, 1)
	if a.admin != nil {
		go func() { adminDone <- a.admin.Serve() }()
	} else {
		adminDone <- nil
	}
	var err error
	pending := len(a.lns)
	select {
	case err = <-errc:
		pending--
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if serr := a.srv.Shutdown(shutdownCtx); serr != nil && err == nil {
		err = serr
	}
	for ; pending > 0; pending-- { // each Serve returns ErrServerClosed after Shutdown
		if e := <-errc; err == nil && !errors.Is(e, http.ErrServerClosed) {
			err = e
		}
	}
	// The fleet client stops after the API so the last requests' records
	// are in the store; it publishes "offline" on its way out.
	stopFleet()
	if ferr := <-fleetDone; ferr != nil && err == nil {
		err = fmt.Errorf("fleet client: %w", ferr)
	}
	if cerr := a.Close(); err == nil {
		err = cerr
	}
	if aerr := <-adminDone; aerr != nil && err == nil { // Close ended it
		err = fmt.Errorf("admin listener: %w", aerr)
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// Close stops everything New started; it is safe to call twice and after Run.
func (a *Agent) Close() error {
	a.closeOnce.Do(func() {
		var errs []error
		if a.srv != nil {
			errs = append(errs, a.srv.Close())
		}
		for _, ln := range a.lns {
			ln.Close()
		}
		if a.admin != nil {
			errs = append(errs, a.admin.Close())
		}
		if a.cloud != nil {
			errs = append(errs, a.cloud.Close())
		}
		if a.engine != nil {
			errs = append(errs, a.engine.close())
		}
		if a.sink != nil {
			a.sink.close()
		}
		if a.store != nil {
			errs = append(errs, a.store.Close())
		}
		if a.cfg.Socket != "" && len(a.lns) > 1 {
			os.Remove(a.cfg.Socket)
		}
		a.closeErr = errors.Join(errs...)
	})
	return a.closeErr
}
