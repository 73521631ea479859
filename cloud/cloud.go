// Package cloud wires the coordinator: QUIC and HTTP ingress, admission, the
// phase-less scheduler, batching, worker pools and the fleet manager. Each of
// those lives in its own sub-package; this package builds them from a Config
// and runs them together. The request path itself (admit → decide → batch →
// stream) is Coordinator, in coordinator.go.
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
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/phaseless/phaseless/cloud/admit"
	"github.com/phaseless/phaseless/cloud/batch"
	"github.com/phaseless/phaseless/cloud/fleet"
	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/cloud/ingress"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/ui"
	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/models/cloudmodel"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/transport/cli"
	"github.com/phaseless/phaseless/transport/httpapi"
	"github.com/phaseless/phaseless/transport/metrics"
	"github.com/phaseless/phaseless/transport/pki"
	"github.com/phaseless/phaseless/transport/quic"
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

	MQTTTLS       string // embedded broker's TLS listener (device certificates)
	MQTTPasswords string // Mosquitto password file for the embedded broker
	MQTTURL       string // external broker instead of the embedded one

	BuiltinWorkers int           // built-in engines, one per pool role in turn
	Budget         int64         // default burst budget in tokens
	BudgetPeriod   time.Duration // how long an empty budget takes to refill (every key's); 0 = a minute
	BatchWindow    time.Duration // longest a request is held for bucketing
	BatchMax       int           // most requests released together
	MaxRunning     int           // requests running at once before the fair queue holds them; 0 = 2× the workers' capacity
	SLATTFT        time.Duration
	SLAITL         time.Duration
	AdminListen    string // pprof and /metrics on their own listener; empty = off
}

// RegisterFlags binds c's fields to fs with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.HTTP, "http", ":8080", "HTTP API address (OpenAI/Anthropic compatible, admin, metrics)")
	fs.StringVar(&c.QUIC, "quic", ":4433", "QUIC listener for agents (UDP); empty disables it")
	fs.StringVar(&c.MQTT, "mqtt", ":1883", "embedded MQTT broker address; empty disables it")
	fs.StringVar(&c.DataDir, "data-dir", "phaseless-cloud-data", "directory for state (bbolt), and the dev PKI")
	fs.StringVar(&c.PKIDir, "pki-dir", "", "directory with the CA and server certificate (phaselessctl pki init)")
	fs.BoolVar(&c.Dev, "dev", false, "development mode: no API keys required; creates a PKI in the data dir when none is given; honours x-phaseless-policy")
	fs.StringVar(&c.Model, "model", "", "GGUF model for the built-in engine (default: the shipped cloud model)")
	fs.Var(&c.Workers, "worker", "OpenAI-compatible engine URL (repeatable); options in the fragment: URL#role=prefill-heavy&model=NAME&capacity=N")
	fs.StringVar(&c.Redis, "redis", "", "Redis URL for shared admission state, e.g. redis://127.0.0.1:6379/0")
	fs.StringVar(&c.APIKeys, "api-keys", "", "file of API keys, one per line (key [tenant] [budget])")
	fs.StringVar(&c.MQTTTLS, "mqtt-tls", ":8883", "embedded broker's MQTT-over-TLS listener, using the PKI's server certificate; empty disables it")
	fs.StringVar(&c.MQTTPasswords, "mqtt-passwords", "", "Mosquitto password file for the embedded broker (username = device id)")
	fs.StringVar(&c.MQTTURL, "mqtt-url", "", "external MQTT v5 broker (mqtt://user:pass@host:1883) instead of the embedded one")
	fs.IntVar(&c.BuiltinWorkers, "builtin-workers", 1, "built-in engine workers (roles assigned in turn: decode-heavy, prefill-heavy, stream); 0 with --worker runs remote engines only")
	fs.Int64Var(&c.Budget, "budget", 200000, "default token budget per API key or device: burst size, refilled over --budget-period")
	fs.DurationVar(&c.BudgetPeriod, "budget-period", time.Minute, "how long an empty budget takes to refill, for the default and every key's budget (1m, 1h, 24h…)")
	fs.DurationVar(&c.BatchWindow, "batch-window", 150*time.Millisecond, "longest a request waits to be batched with similar-length prompts while its engine is full")
	fs.IntVar(&c.BatchMax, "batch-max", 16, "most requests released into an engine together")
	fs.IntVar(&c.MaxRunning, "max-running", 0, "requests running at once before the per-tenant fair queue holds them (0: twice the workers' capacity)")
	fs.DurationVar(&c.SLATTFT, "sla-ttft", 2*time.Second, "SLA: time to first token")
	fs.DurationVar(&c.SLAITL, "sla-itl", 200*time.Millisecond, "SLA: mean time between tokens")
	fs.StringVar(&c.AdminListen, "admin-listen", "", "diagnostics listener: Go pprof at /debug/pprof/ and /metrics, unauthenticated (bind to loopback); empty disables it")
}

