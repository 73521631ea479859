// Package cloud wires the coordinator: QUIC and HTTP ingress, admission, the
// phase-less scheduler, batching, worker pools and the fleet manager. Each of
// those lives in its own sub-package; this package builds them from a Config
// and runs them together. The request path itself (admit → decide → batch →
// stream) is package cloud/coordinator.
package cloud

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/phaseless/phaseless/cloud/admit"
	"github.com/phaseless/phaseless/cloud/coordinator"
	"github.com/phaseless/phaseless/cloud/fleet"
	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/cloud/ingress"
	"github.com/phaseless/phaseless/cloud/sim"
	"github.com/phaseless/phaseless/cloud/ui"
	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/internal/tracing/otlp"
	"github.com/phaseless/phaseless/transport/httpapi"
	"github.com/phaseless/phaseless/transport/pki"
	"github.com/phaseless/phaseless/transport/quic"
)

// Cloud is a running coordinator.
type Cloud struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics.Registry

	mu      sync.Mutex // guards the fields below, set by Start
	started bool
	coord   *coordinator.Coordinator
	workers *worker.Set
	admit   *admit.Admitter
	http    *ingress.HTTPServer
	// httpLn is the HTTP listener, bound ahead of the fleet manager so the
	// default public URL (rollout downloads) names its port even for
	// --http :0; c.http serves it.
	httpLn  net.Listener
	quic    *quic.Server
	broker  *broker.Broker
	fleet   *fleet.Manager
	standby *fleet.Standby // instead of fleet with --fleet-standby
	admin   *metrics.Admin // nil without --admin-listen
	audit   *ingress.AuditLog
	deny    *pki.DenyList // revoked devices in the PKI dir; nil without one
	sims    []*sim.Fleet  // simulated workers (--worker sim://...)
	pkiDir  string
	// handoffs holds KV handoffs other coordinators' prefill workers pushed
	// here, until their decode requests take them (worker.KVServer).
	handoffs *worker.HandoffStore
	tracer   *otlp.Provider // spans (--otlp); a no-op provider without it
}

// New builds a coordinator from a validated config.
func New(cfg Config, log *slog.Logger) (*Cloud, error) {
	cfg.FillDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Cloud{cfg: cfg, log: log, metrics: metrics.NewRegistry(), handoffs: worker.NewHandoffStore(worker.HandoffStoreConfig{})}, nil
}

// Metrics is the coordinator's registry (served at /metrics).
func (c *Cloud) Metrics() *metrics.Registry { return c.metrics }

// Run starts the coordinator and serves until ctx ends, then shuts down.
func (c *Cloud) Run(ctx context.Context) error {
	if err := c.Start(ctx); err != nil {
		return err
	}
	return c.Serve(ctx)
}

// Serving starts c and serves on a goroutine of its own until ctx ends,
// for callers that go on working meanwhile (tests, embedders); wait
// blocks until Serve has returned and gives its error.
func (c *Cloud) Serving(ctx context.Context) (wait func() error, err error) {
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- c.Serve(ctx) }()
	return func() error { return <-done }, nil
}

