package cloud

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/internal/httplimit"
	"github.com/phaseless/phaseless/models/lm"
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
	// DevExpose lets a Dev cloud's listeners bind beyond loopback, which
	// Dev otherwise keeps them on, as it serves without keys (ListenAddr).
	DevExpose bool
	Model     string
	Workers   WorkerURLs // parsed when set (--worker), so nothing reads the text twice
	Redis     cli.URL    // parsed when set
	APIKeys   string
	// RedisTimeout bounds each Redis command (admit.RedisOptions.OpTimeout);
	// 0 = 200 ms.
	RedisTimeout time.Duration
	// ResumeWindow is how long an agent's request whose link dropped keeps
	// generating, buffered, for the agent to resume (quic.ServerConfig);
	// 0 = quic.DefaultResumeWindow (60 s).
	ResumeWindow time.Duration
	// ResumeBufferBytes bounds the tokens buffered per agent request
	// (quic.ServerConfig.MaxReplayBytes); 0 = 1 MiB.
	ResumeBufferBytes int

	MQTTTLS       string  // embedded broker's TLS listener (device certificates)
	MQTTPasswords string  // Mosquitto password file for the embedded broker
	MQTTURL       cli.URL // external broker instead of the embedded one; parsed when set
	MQTTDynsec    bool    // the external broker is a Mosquitto with the dynamic security plugin: revoked devices are disabled there
	PublicURL     cli.URL // this cloud's HTTP base URL as devices reach it (rollout downloads); parsed when set
	OTAPub        string  // the fleet's OTA public key: uploaded artifacts must be signed with it
	FleetDataDir  string  // the fleet store's directory; empty: DATA_DIR/fleet
	FleetDB       string  // postgres://… : the fleet store in PostgreSQL, managers side by side (cloud/fleet pgstore.go)
	FleetStandby  bool    // with Redis: wait for the fleet lease as a standby instead of refusing to start (fleetstandby.go)

	FleetArchiveDir      string        // Parquet archive of older telemetry (cloud/fleetapi/archive); empty: none
	FleetArchiveAfter    time.Duration // a record moves once its ingest hour ended this long ago; 0 = 10 minutes
	FleetArchiveMaxBytes int64         // the archive's size bound; 0 = none (the age bound, 30 days, still applies)
	OTLP                 cli.URL       // OTLP/HTTP collector that request spans are exported to; parsed when set

	BuiltinWorkers int           // built-in engines; 0: none beside --worker, else 1 (4 in --dev)
	BuiltinRoles   RoleList      // the built-in engines' pools, in turn; empty: decode-heavy, prefill-heavy, stream (--dev adds conservative)
	Budget         int64         // default burst budget in tokens
	BudgetPeriod   time.Duration // how long an empty budget takes to refill (every key's); 0 = a minute
	BatchWindow    time.Duration // longest a request is held for bucketing
	BatchMax       int           // most requests released together
	AgingRate      float64       // built-in engines' cache-aware admission order, in tokens/s (lm.EngineConfig.AgingRate); 0 = first come, first served
	HostKV         float64       // built-in engines' host-memory KV tier, in times each engine's KV budget (lm.EngineConfig.HostKV); 0 = none
	MaxRunning     int           // requests running at once before the fair queue holds them; 0 = 2× the workers' capacity
	MaxQueued      int           // requests the fair queue holds before new ones get 503 overloaded; 0 = 1024
	SLATTFT        time.Duration
	SLAITL         time.Duration
	AdminListen    string // pprof and /metrics on their own listener; empty = off
	// HTTPLimits bounds the public HTTP listener's connections (timeouts,
	// a connection cap; internal/httplimit). Zero fields: the defaults,
	// with MaxConns DefaultHTTPMaxConns.
	HTTPLimits  httplimit.Config
	CacheLayers string // prompt-caching layers, comma-separated (cache.go); empty = the default set
	Scheduler   string // the placement policy (sched.Names); empty = sched.NameScheduler, i.e. sched.DefaultPolicy
}