// Validate reports the first bad field.
func (c *Config) Validate() error {
	for _, f := range []struct{ name, addr string }{{"http", c.HTTP}, {"quic", c.QUIC}, {"mqtt", c.MQTT}, {"mqtt-tls", c.MQTTTLS}, {"admin-listen", c.AdminListen}} {
		if f.addr == "" && f.name != "http" {
			continue
		}
		if _, _, err := net.SplitHostPort(f.addr); err != nil {
			return &cli.FieldError{Field: f.name, Err: err}
		}
	}
	for _, w := range c.Workers {
		if _, err := parseWorkerURL(w); err != nil {
			return &cli.FieldError{Field: "worker", Err: err}
		}
	}
	if c.MQTTURL != "" {
		if u, err := url.Parse(c.MQTTURL); err != nil || u.Host == "" {
			return &cli.FieldError{Field: "mqtt-url", Err: fmt.Errorf("%q is not a broker URL like mqtt://host:1883", c.MQTTURL)}
		}
		if c.MQTT != "" {
			return &cli.FieldError{Field: "mqtt", Err: errors.New("set --mqtt \"\" when --mqtt-url names an external broker")}
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
	switch {
	case c.BuiltinWorkers < 0 || c.BuiltinWorkers > 64:
		return &cli.FieldError{Field: "builtin-workers", Err: fmt.Errorf("%d is not in 0..64", c.BuiltinWorkers)}
	case c.BuiltinWorkers == 0 && len(c.Workers) == 0:
		return &cli.FieldError{Field: "builtin-workers", Err: errors.New("0 needs at least one --worker")}
	case c.Budget <= 0:
		return &cli.FieldError{Field: "budget", Err: fmt.Errorf("%d must be positive", c.Budget)}
	case c.BudgetPeriod != 0 && c.BudgetPeriod < time.Second:
		return &cli.FieldError{Field: "budget-period", Err: fmt.Errorf("%v must be at least 1s", c.BudgetPeriod)}
	case c.BatchWindow < 0:
		return &cli.FieldError{Field: "batch-window", Err: fmt.Errorf("%v must not be negative", c.BatchWindow)}
	case c.BatchMax < 1:
		return &cli.FieldError{Field: "batch-max", Err: fmt.Errorf("%d must be at least 1", c.BatchMax)}
	case c.MaxRunning < 0:
		return &cli.FieldError{Field: "max-running", Err: fmt.Errorf("%d must not be negative", c.MaxRunning)}
	case c.SLATTFT <= 0:
		return &cli.FieldError{Field: "sla-ttft", Err: errors.New("must be positive")}
	case c.SLAITL <= 0:
		return &cli.FieldError{Field: "sla-itl", Err: errors.New("must be positive")}
	}
	return nil
}

// workerURL is a --worker value: the server's URL and the options in its fragment.
type workerURL struct {
	base     string
	role     sched.Role
	hasRole  bool
	model    string
	capacity int
}

func parseWorkerURL(s string) (workerURL, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return workerURL{}, fmt.Errorf("%q is not an http(s) URL", s)
	}
	w := workerURL{}
	opts, err := url.ParseQuery(u.Fragment)
	if err != nil {
		return workerURL{}, fmt.Errorf("%q: options after # must be key=value&...: %v", s, err)
	}
	for k, v := range opts {
		switch k {
		case "role":
			if w.role, err = sched.ParseRole(v[0]); err != nil {
				return workerURL{}, fmt.Errorf("%q: %v", s, err)
			}
			w.hasRole = true
		case "model":
			w.model = v[0]
		case "capacity":
			if w.capacity, err = strconv.Atoi(v[0]); err != nil || w.capacity < 1 {
				return workerURL{}, fmt.Errorf("%q: capacity %q must be a positive integer", s, v[0])
			}
		default:
			return workerURL{}, fmt.Errorf("%q: unknown option %q (role, model, capacity)", s, k)
		}
	}
	u.Fragment = ""
	w.base = u.String()
	return w, nil
}

// roleCycle assigns roles to workers that name none, so N workers cover the
// pools in turn; a lone worker is decode-heavy, the general-purpose pool. The
// conservative pool is only ever chosen explicitly.
var roleCycle = []sched.Role{sched.RoleDecode, sched.RolePrefill, sched.RoleStream}

// Cloud is a running coordinator.
type Cloud struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics.Registry

	mu      sync.Mutex // guards the fields below, set by Start
	started bool
	coord   *Coordinator
	workers *worker.Set
	admit   *admit.Admitter
	http    *ingress.HTTPServer
	quic    *quic.Server
	broker  *broker.Broker
	fleet   *fleet.Manager
	admin   *metrics.Admin // nil without --admin-listen
	pkiDir  string
}