// Start builds every component and binds the listeners, so HTTPAddr and
// QUICAddr are known before Serve.
func (c *Cloud) Start(ctx context.Context) (err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return errors.New("cloud: already started")
	}
	c.started = true
	defer func() {
		if err != nil {
			c.closeLocked()
		}
	}()
	workers, builtins, tok, err := c.buildWorkers()
	if err != nil {
		return err
	}
	if c.workers, err = worker.NewSet(ctx, 500*time.Millisecond, workers...); err != nil {
		for _, w := range workers {
			w.Close()
		}
		return err
	}
	worker.RegisterEngineMetrics(c.metrics, builtins)
	worker.RegisterCacheMetrics(c.metrics, builtins)

	var store admit.Store = admit.NewMemoryStore()
	storeReady := func() error { return nil }
	if c.cfg.Redis.IsSet() {
		circuitOpen := c.metrics.Gauge("phaseless_admit_store_circuit_open", "1 while Redis failed repeatedly and is left alone for a cool-down (budgets fail open)")
		rs, err := admit.NewRedisStore(ctx, c.cfg.Redis.String(), "", admit.RedisOptions{
			OpTimeout: c.cfg.RedisTimeout,
			OnStateChange: func(open bool, err error) {
				if open {
					circuitOpen.Set(1)
					c.log.Error("Redis unreachable: budgets and fallback limits fail open until it answers again", "err", err)
				} else {
					circuitOpen.Set(0)
					c.log.Info("Redis answers again")
				}
			},
		})
		if err != nil {
			return &cli.FieldError{Field: "Redis", Err: err}
		}
		store = rs
		// Degraded, not unready: the replica still serves (budgets fail
		// open), and every replica shares this Redis, so a 503 would
		// take them all out of the load balancer at once.
		storeReady = func() error {
			if rs.Ready(context.Background()) != nil { // the cause is logged when the circuit opens
				return &metrics.Degraded{Err: errors.New("shared state (Redis) unreachable: budgets and fallback limits fail open")}
			}
			return nil
		}
	}
	storeErrors := c.metrics.Counter("phaseless_admit_store_errors_total", "admission store failures (requests were let through)")
	c.admit, err = admit.New(admit.Config{
		Store:  store,
		Budget: bucket(c.cfg.Budget, c.cfg.BudgetPeriod),
		OnStoreError: func(err error) {
			storeErrors.Inc()
			if !errors.Is(err, admit.ErrStoreUnavailable) { // logged once, when the circuit opened
				c.log.Warn("admission store", "err", err)
			}
		},
	})
	if err != nil {
		store.Close()
		return err
	}
	var keys *ingress.Keys
	if c.cfg.APIKeys != "" {
		if keys, err = ingress.LoadKeys(c.cfg.APIKeys); err != nil {
			return &cli.FieldError{Field: "APIKeys", Err: err}
		}
	}
	cacheConfig, err := c.cacheConfig(store)
	if err != nil {
		return err
	}
	slots := c.cfg.MaxRunning
	if slots == 0 {
		for _, w := range workers {
			slots += 2 * max(w.LastLoad().Capacity, 16)
		}
	}
	if c.tracer, err = otlp.New(ctx, otlp.Config{URL: c.cfg.OTLP.String(), Service: "phaseless-cloud"}); err != nil {
		return &cli.FieldError{Field: "OTLP", Err: err}
	}
	c.coord, err = coordinator.New(coordinator.Config{
		Workers: c.workers, Admitter: c.admit, Tokenizer: tok, BlockSize: kvBlockSize, CharsPerToken: remoteCharsPerToken(builtins),
		Fair:                admit.FairConfig{Slots: slots, MaxQueue: c.cfg.MaxQueued},
		Budget:              budgetOf(keys, c.cfg.BudgetPeriod),
		AllowPolicyOverride: c.cfg.Dev, Scheduler: c.cfg.Scheduler,
		SLATTFT: c.cfg.SLATTFT, SLAITL: c.cfg.SLAITL,
		Metrics: c.metrics, Logger: c.log, Tracer: c.tracer.TracerProvider(),
		Cache: cacheConfig,
	})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.cfg.DataDir, 0o700); err != nil {
		return &cli.FieldError{Field: "data-dir", Err: err}
	}
	if c.audit, err = ingress.OpenAudit(filepath.Join(c.cfg.DataDir, AuditLogFile), nil); err != nil {
		return &cli.FieldError{Field: "data-dir", Err: err}
	}
	gate := ingress.NewGate(keys, nil, c.audit, c.log)
	var auth func(*http.Request) (string, error)
	if keys != nil {
		auth = gate.Inference
	}
	if c.cfg.QUIC != "" || (c.cfg.MQTT != "" && c.cfg.MQTTTLS != "") || c.cfg.PKIDir != "" {
		if c.pkiDir, err = ingress.ResolvePKI(c.cfg.PKIDir, c.cfg.Dev, c.cfg.DataDir); err != nil {
			return &cli.FieldError{Field: "PKIDir", Err: err}
		}
		if c.deny, err = pki.LoadDenyList(c.pkiDir); err != nil {
			return &cli.FieldError{Field: "pki-dir", Err: err}
		}
	}
	if c.httpLn, err = net.Listen("tcp", c.cfg.ListenAddr(c.cfg.HTTP)); err != nil {
		return &cli.FieldError{Field: "HTTP", Err: err}
	}
	if err := c.startFleet(); err != nil {
		return err
	}
	ready := func() error { return errors.Join(c.coord.Ready(), storeReady()) }
	var admin http.Handler
	if fa, fr := c.fleetAPI(); fa != nil {
		admin = gate.Admin(fa.Handler())
		ready = func() error { return errors.Join(c.coord.Ready(), fr(), storeReady()) }
	}
	api, err := httpapi.NewHandler(c.coord, httpapi.Options{
		Authenticate: auth, AllowPolicyHint: c.cfg.Dev, AllowKVHandoff: len(builtins) > 0, Cloud: true, Metrics: c.metrics, Logger: c.log,
		Models: c.listModels,
	})
	if err != nil {
		return err
	}
	public := map[string]http.Handler{}
	if fa, _ := c.fleetAPI(); fa != nil {
		public["GET "+fleet.ArtifactPrefix] = fa.ArtifactHandler()
	}
	var kvAuth func(*http.Request) (string, error)
	if keys != nil {
		kvAuth = gate.Worker
	}
	if kv, err := c.kvServer(workers, kvAuth); err != nil {
		return err
	} else if kv != nil {
		// Authenticated by the KV server itself, with worker keys only.
		public["/v1/kv/"] = kv
	}
	uiCfg := ui.Config{Cloud: dashboardView{c.coord, c.workers}, Gate: gate}
	if c.fleet != nil {
		uiCfg.Fleet = c.fleet
	} else if c.standby != nil {
		uiCfg.Fleet = standbyFleet{c.standby}
	}
	dash, err := ui.New(uiCfg)
	if err != nil {
		return err
	}
	if c.http, err = ingress.NewHTTP(ingress.HTTPConfig{
		Listener: c.httpLn, API: api, Admin: admin, AdminPrefix: "/v1/fleet/", Public: public, UI: dash,
		Metrics: c.metrics, MetricsGuard: gate.Metrics, Ready: ready, Logger: c.log, Limits: c.cfg.HTTPLimits,
	}); err != nil {
		return err
	}
	if c.cfg.AdminListen != "" {
		if c.admin, err = metrics.ListenAdmin(c.cfg.AdminListen, c.metrics, nil); err != nil {
			return &cli.FieldError{Field: "AdminListen", Err: err}
		}
	}
	if c.cfg.QUIC != "" {
		if c.quic, err = ingress.NewQUIC(ingress.QUICConfig{
			Addr: c.cfg.ListenAddr(c.cfg.QUIC), PKIDir: c.pkiDir, Handler: c.coord, Deny: c.deny, Logger: c.log,
			ResumeWindow: c.cfg.ResumeWindow, ResumeBufferBytes: c.cfg.ResumeBufferBytes,
		}); err != nil {
			return &cli.FieldError{Field: "QUIC", Err: err}
		}
	}
	return nil
}