// FillDefaults sets every field whose zero value is not a working setting,
// so a Config that says only how clients authenticate (Dev or APIKeys: that
// choice has no safe default) runs a coordinator with one built-in engine on
// :8080. A
// field whose zero is a setting of its own keeps it: QUIC, MQTT and MQTTTLS
// empty open no such listener, BatchWindow 0 holds no request, MaxRunning 0
// is twice the workers' capacity; their command-line defaults are set in
// RegisterFlags.
func (c *Config) FillDefaults() {
	if c.HTTP == "" {
		c.HTTP = ":8080"
	}
	if c.HTTPLimits.MaxConns == 0 {
		c.HTTPLimits.MaxConns = DefaultHTTPMaxConns
	}
	c.HTTPLimits.FillDefaults()
	if c.DataDir == "" {
		c.DataDir = "phaseless-cloud-data"
	}
	if c.Budget == 0 {
		c.Budget = 200000
	}
	if c.BudgetPeriod == 0 {
		c.BudgetPeriod = time.Minute
	}
	if c.BatchMax == 0 {
		c.BatchMax = 16
	}
	if c.SLATTFT == 0 {
		c.SLATTFT = 2 * time.Second
	}
	if c.SLAITL == 0 {
		c.SLAITL = 200 * time.Millisecond
	}
	if c.ResumeWindow == 0 {
		c.ResumeWindow = quic.DefaultResumeWindow
	}
	if c.ResumeBufferBytes == 0 {
		c.ResumeBufferBytes = quic.DefaultMaxReplayBytes
	}
}

// Fields is phaseless-cloud's configuration table: each field's flag, which
// is also its PHASELESS_* variable and YAML key (DESIGN.md §4).
// DefaultHTTPMaxConns caps the public listener: 9,000 idle connections
// cost the cloud 131 MB (issue 27), about 15 KB each, so 8,192 bound that
// to ~120 MB while leaving room for a large fleet and its apps.
const DefaultHTTPMaxConns = 8192