// New builds a coordinator from a validated config.
func New(cfg Config, log *slog.Logger) (*Cloud, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Cloud{cfg: cfg, log: log, metrics: metrics.NewRegistry()}, nil
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

	var store admit.Store = admit.NewMemoryStore()
	if c.cfg.Redis != "" {
		if store, err = admit.NewRedisStore(ctx, c.cfg.Redis, ""); err != nil {
			return &cli.FieldError{Field: "redis", Err: err}
		}
	}
	storeErrors := c.metrics.Counter("phaseless_admit_store_errors_total", "admission store failures (requests were let through)")
	c.admit, err = admit.New(admit.Config{
		Store:  store,
		Budget: bucket(c.cfg.Budget, c.cfg.BudgetPeriod),
		OnStoreError: func(err error) {
			storeErrors.Inc()
			c.log.Warn("admission store", "err", err)
		},
	})
	if err != nil {
		store.Close()
		return err
	}
	var keys *ingress.Keys
	if c.cfg.APIKeys != "" {
		if keys, err = ingress.LoadKeys(c.cfg.APIKeys); err != nil {
			return &cli.FieldError{Field: "api-keys", Err: err}
		}
	}
	slots := c.cfg.MaxRunning
	if slots == 0 {
		for _, w := range workers {
			slots += 2 * max(w.LastLoad().Capacity, 16)
		}
	}
	c.coord, err = NewCoordinator(CoordinatorConfig{
		Workers: c.workers, Admitter: c.admit, Tokenizer: tok,
		Fair:                admit.FairConfig{Slots: slots},
		Budget:              budgetOf(keys, c.cfg.BudgetPeriod),
		AllowPolicyOverride: c.cfg.Dev,
		SLATTFT:             c.cfg.SLATTFT, SLAITL: c.cfg.SLAITL,
		Metrics: c.metrics, Logger: c.log,
	})
	if err != nil {
		return err
	}
	var auth func(*http.Request) (string, error)
	if keys != nil {
		auth = keys.Authenticate
	}
	if c.cfg.QUIC != "" || (c.cfg.MQTT != "" && c.cfg.MQTTTLS != "") || c.cfg.PKIDir != "" {
		if c.pkiDir, err = ingress.ResolvePKI(c.cfg.PKIDir, c.cfg.Dev, c.cfg.DataDir); err != nil {
			return &cli.FieldError{Field: "pki-dir", Err: err}
		}
	}
	if err := c.startFleet(); err != nil {
		return err
	}
	ready := c.coord.Ready
	var admin http.Handler
	if c.fleet != nil {
		admin = c.fleet.Handler()
		ready = func() error { return errors.Join(c.coord.Ready(), c.fleet.Ready()) }
	}
	api, err := httpapi.NewHandler(c.coord, httpapi.Options{
		Authenticate: auth, AllowPolicyHint: c.cfg.Dev, Metrics: c.metrics, Logger: c.log,
	})
	if err != nil {
		return err
	}
	uiCfg := ui.Config{Cloud: dashboardView{c.coord}, Authenticate: auth}
	if c.fleet != nil {
		uiCfg.Fleet = c.fleet
	}
	dash, err := ui.New(uiCfg)
	if err != nil {
		return err
	}
	if c.http, err = ingress.NewHTTP(ingress.HTTPConfig{
		Addr: c.cfg.HTTP, API: api, Admin: admin, AdminPrefix: "/v1/fleet/", Authenticate: auth, UI: dash,
		Metrics: c.metrics, Ready: ready, Logger: c.log,
	}); err != nil {
		return err
	}
	if c.cfg.AdminListen != "" {
		if c.admin, err = metrics.ListenAdmin(c.cfg.AdminListen, c.metrics); err != nil {
			return &cli.FieldError{Field: "admin-listen", Err: err}
		}
	}
	if c.cfg.QUIC != "" {
		if c.quic, err = ingress.NewQUIC(ingress.QUICConfig{
			Addr: c.cfg.QUIC, PKIDir: c.pkiDir, Handler: c.coord, Logger: c.log,
		}); err != nil {
			return &cli.FieldError{Field: "quic", Err: err}
		}
	}
	return nil
}