// AuditLogFile, in the data directory, is the fleet admin audit log
// (ingress.AuditLog): JSON lines of every change and every refusal.
const AuditLogFile = "audit.jsonl"

// MQTTAddr is the embedded broker's TCP address, empty when none runs.
func (c *Cloud) MQTTAddr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broker == nil {
		return ""
	}
	return c.broker.TCPAddr()
}

// MQTTTLSAddr is the embedded broker's MQTT-over-TLS address, empty when
// none runs.
func (c *Cloud) MQTTTLSAddr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broker == nil {
		return ""
	}
	return c.broker.TLSAddr()
}

// bucket is a budget of burst tokens that an empty bucket regains over period.
func bucket(burst int64, period time.Duration) admit.Bucket {
	if period == 0 {
		period = time.Minute
	}
	return admit.Bucket{Burst: burst, PerSecond: float64(burst) / period.Seconds()}
}

// budgetOf maps a tenant to its own bucket from the keys file.
func budgetOf(keys *ingress.Keys, period time.Duration) func(string) admit.Bucket {
	return func(tenant string) admit.Bucket {
		if keys == nil {
			return admit.Bucket{}
		}
		if b := keys.Budget(tenant); b > 0 {
			return bucket(b, period)
		}
		return admit.Bucket{}
	}
}