func (c *Config) Fields() cli.Fields {
	return append(cli.Fields{
		{Flag: "http", Go: "HTTP", Value: &c.HTTP, Usage: "HTTP API address (OpenAI/Anthropic compatible, admin, metrics)"},
		{Flag: "quic", Go: "QUIC", Value: &c.QUIC, Usage: "QUIC listener for agents (UDP); empty disables it"},
		{Flag: "resume-window", Go: "ResumeWindow", Value: &c.ResumeWindow, Usage: "how long an agent's request whose link dropped keeps generating, buffered, for the agent to resume it (docs/transport.md)"},
		{Flag: "resume-buffer-bytes", Go: "ResumeBufferBytes", Value: &c.ResumeBufferBytes, Usage: "most bytes of tokens buffered per agent request for resuming; a request nobody follows pauses there"},
		{Flag: "mqtt", Go: "MQTT", Value: &c.MQTT, Usage: "embedded MQTT broker address; empty disables it"},
		{Flag: "data-dir", Go: "DataDir", Value: &c.DataDir, Usage: "directory for state (bbolt), and the dev PKI"},
		{Flag: "pki-dir", Go: "PKIDir", Value: &c.PKIDir, Usage: "directory with the CA and server certificate (phaselessctl pki init)"},
		{Flag: "dev", Go: "Dev", Value: &c.Dev, Usage: "development mode: no API keys required; creates a PKI in the data dir when none is given; honours x-phaseless-policy; listeners bind loopback (an address without a host binds 127.0.0.1; another host needs --dev-expose)"},
		{Flag: "dev-expose", Go: "DevExpose", Value: &c.DevExpose, Usage: "with --dev: let the listeners bind beyond loopback (an address without a host then binds every interface); --dev serves the API, dashboard, fleet admin and MQTT without keys, so only on a network you trust"},
		{Flag: "model", Go: "Model", Value: &c.Model, Usage: "GGUF model for the built-in engine (default: the shipped cloud model)"},
		{Flag: "worker", Go: "Workers", Value: &c.Workers, Usage: "OpenAI-compatible engine URL (repeatable); options in the fragment: URL#role=prefill-heavy&model=NAME&capacity=N&gpu=h100&key=BEARER; or sim://GPU?model=M&n=N for simulated GPU workers (docs/sim.md)"},
		{Flag: "redis", Go: "Redis", Value: &c.Redis, Usage: "Redis URL for shared admission state, e.g. redis://127.0.0.1:6379/0"},
		{Flag: "redis-timeout", Go: "RedisTimeout", Value: &c.RedisTimeout, Usage: "longest a Redis command may take before the request goes on without it (budgets fail open); after 3 failures in a row Redis is left alone for 5 s and /readyz says degraded (0: 200ms)"},
		{Flag: "api-keys", Go: "APIKeys", Value: &c.APIKeys, Usage: "file of API keys, one per line: key [tenant] [budget] [role=inference|operator|viewer|worker] (docs/security.md)"},
		{Flag: "mqtt-tls", Go: "MQTTTLS", Value: &c.MQTTTLS, Usage: "embedded broker's MQTT-over-TLS listener, using the PKI's server certificate; empty disables it"},
		{Flag: "mqtt-passwords", Go: "MQTTPasswords", Value: &c.MQTTPasswords, Usage: "Mosquitto password file for the embedded broker (username = device id)"},
		{Flag: "mqtt-url", Go: "MQTTURL", Value: &c.MQTTURL, Usage: "external MQTT v5 broker (mqtt://user:pass@host:1883) instead of the embedded one"},
		{Flag: "mqtt-dynsec", Go: "MQTTDynsec", Value: &c.MQTTDynsec, Usage: "the --mqtt-url broker is a Mosquitto with the dynamic security plugin and its user has the plugin's admin role: a revoked device is disabled there (kicked and refused) at once"},
		{Flag: "public-url", Go: "PublicURL", Value: &c.PublicURL, Usage: "this cloud's HTTP base URL as devices reach it, for rollout downloads (default: http://127.0.0.1 and the --http port)"},
		{Flag: "otlp", Go: "OTLP", Value: &c.OTLP, Usage: "OpenTelemetry collector URL (OTLP/HTTP, e.g. http://127.0.0.1:4318): export spans for admission, scheduling, queueing, prefill and decode"},
		{Flag: "ota-pub", Go: "OTAPub", Value: &c.OTAPub, Usage: "the fleet's OTA public key (phaselessctl ota keygen): uploaded rollout artifacts must be signed with it"},
		{Flag: "fleet-data-dir", Go: "FleetDataDir", Value: &c.FleetDataDir, Usage: "directory of the fleet store (registry, config, telemetry, rollouts); default DATA_DIR/fleet. Replicas with --fleet-standby share it"},
		{Flag: "fleet-archive-dir", Go: "FleetArchiveDir", Value: &c.FleetArchiveDir, Usage: "keep telemetry past the fleet store as hourly Parquet files in this directory: records move once their ingest hour ended --fleet-archive-after ago, or earlier while the store is over its bound; files are kept 30 days and within --fleet-archive-max-bytes (docs/fleet-cloud.md)"},
		{Flag: "fleet-archive-after", Go: "FleetArchiveAfter", Value: &c.FleetArchiveAfter, Usage: "with --fleet-archive-dir: how long after its ingest hour ends a record moves to the archive (0: 10m)"},
		{Flag: "fleet-archive-max-bytes", Go: "FleetArchiveMaxBytes", Value: &c.FleetArchiveMaxBytes, Usage: "with --fleet-archive-dir: the archive's size bound in bytes, oldest files deleted first (0: no bound but the 30-day age)"},
		{Flag: "fleet-db", Go: "FleetDB", Value: &c.FleetDB, Usage: "keep the fleet store in PostgreSQL (postgres://user@host/db) instead of bbolt: every replica on the database runs a fleet manager and serves the admin API, device messages are split through MQTT shared subscriptions (with --mqtt-url), rollouts are stepped by one at a time; no fleet lease. Artifacts stay in --fleet-data-dir: share it"},
		{Flag: "fleet-standby", Go: "FleetStandby", Value: &c.FleetStandby, Usage: "with --redis and --mqtt-url: when another replica holds the fleet lease, wait for it as a standby (serving inference) and take over the fleet when it stops or dies, from the shared --fleet-data-dir"},
		{Flag: "builtin-workers", Go: "BuiltinWorkers", Value: &c.BuiltinWorkers, Usage: "built-in engine workers; 0: none when --worker is given, else 1, or 4 with --dev (one per pool, conservative included)"},
		{Flag: "builtin-roles", Go: "BuiltinRoles", Value: &c.BuiltinRoles, Usage: "pools of the built-in workers, assigned in turn, e.g. decode-heavy,prefill-heavy,stream,conservative (default: decode-heavy,prefill-heavy,stream; --dev adds conservative)"},
		{Flag: "budget", Go: "Budget", Value: &c.Budget, Usage: "default token budget per API key or device: burst size, refilled over --budget-period"},
		{Flag: "budget-period", Go: "BudgetPeriod", Value: &c.BudgetPeriod, Usage: "how long an empty budget takes to refill, for the default and every key's budget (1m, 1h, 24h…)"},
		{Flag: "batch-window", Go: "BatchWindow", Value: &c.BatchWindow, Usage: "longest a request waits to be batched with similar-length prompts while its engine is full"},
		{Flag: "batch-max", Go: "BatchMax", Value: &c.BatchMax, Usage: "most requests released into an engine together"},
		{Flag: "aging-rate", Go: "AgingRate", Value: &c.AgingRate, Usage: "built-in engines: cache-aware admission order, after the decodes prompt work runs earliest (queued at + uncached prompt tokens / this many tokens per second) first, so a short uncached remainder passes a long prefill without starving it; 0 = first come, first served (docs/cloud.md)"},
		{Flag: "host-kv", Go: "HostKV", Value: &c.HostKV, Usage: "built-in engines: a host-memory KV tier of this many times each engine's KV budget, which keeps the prefix blocks the engine's cache evicts and copies them back for a prompt that continues them instead of recomputing; 0 = none (docs/cloud.md)"},
		{Flag: "scheduler", Go: "Scheduler", Value: &c.Scheduler, Usage: "placement policy: " + strings.Join(sched.Names(), ", ") + " (scheduler = the project's default, " + sched.DefaultPolicy + "; the others are the baselines and ablations docs/cloud.md measures)"},
		{Flag: "cache-layers", Go: "CacheLayers", Value: &c.CacheLayers, Usage: "prompt-caching layers: affinity, prefetch, semantic (comma-separated), or none; default affinity (docs/cloud.md)"},
		{Flag: "max-running", Go: "MaxRunning", Value: &c.MaxRunning, Usage: "requests running at once before the per-tenant fair queue holds them (0: twice the workers' capacity)"},
		{Flag: "max-queued", Go: "MaxQueued", Value: &c.MaxQueued, Usage: "requests the fair queue holds before more are refused with 503 overloaded in the API's error shape (0: 1024)"},
		{Flag: "sla-ttft", Go: "SLATTFT", Value: &c.SLATTFT, Usage: "SLA: time to first token"},
		{Flag: "sla-itl", Go: "SLAITL", Value: &c.SLAITL, Usage: "SLA: mean time between tokens"},
		{Flag: "admin-listen", Go: "AdminListen", Value: &c.AdminListen, Usage: "diagnostics listener: Go pprof at /debug/pprof/ and /metrics, unauthenticated (bind to loopback); empty disables it"},
	}, c.HTTPLimits.Fields("HTTPLimits.")...)
}