// startFleet starts the embedded broker (or connects to --mqtt-url) and the
// fleet manager on it; neither runs when both are empty.
func (c *Cloud) startFleet() error {
	fc := fleet.Config{DataDir: filepath.Join(c.cfg.DataDir, "fleet"), Metrics: c.metrics, Logger: c.log}
	switch {
	case c.cfg.MQTTURL != "":
		u, _ := url.Parse(c.cfg.MQTTURL) // validated
		ext := &fleet.External{URL: c.cfg.MQTTURL}
		if u.User != nil {
			ext.Username = u.User.Username()
			ext.Password, _ = u.User.Password()
			u.User = nil
			ext.URL = u.String()
		}
		fc.External = ext
	case c.cfg.MQTT != "":
		bc := broker.Config{
			TCPAddr: c.cfg.MQTT, DevAuth: c.cfg.Dev, PasswordFile: c.cfg.MQTTPasswords,
			StorePath: filepath.Join(c.cfg.DataDir, "broker.db"), Metrics: c.metrics, Logger: c.log,
		}
		if c.cfg.MQTTTLS != "" && c.pkiDir != "" {
			tc, err := pki.ServerTLS(c.pkiDir)
			if err != nil {
				return &cli.FieldError{Field: "pki-dir", Err: err}
			}
			bc.TLS, bc.TLSAddr = tc, c.cfg.MQTTTLS
		}
		if err := os.MkdirAll(c.cfg.DataDir, 0o700); err != nil {
			return &cli.FieldError{Field: "data-dir", Err: err}
		}
		b, err := broker.Start(bc)
		if err != nil {
			return &cli.FieldError{Field: "mqtt", Err: err}
		}
		c.broker = b
		fc.Broker = b
		c.log.Info("embedded MQTT broker listening", "tcp", b.TCPAddr(), "tls", b.TLSAddr())
	default:
		return nil
	}
	m, err := fleet.Open(fc)
	if err != nil {
		return err
	}
	c.fleet = m
	return nil
}