// HTTPAddr is the bound HTTP address (after Start).
func (c *Cloud) HTTPAddr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.http == nil {
		return ""
	}
	return c.http.Addr()
}

// AdminAddr is the bound diagnostics address, empty without --admin-listen.
func (c *Cloud) AdminAddr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.admin == nil {
		return ""
	}
	return c.admin.Addr()
}

// QUICAddr is the bound QUIC address, empty when QUIC is off.
func (c *Cloud) QUICAddr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.quic == nil {
		return ""
	}
	return c.quic.Addr().String()
}

// PKIDir is the directory the QUIC listener's certificates come from.
func (c *Cloud) PKIDir() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pkiDir
}

// Coordinator returns the request path (after Start).
func (c *Cloud) Coordinator() *coordinator.Coordinator {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.coord
}

// Serve runs the listeners until ctx ends or one fails, then closes everything.
func (c *Cloud) Serve(ctx context.Context) error {
	c.mu.Lock()
	h, q, adm := c.http, c.quic, c.admin
	c.mu.Unlock()
	if h == nil {
		return errors.New("cloud: Serve before Start")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var watching sync.WaitGroup
	defer watching.Wait() // before Close: the watcher uses the listeners
	if c.deny != nil {
		watching.Go(func() { c.watchRevocations(ctx) })
	}
	errc := make(chan error, 2)
	n := 1
	go func() { errc <- h.Serve(ctx) }()
	if adm != nil {
		n++
		c.log.Info("admin listener (pprof, metrics)", "addr", adm.Addr())
		stop := context.AfterFunc(ctx, func() { adm.Close() })
		defer stop()
		go func() { errc <- adm.Serve() }()
	}
	if q != nil {
		n++
		c.log.Info("QUIC listening for agents", "addr", q.Addr().String(), "pki", c.PKIDir())
		go func() { errc <- q.Serve(ctx) }()
	}
	var first error
	for i := 0; i < n; i++ {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
		cancel() // one listener failing stops the other
	}
	c.Close()
	return first
}

// Close stops everything Start built. Idempotent.
func (c *Cloud) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closeLocked()
}

func (c *Cloud) closeLocked() error {
	var errs []error
	if c.http != nil {
		errs = append(errs, c.http.Close())
	} else if c.httpLn != nil { // Start failed before the server took it
		errs = append(errs, c.httpLn.Close())
	}
	if c.quic != nil {
		errs = append(errs, c.quic.Close())
	}
	if c.admin != nil {
		errs = append(errs, c.admin.Close())
	}
	if c.fleet != nil {
		errs = append(errs, c.fleet.Close())
		c.fleet = nil
	}
	if c.standby != nil {
		errs = append(errs, c.standby.Close())
		c.standby = nil
	}
	if c.broker != nil {
		errs = append(errs, c.broker.Close())
		c.broker = nil
	}
	if c.coord != nil {
		errs = append(errs, c.coord.Close()) // before the workers its warm-ups run on
	}
	if c.workers != nil {
		errs = append(errs, c.workers.Close())
		c.workers = nil
	}
	for _, f := range c.sims {
		errs = append(errs, f.Close())
	}
	c.sims = nil
	if c.admit != nil {
		errs = append(errs, c.admit.Close())
		c.admit = nil
	}
	if c.audit != nil {
		errs = append(errs, c.audit.Close())
		c.audit = nil
	}
	if c.tracer != nil {
		// Last: the spans of requests that the listeners' closing ended.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		errs = append(errs, c.tracer.Shutdown(ctx))
		cancel()
		c.tracer = nil
	}
	return errors.Join(errs...)
}