// RegisterFlags fills c's defaults and binds its fields to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.FillDefaults()
	// The command line's defaults for fields whose zero means "off".
	c.QUIC, c.MQTT, c.MQTTTLS, c.BatchWindow = ":4433", ":1883", ":8883", 150*time.Millisecond
	c.Fields().Register(fs)
}

// Validate reports the first bad field, by its Go name (Fields maps it to
// the flag).
func (c *Config) Validate() error {
	for _, f := range []struct{ name, addr string }{{"HTTP", c.HTTP}, {"QUIC", c.QUIC}, {"MQTT", c.MQTT}, {"MQTTTLS", c.MQTTTLS}, {"AdminListen", c.AdminListen}} {
		if f.addr == "" && f.name != "HTTP" {
			continue
		}
		if _, _, err := net.SplitHostPort(f.addr); err != nil {
			return &cli.FieldError{Field: f.name, Err: err}
		}
	}
	if c.MQTTURL.IsSet() {
		if c.MQTT != "" {
			return &cli.FieldError{Field: "MQTT", Err: errors.New("an embedded broker and an external broker URL are both set: leave the embedded broker's address empty")}
		}
	}
	if c.PublicURL.IsSet() && (c.PublicURL.Scheme != "http" && c.PublicURL.Scheme != "https" || c.PublicURL.Host == "") {
		return &cli.FieldError{Field: "PublicURL", Err: fmt.Errorf("%q is not an http(s) base URL", c.PublicURL.String())}
	}
	if c.Redis.IsSet() && c.Redis.Scheme != "redis" && c.Redis.Scheme != "rediss" {
		return &cli.FieldError{Field: "Redis", Err: fmt.Errorf("%q is not a redis:// URL", c.Redis.String())}
	}
	if c.ResumeWindow != 0 && c.ResumeWindow < time.Second {
		return &cli.FieldError{Field: "ResumeWindow", Err: fmt.Errorf("%v must be at least 1s", c.ResumeWindow)}
	}
	if c.ResumeBufferBytes != 0 && c.ResumeBufferBytes < 4096 {
		return &cli.FieldError{Field: "ResumeBufferBytes", Err: fmt.Errorf("%d must be at least 4096", c.ResumeBufferBytes)}
	}
	if !c.Dev && c.APIKeys == "" {
		return &cli.FieldError{Field: "APIKeys", Err: errors.New("required outside development mode")}
	}
	if c.DevExpose && !c.Dev {
		return &cli.FieldError{Field: "DevExpose", Err: errors.New("only means something with --dev")}
	}
	for _, l := range c.devListeners() {
		if host, _, _ := net.SplitHostPort(l.addr); c.Dev && !c.DevExpose && host != "" && !loopback(host) {
			return &cli.FieldError{Field: l.field, Err: fmt.Errorf("%s is not a loopback address, and --dev serves without keys: bind 127.0.0.1 (or give only the port), or add --dev-expose", l.addr)}
		}
	}
	if c.DataDir == "" {
		return &cli.FieldError{Field: "DataDir", Err: errors.New("must not be empty")}
	}
	switch {
	case c.BuiltinWorkers < 0 || c.BuiltinWorkers > 64:
		return &cli.FieldError{Field: "BuiltinWorkers", Err: fmt.Errorf("%d is not in 0..64", c.BuiltinWorkers)}
	case c.Budget <= 0:
		return &cli.FieldError{Field: "Budget", Err: fmt.Errorf("%d must be positive", c.Budget)}
	case c.BudgetPeriod != 0 && c.BudgetPeriod < time.Second:
		return &cli.FieldError{Field: "BudgetPeriod", Err: fmt.Errorf("%v must be at least 1s", c.BudgetPeriod)}
	case c.RedisTimeout < 0:
		return &cli.FieldError{Field: "RedisTimeout", Err: fmt.Errorf("%v must not be negative", c.RedisTimeout)}
	case c.BatchWindow < 0:
		return &cli.FieldError{Field: "BatchWindow", Err: fmt.Errorf("%v must not be negative", c.BatchWindow)}
	case c.AgingRate < 0 || math.IsNaN(c.AgingRate) || math.IsInf(c.AgingRate, 0):
		return &cli.FieldError{Field: "AgingRate", Err: errors.New("must be a finite rate of at least 0 tokens per second")}
	case c.AgingRate > 0 && c.nBuiltins() == 0:
		return &cli.FieldError{Field: "AgingRate", Err: errors.New("orders the built-in engines' admissions, and none runs (--builtin-workers 0 with --worker)")}
	case c.HostKV < 0 || math.IsNaN(c.HostKV) || math.IsInf(c.HostKV, 0) || c.HostKV > lm.MaxHostKV:
		return &cli.FieldError{Field: "HostKV", Err: fmt.Errorf("must be between 0 and %d (times each built-in engine's KV budget)", lm.MaxHostKV)}
	case c.HostKV > 0 && c.nBuiltins() == 0:
		return &cli.FieldError{Field: "HostKV", Err: errors.New("is the built-in engines' host KV tier, and none runs (--builtin-workers 0 with --worker)")}
	case c.BatchMax < 1:
		return &cli.FieldError{Field: "BatchMax", Err: fmt.Errorf("%d must be at least 1", c.BatchMax)}
	case c.MaxRunning < 0:
		return &cli.FieldError{Field: "MaxRunning", Err: fmt.Errorf("%d must not be negative", c.MaxRunning)}
	case c.MQTTDynsec && !c.MQTTURL.IsSet():
		return &cli.FieldError{Field: "MQTTDynsec", Err: errors.New("needs an external broker (--mqtt-url)")}
	case c.FleetArchiveAfter < 0 || c.FleetArchiveMaxBytes < 0:
		return &cli.FieldError{Field: "FleetArchiveAfter/FleetArchiveMaxBytes", Err: errors.New("must not be negative")}
	case c.FleetArchiveDir == "" && (c.FleetArchiveAfter != 0 || c.FleetArchiveMaxBytes != 0):
		return &cli.FieldError{Field: "FleetArchiveDir", Err: errors.New("--fleet-archive-after and --fleet-archive-max-bytes need --fleet-archive-dir")}
	case c.FleetDB != "" && !strings.HasPrefix(c.FleetDB, "postgres://") && !strings.HasPrefix(c.FleetDB, "postgresql://"):
		return &cli.FieldError{Field: "FleetDB", Err: errors.New("want a PostgreSQL URL, postgres://user@host:5432/db")}
	case c.FleetDB != "" && (c.FleetStandby || c.FleetArchiveDir != ""):
		return &cli.FieldError{Field: "FleetDB", Err: errors.New("--fleet-standby and --fleet-archive-dir are for the bbolt fleet store; on PostgreSQL every replica is active")}
	case c.FleetStandby && (!c.Redis.IsSet() || !c.MQTTURL.IsSet()):
		return &cli.FieldError{Field: "FleetStandby", Err: errors.New("needs --redis (the lease) and --mqtt-url (a broker every replica reaches: an embedded broker's sessions die with its replica)")}
	case c.MaxQueued < 0:
		return &cli.FieldError{Field: "MaxQueued", Err: fmt.Errorf("%d must not be negative", c.MaxQueued)}
	case c.SLATTFT <= 0:
		return &cli.FieldError{Field: "SLATTFT", Err: errors.New("must be positive")}
	case c.SLAITL <= 0:
		return &cli.FieldError{Field: "SLAITL", Err: errors.New("must be positive")}
	case c.Scheduler != "" && !slices.Contains(sched.Names(), c.Scheduler):
		return &cli.FieldError{Field: "Scheduler", Err: fmt.Errorf("unknown policy %q (%s)", c.Scheduler, strings.Join(sched.Names(), ", "))}
	}
	if err := c.HTTPLimits.Validate(); err != nil {
		return httplimit.Rename(err, "HTTPLimits.")
	}
	return nil
}