// MQTTAddr is the embedded broker's TCP address, empty when none runs.
func (c *Cloud) MQTTAddr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broker == nil {
		return ""
	}
	return c.broker.TCPAddr()
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

// buildWorkers makes the built-in engines and the remote workers, and picks
// the tokenizer the coordinator measures prompts with.
func (c *Cloud) buildWorkers() ([]*worker.Worker, []*worker.Builtin, lm.Tokenizer, error) {
	var (
		workers  []*worker.Worker
		builtins []*worker.Builtin
		tok      lm.Tokenizer
	)
	fail := func(err error) ([]*worker.Worker, []*worker.Builtin, lm.Tokenizer, error) {
		for _, w := range workers {
			w.Close()
		}
		return nil, nil, nil, err
	}
	if c.cfg.BuiltinWorkers > 0 {
		model, err := c.loadModel()
		if err != nil {
			return fail(err)
		}
		tok = model.Tokenizer()
		threads := max(1, runtime.GOMAXPROCS(0)/c.cfg.BuiltinWorkers)
		for i := 0; i < c.cfg.BuiltinWorkers; i++ {
			eng, err := lm.NewEngine(model, lm.EngineConfig{Threads: threads})
			if err != nil {
				return fail(fmt.Errorf("built-in engine: %w", err))
			}
			b := worker.NewBuiltin(eng)
			w, err := worker.New(worker.Config{
				Name: fmt.Sprintf("builtin-%d", i), Role: roleCycle[i%len(roleCycle)],
				Batch: &batch.Config{Window: c.cfg.BatchWindow, MaxBatch: c.cfg.BatchMax},
			}, b)
			if err != nil {
				b.Close()
				return fail(err)
			}
			workers, builtins = append(workers, w), append(builtins, b)
		}
	}
	for i, raw := range c.cfg.Workers {
		wu, _ := parseWorkerURL(raw) // validated
		r, err := worker.NewRemote(worker.RemoteConfig{URL: wu.base, Model: wu.model})
		if err != nil {
			return fail(err)
		}
		role := roleCycle[(c.cfg.BuiltinWorkers+i)%len(roleCycle)]
		if wu.hasRole {
			role = wu.role
		}
		u, _ := url.Parse(wu.base)
		w, err := worker.New(worker.Config{Name: fmt.Sprintf("remote-%d-%s", i, u.Host), Role: role, Capacity: wu.capacity}, r)
		if err != nil {
			r.Close()
			return fail(err)
		}
		workers = append(workers, w)
	}
	if tok == nil {
		// Remote engines only: count and hash prompts byte-wise. The counts
		// are only the scheduler's estimate; the servers tokenize for real.
		var err error
		if tok, err = lm.ByteTokenizerSpec().Build(); err != nil {
			return fail(err)
		}
	}
	return workers, builtins, tok, nil
}

// loadModel loads --model, or the shipped cloud model (models/cloudmodel).
func (c *Cloud) loadModel() (*lm.Model, error) {
	if c.cfg.Model != "" {
		m, err := lm.Load(c.cfg.Model)
		if err != nil {
			return nil, &cli.FieldError{Field: "model", Err: err}
		}
		return m, nil
	}
	return cloudmodel.Open()
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
func (c *Cloud) Coordinator() *Coordinator {
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
	errc := make(chan error, 3)
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
	if c.broker != nil {
		errs = append(errs, c.broker.Close())
		c.broker = nil
	}
	if c.workers != nil {
		errs = append(errs, c.workers.Close())
		c.workers = nil
	}
	if c.admit != nil {
		errs = append(errs, c.admit.Close())
		c.admit = nil
	}
	return errors.Join(errs...)
}