// roleCycle assigns roles to workers that name none, so N workers cover the
// pools in turn; a lone worker is decode-heavy, the general-purpose pool. The
// conservative pool is only ever chosen explicitly.
var roleCycle = []sched.Role{sched.RoleDecode, sched.RolePrefill, sched.RoleStream}

// devRoles are --dev's built-in workers: one per pool, so pool choice, the
// conservative fallback and splits between pools show on one machine.
var devRoles = []sched.Role{sched.RoleDecode, sched.RolePrefill, sched.RoleStream, sched.RoleConservative}

// nBuiltins is how many built-in workers run.
func (c *Config) nBuiltins() int {
	n, _ := c.builtins()
	return n
}

// builtins is how many built-in workers run and their pools.
func (c *Config) builtins() (int, []sched.Role) {
	roles := []sched.Role(c.BuiltinRoles)
	if len(roles) == 0 {
		roles = roleCycle
		if c.Dev {
			roles = devRoles
		}
	}
	n := c.BuiltinWorkers
	if n == 0 && len(c.Workers) == 0 {
		n = 1
		if c.Dev {
			n = len(roles)
		}
	}
	return n, roles
}

// RoleList is the --builtin-roles flag: pool names, comma-separated.
type RoleList []sched.Role

func (l *RoleList) String() string {
	names := make([]string, len(*l))
	for i, r := range *l {
		names[i] = r.String()
	}
	return strings.Join(names, ",")
}

// Set parses a comma-separated list of pools (sched.ParseRole's names).
func (l *RoleList) Set(v string) error {
	var out RoleList
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		r, err := sched.ParseRole(s)
		if err != nil {
			return err
		}
		out = append(out, r)
	}
	*l = out
	return nil
}

// devListener is a listener --dev keeps on loopback.
type devListener struct {
	field, what, addr string
}

// devListeners are the listeners that --dev serves without keys, or that
// take whoever connects: HTTP (the API without keys, the dashboard, fleet
// admin) and MQTT (any device id); QUIC and MQTT/TLS still want a device
// certificate, from a PKI --dev may have made itself.
func (c *Config) devListeners() []devListener {
	var out []devListener
	for _, l := range []devListener{
		{"HTTP", "HTTP", c.HTTP}, {"QUIC", "QUIC", c.QUIC}, {"MQTT", "MQTT", c.MQTT}, {"MQTTTLS", "MQTT/TLS", c.MQTTTLS},
	} {
		if l.addr != "" {
			out = append(out, l)
		}
	}
	return out
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ListenAddr is where a listener configured as addr binds: with --dev and
// no --dev-expose, an address without a host ("":8080") binds 127.0.0.1,
// so a development cloud is not open to the network by default.
func (c *Config) ListenAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host != "" || !c.Dev || c.DevExpose {
		return addr
	}
	return net.JoinHostPort("127.0.0.1", port)
}

// Exposure says what a validated configuration serves without
// authentication, for the daemon's first log line; "" outside --dev.
func (c *Config) Exposure() string {
	if !c.Dev {
		return ""
	}
	var open, certs []string
	for _, l := range c.devListeners() {
		where := l.what + " " + c.ListenAddr(l.addr)
		if host, _, _ := net.SplitHostPort(l.addr); host == "" && c.DevExpose {
			where += " (every interface)"
		}
		switch l.field {
		case "HTTP":
			if c.APIKeys == "" {
				open = append(open, where+": the inference API, dashboard, fleet admin and rollouts, /metrics")
			}
		case "MQTT":
			open = append(open, where+": any client, as any device id")
		default:
			certs = append(certs, where)
		}
	}
	msg := "development mode (--dev): "
	if len(open) == 0 {
		msg += "nothing served without keys"
	} else {
		msg += "serves without keys " + strings.Join(open, "; ")
	}
	if len(certs) > 0 {
		msg += "; " + strings.Join(certs, ", ") + " want a device certificate (of --pki-dir, or a PKI --dev creates in the data dir)"
	}
	if !c.DevExpose {
		msg += "; loopback only (--dev-expose opens other addresses)"
	}
	return msg
}
