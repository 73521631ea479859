// Package cloud wires the coordinator: QUIC and HTTP ingress, admission, the
// phase-less scheduler, batching, worker pools and the fleet manager. Each of
// those lives in its own sub-package; this package builds them from a Config
// and runs them together. The request path itself (admit → decide → batch →
// stream) is package cloud/coordinator.
package cloud

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/phaseless/phaseless/cloud/admit"
	"github.com/phaseless/phaseless/cloud/batch"
	"github.com/phaseless/phaseless/cloud/coordinator"
	"github.com/phaseless/phaseless/cloud/fleet"
	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/cloud/ingress"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/sim"
	"github.com/phaseless/phaseless/cloud/ui"
	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/internal/tracing/otlp"
	"github.com/phaseless/phaseless/models/cloudmodel"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/lm/kvcache"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
	"github.com/phaseless/phaseless/transport/httpapi"
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
	Workers WorkerURLs // parsed when set (--worker), so nothing reads the text twice
	Redis   cli.URL    // parsed when set
	APIKeys string

	MQTTTLS       string  // embedded broker's TLS listener (device certificates)
	MQTTPasswords string  // Mosquitto password file for the embedded broker
	MQTTURL       cli.URL // external broker instead of the embedded one; parsed when set
	MQTTDynsec    bool    // the external broker is a Mosquitto with the dynamic security plugin: revoked devices are disabled there
	PublicURL     cli.URL // this cloud's HTTP base URL as devices reach it (rollout downloads); parsed when set
	OTAPub        string  // the fleet's OTA public key: uploaded artifacts must be signed with it
	FleetDataDir  string  // the fleet store's directory; empty: DATA_DIR/fleet
	FleetStandby  bool    // with Redis: wait for the fleet lease as a standby instead of refusing to start (fleetstandby.go)
	OTLP          cli.URL // OTLP/HTTP collector that request spans are exported to; parsed when set

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
	CacheLayers    string // prompt-caching layers, comma-separated (cache.go); empty = the default set
	Scheduler      string // the placement policy (sched.Names); empty = sched.NameScheduler, i.e. sched.DefaultPolicy
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
}

// Fields is phaseless-cloud's configuration table: each field's flag, which
// is also its PHASELESS_* variable and YAML key (DESIGN.md §4).
func (c *Config) Fields() cli.Fields {
	return cli.Fields{
		{Flag: "http", Go: "HTTP", Value: &c.HTTP, Usage: "HTTP API address (OpenAI/Anthropic compatible, admin, metrics)"},
		{Flag: "quic", Go: "QUIC", Value: &c.QUIC, Usage: "QUIC listener for agents (UDP); empty disables it"},
		{Flag: "mqtt", Go: "MQTT", Value: &c.MQTT, Usage: "embedded MQTT broker address; empty disables it"},
		{Flag: "data-dir", Go: "DataDir", Value: &c.DataDir, Usage: "directory for state (bbolt), and the dev PKI"},
		{Flag: "pki-dir", Go: "PKIDir", Value: &c.PKIDir, Usage: "directory with the CA and server certificate (phaselessctl pki init)"},
		{Flag: "dev", Go: "Dev", Value: &c.Dev, Usage: "development mode: no API keys required; creates a PKI in the data dir when none is given; honours x-phaseless-policy"},
		{Flag: "model", Go: "Model", Value: &c.Model, Usage: "GGUF model for the built-in engine (default: the shipped cloud model)"},
		{Flag: "worker", Go: "Workers", Value: &c.Workers, Usage: "OpenAI-compatible engine URL (repeatable); options in the fragment: URL#role=prefill-heavy&model=NAME&capacity=N&gpu=h100&key=BEARER; or sim://GPU?model=M&n=N for simulated GPU workers (docs/sim.md)"},
		{Flag: "redis", Go: "Redis", Value: &c.Redis, Usage: "Redis URL for shared admission state, e.g. redis://127.0.0.1:6379/0"},
		{Flag: "api-keys", Go: "APIKeys", Value: &c.APIKeys, Usage: "file of API keys, one per line: key [tenant] [budget] [role=inference|operator|viewer|worker] (docs/security.md)"},
		{Flag: "mqtt-tls", Go: "MQTTTLS", Value: &c.MQTTTLS, Usage: "embedded broker's MQTT-over-TLS listener, using the PKI's server certificate; empty disables it"},
		{Flag: "mqtt-passwords", Go: "MQTTPasswords", Value: &c.MQTTPasswords, Usage: "Mosquitto password file for the embedded broker (username = device id)"},
		{Flag: "mqtt-url", Go: "MQTTURL", Value: &c.MQTTURL, Usage: "external MQTT v5 broker (mqtt://user:pass@host:1883) instead of the embedded one"},
		{Flag: "mqtt-dynsec", Go: "MQTTDynsec", Value: &c.MQTTDynsec, Usage: "the --mqtt-url broker is a Mosquitto with the dynamic security plugin and its user has the plugin's admin role: a revoked device is disabled there (kicked and refused) at once"},
		{Flag: "public-url", Go: "PublicURL", Value: &c.PublicURL, Usage: "this cloud's HTTP base URL as devices reach it, for rollout downloads (default: http://127.0.0.1 and the --http port)"},
		{Flag: "otlp", Go: "OTLP", Value: &c.OTLP, Usage: "OpenTelemetry collector URL (OTLP/HTTP, e.g. http://127.0.0.1:4318): export spans for admission, scheduling, queueing, prefill and decode"},
		{Flag: "ota-pub", Go: "OTAPub", Value: &c.OTAPub, Usage: "the fleet's OTA public key (phaselessctl ota keygen): uploaded rollout artifacts must be signed with it"},
		{Flag: "fleet-data-dir", Go: "FleetDataDir", Value: &c.FleetDataDir, Usage: "directory of the fleet store (registry, config, telemetry, rollouts); default DATA_DIR/fleet. Replicas with --fleet-standby share it"},
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
	}
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
	if !c.Dev && c.APIKeys == "" {
		return &cli.FieldError{Field: "APIKeys", Err: errors.New("required outside development mode")}
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
	return nil
}

// WorkerURL is one --worker value: an OpenAI-compatible server's URL and the
// options in its fragment (URL#role=prefill-heavy&model=NAME&capacity=N&gpu=h100).
type WorkerURL struct {
	raw      string
	base     string // the URL without its fragment
	host     string // its host, which names the worker
	role     sched.Role
	hasRole  bool
	model    string
	capacity int
	// gpu is the worker's GPU (#gpu=h100, or a sim:// worker's): the
	// priced policies price it by cloud/sim's profile of that GPU.
	gpu string
	tp  int          // a sim:// worker's GPUs per engine; 0 = the fewest that fit
	sim *sim.URLSpec // sim://GPU?model=M&n=N: simulated workers (cloud/sim)
	// key is the bearer token the worker wants (#key=): for another
	// phaseless-cloud with --api-keys, a role=worker key.
	key string
}

// WorkerURLs is the repeatable --worker flag: each value is parsed once, when
// it is set; a comma-separated value (as the environment gives it) adds
// several.
type WorkerURLs []WorkerURL

func (l *WorkerURLs) String() string {
	raw := make([]string, len(*l))
	for i, w := range *l {
		raw[i] = w.raw
	}
	return strings.Join(raw, ",")
}

// Set parses and adds one or more comma-separated worker URLs.
func (l *WorkerURLs) Set(v string) error {
	options := false // the previous piece had options: a key with a comma in it splits there
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		w, err := parseWorkerURL(s)
		if err != nil && options && !strings.Contains(s, "://") {
			return errors.New("the text after a comma in a worker URL's options is not a worker URL (not shown: it may be part of a key; write a comma in a key as %2C)")
		}
		if err != nil {
			return err
		}
		options = strings.Contains(s, "#")
		*l = append(*l, w)
	}
	return nil
}

// shownOptions are the worker URL options printed as given.
var shownOptions = map[string]bool{"role": true, "model": true, "capacity": true, "gpu": true}

// shownWorkerURL is the form of a worker URL its printed flag value and
// errors show. The options are read from the URL's decoded fragment, so
// that is what is redacted (a percent-encoded "%6Bey=" is a key as well):
// the key's value always, and with a key present every option that is not
// one of shownOptions, as a key with "&" or ";" in it falls apart into
// such pieces. A URL that does not parse shows no options at all.
func shownWorkerURL(s string, u *url.URL) string {
	base, _, ok := strings.Cut(s, "#")
	switch {
	case !ok:
		return s
	case u == nil:
		return base + "#REDACTED"
	}
	pairs := strings.FieldsFunc(u.Fragment, func(r rune) bool { return r == '&' || r == ';' })
	names := make([]string, len(pairs))
	keyed := false
	for i, p := range pairs {
		name, _, _ := strings.Cut(p, "=")
		n, err := url.QueryUnescape(name)
		if err != nil {
			n = "key" // unreadable: treated as the secret it may be
		}
		names[i], keyed = n, keyed || n == "key"
	}
	for i, n := range names {
		switch {
		case n == "key":
			pairs[i] = "key=REDACTED"
		case keyed && !shownOptions[n]:
			pairs[i] = "REDACTED"
		}
	}
	return base + "#" + strings.Join(pairs, "&")
}

func parseWorkerURL(s string) (WorkerURL, error) {
	if sim.IsURL(s) {
		spec, err := sim.ParseURL(s)
		if err != nil {
			return WorkerURL{}, err
		}
		return WorkerURL{raw: s, sim: &spec}, nil
	}
	u, err := url.Parse(s)
	if err != nil {
		u = nil
	}
	shown := shownWorkerURL(s, u) // the flag's value and errors never print the key
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return WorkerURL{}, fmt.Errorf("%q is not an http(s) URL", shown)
	}
	w := WorkerURL{raw: shown} // printed as the flag's value: never the key
	opts, err := url.ParseQuery(u.Fragment)
	if err != nil { // its text may quote a piece of the key
		return WorkerURL{}, fmt.Errorf("%q: options after # must be name=value pairs joined by &", shown)
	}
	_, keyed := opts["key"]
	for k, v := range opts {
		switch k {
		case "role":
			if w.role, err = sched.ParseRole(v[0]); err != nil {
				return WorkerURL{}, fmt.Errorf("%q: %v", shown, err)
			}
			w.hasRole = true
		case "model":
			w.model = v[0]
		case "key":
			w.key = v[0]
		case "gpu":
			if _, err := sim.LookupGPU(v[0]); err != nil {
				return WorkerURL{}, fmt.Errorf("%q: %v", shown, err)
			}
			w.gpu = v[0]
		case "capacity":
			if w.capacity, err = strconv.Atoi(v[0]); err != nil || w.capacity < 1 {
				return WorkerURL{}, fmt.Errorf("%q: capacity %q must be a positive integer", shown, v[0])
			}
		default:
			if keyed { // k may be a piece of the key
				return WorkerURL{}, fmt.Errorf("%q: an unknown option (role, model, capacity, gpu, key)", shown)
			}
			return WorkerURL{}, fmt.Errorf("%q: unknown option %q (role, model, capacity, gpu, key)", shown, k)
		}
	}
	u.Fragment = ""
	w.base, w.host = u.String(), u.Host
	return w, nil
}

// class is what the priced policies know of the worker's hardware: cloud/sim's
// roofline figures for its GPU serving its model (the llama3.1-8b profile
// when the model has none), at the profile's price; zero when no GPU was
// declared.
func (w *WorkerURL) class() sched.Class {
	g, err := sim.LookupGPU(w.gpu)
	if w.gpu == "" || err != nil {
		return sched.Class{}
	}
	m, err := sim.LookupModel(w.model)
	if err != nil {
		m, _ = sim.LookupModel("llama3.1-8b")
	}
	d, err := sim.NewDeployment(g, m, w.tp, sim.EngineConfig{})
	if err != nil {
		return sched.Class{} // the model does not fit the GPU: priced by load alone
	}
	return d.Class(g.PricePerHour)
}

// kvBlockSize is the built-in engines' KV block size and the size the
// coordinator hashes prompts at, one value so prefix matching cannot drift.
const kvBlockSize = kvcache.DefaultBlockSize

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
	if c.cfg.Redis.IsSet() {
		if store, err = admit.NewRedisStore(ctx, c.cfg.Redis.String(), ""); err != nil {
			return &cli.FieldError{Field: "Redis", Err: err}
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
	if err := c.startFleet(); err != nil {
		return err
	}
	ready := c.coord.Ready
	var admin http.Handler
	if fa, fr := c.fleetAPI(); fa != nil {
		admin = gate.Admin(fa.Handler())
		ready = func() error { return errors.Join(c.coord.Ready(), fr()) }
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
	uiCfg := ui.Config{Cloud: c.coord.Dashboard(), Authenticate: auth}
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
		Addr: c.cfg.HTTP, API: api, Admin: admin, AdminPrefix: "/v1/fleet/", Public: public, UI: dash,
		Metrics: c.metrics, Ready: ready, Logger: c.log,
	}); err != nil {
		return err
	}
	if c.cfg.AdminListen != "" {
		if c.admin, err = metrics.ListenAdmin(c.cfg.AdminListen, c.metrics); err != nil {
			return &cli.FieldError{Field: "AdminListen", Err: err}
		}
	}
	if c.cfg.QUIC != "" {
		if c.quic, err = ingress.NewQUIC(ingress.QUICConfig{
			Addr: c.cfg.QUIC, PKIDir: c.pkiDir, Handler: c.coord, Deny: c.deny, Logger: c.log,
		}); err != nil {
			return &cli.FieldError{Field: "QUIC", Err: err}
		}
	}
	return nil
}

// kvServer serves the KV handoff endpoints (worker.KVServer) on the
// built-in workers, so this cloud can be another coordinator's prefill or
// decode worker; nil when there are none.
func (c *Cloud) kvServer(workers []*worker.Worker, auth func(*http.Request) (string, error)) (http.Handler, error) {
	var builtin []*worker.Worker
	for _, w := range workers {
		if _, ok := w.Engine().(*worker.Builtin); ok {
			builtin = append(builtin, w)
		}
	}
	if len(builtin) == 0 {
		return nil, nil
	}
	return worker.NewKVServer(worker.KVServerConfig{Workers: builtin, Store: c.handoffs, Authenticate: auth})
}

// startFleet starts the embedded broker (or connects to --mqtt-url) and the
// fleet manager on it; neither runs when both are empty.
func (c *Cloud) startFleet() error {
	fc := fleet.Config{DataDir: c.fleetDataDir(), Metrics: c.metrics, Logger: c.log, PublicURL: c.publicURL(),
		Shadow: c.coord} // the coordinator answers devices' shadow samples
	if c.cfg.OTAPub != "" {
		key, err := firmware.ReadPublicKey(c.cfg.OTAPub)
		if err != nil {
			return &cli.FieldError{Field: "OTAPub", Err: err}
		}
		fc.OTAPub = key
	}
	switch {
	case c.cfg.MQTTURL.IsSet():
		u := *c.cfg.MQTTURL.URL
		ext := &fleet.External{URL: u.String(), DynamicSecurity: c.cfg.MQTTDynsec}
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
				return &cli.FieldError{Field: "PKIDir", Err: err}
			}
			bc.TLS, bc.TLSAddr = tc, c.cfg.MQTTTLS
		}
		if c.deny != nil {
			if bc.TLS != nil {
				pki.DenyRevoked(bc.TLS, c.deny)
			}
			bc.Revoked = c.deny.Revoked
		}
		if err := os.MkdirAll(c.cfg.DataDir, 0o700); err != nil {
			return &cli.FieldError{Field: "DataDir", Err: err}
		}
		b, err := broker.Start(bc)
		if err != nil {
			return &cli.FieldError{Field: "MQTT", Err: err}
		}
		c.broker = b
		fc.Broker = b
		c.log.Info("embedded MQTT broker listening", "tcp", b.TCPAddr(), "tls", b.TLSAddr())
	default:
		return nil
	}
	if c.cfg.Redis.IsSet() {
		// Replicas sharing Redis share the fleet through one writer
		// (cloud/fleet/lease.go): a second fleet manager refuses to start.
		host, _ := os.Hostname()
		lease, err := fleet.NewRedisLease(c.cfg.Redis.String(), "", host+" "+c.publicURL(), 0)
		if err != nil {
			return &cli.FieldError{Field: "Redis", Err: err}
		}
		fc.Lease = lease
		if c.cfg.FleetStandby {
			return c.startStandby(fc)
		}
	}
	m, err := fleet.Open(fc)
	if err != nil {
		return err
	}
	c.fleet = m
	return nil
}

// AuditLogFile, in the data directory, is the fleet admin audit log
// (ingress.AuditLog): JSON lines of every change and every refusal.
const AuditLogFile = "audit.jsonl"

// publicURL is --public-url, or the --http listener on loopback.
func (c *Cloud) publicURL() string {
	if c.cfg.PublicURL.IsSet() {
		return strings.TrimSuffix(c.cfg.PublicURL.String(), "/")
	}
	host, port, _ := net.SplitHostPort(c.cfg.HTTP) // validated
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
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
func (c *Cloud) buildWorkers() ([]*worker.Worker, []*worker.Builtin, tokenizer.Tokenizer, error) {
	var (
		workers  []*worker.Worker
		builtins []*worker.Builtin
		tok      tokenizer.Tokenizer
	)
	fail := func(err error) ([]*worker.Worker, []*worker.Builtin, tokenizer.Tokenizer, error) {
		for _, w := range workers {
			w.Close()
		}
		return nil, nil, nil, err
	}
	nBuiltin, roles := c.cfg.builtins()
	if nBuiltin > 0 {
		model, err := c.loadModel()
		if err != nil {
			return fail(err)
		}
		tok = model.Tokenizer()
		threads := max(1, runtime.GOMAXPROCS(0)/nBuiltin)
		for i := 0; i < nBuiltin; i++ {
			eng, err := lm.NewEngine(model, lm.EngineConfig{Threads: threads, BlockSize: kvBlockSize, AgingRate: c.cfg.AgingRate, HostKV: c.cfg.HostKV})
			if err != nil {
				return fail(fmt.Errorf("built-in engine: %w", err))
			}
			// One store for every built-in engine: a handoff another
			// coordinator parks here resumes on whichever this coordinator picks.
			b := worker.NewBuiltinWithHandoffs(eng, c.handoffs)
			w, err := worker.New(worker.Config{
				Name: fmt.Sprintf("builtin-%d", i), Role: roles[i%len(roles)], Model: c.builtinModelName(),
				Batch: &batch.Config{Window: c.cfg.BatchWindow, MaxBatch: c.cfg.BatchMax},
			}, b)
			if err != nil {
				b.Close()
				return fail(err)
			}
			workers, builtins = append(workers, w), append(builtins, b)
		}
	}
	remotes, err := c.startSimWorkers()
	if err != nil {
		return fail(err)
	}
	for i, wu := range remotes {
		r, err := worker.NewRemote(worker.RemoteConfig{URL: wu.base, Model: wu.model, APIKey: wu.key})
		if err != nil {
			return fail(err)
		}
		role := roleCycle[(nBuiltin+i)%len(roleCycle)]
		if wu.hasRole {
			role = wu.role
		}
		w, err := worker.New(worker.Config{Name: fmt.Sprintf("remote-%d-%s", i, wu.host), Role: role, Capacity: wu.capacity, Class: wu.class(), Model: listedModel(wu.model)}, r)
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
		if tok, err = tokenizer.ByteSpec().Build(); err != nil {
			return fail(err)
		}
	}
	return workers, builtins, tok, nil
}

// remoteCharsPerToken is the coordinator's CharsPerToken: with no built-in
// engine the prompts are counted byte-wise (buildWorkers), and the remote
// servers' tokenizers cut about 4 characters a token (English, Llama-3
// style; cloud/sim's servers count so too).
func remoteCharsPerToken(builtins []*worker.Builtin) float64 {
	if len(builtins) == 0 {
		return 4
	}
	return 0
}

// builtinModelName is how /v1/models lists the built-in engine's model:
// the file's base name, as the agent names its own, or the shipped one's.
func (c *Cloud) builtinModelName() string {
	if c.cfg.Model != "" {
		return strings.TrimSuffix(filepath.Base(c.cfg.Model), filepath.Ext(c.cfg.Model))
	}
	return cloudmodel.Name
}

// listedModel is a remote worker's model as /v1/models lists it: none for
// "auto", where the remote answers with whatever it serves.
func listedModel(m string) string {
	if m == "auto" {
		return ""
	}
	return m
}

// listModels is GET /v1/models beyond "auto": the workers' models. A name
// not listed is a 404, as on the agent.
func (c *Cloud) listModels() []httpapi.Model {
	var out []httpapi.Model
	for _, m := range c.coord.Models() {
		out = append(out, httpapi.Model{ID: m, OwnedBy: "phaseless"})
	}
	return out
}

// loadModel loads --model, or the shipped cloud model (models/cloudmodel).
func (c *Cloud) loadModel() (*lm.Model, error) {
	if c.cfg.Model != "" {
		m, err := lm.Load(c.cfg.Model)
		if err != nil {
			return nil, &cli.FieldError{Field: "Model", Err: err}
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

// startSimWorkers starts the simulated GPU servers of every sim:// worker
// (cloud/sim) and returns the worker list with each replaced by its
// servers' loopback URLs: the coordinator then drives them as it drives
// real vLLM servers, over HTTP, reading their vLLM metrics.
func (c *Cloud) startSimWorkers() ([]WorkerURL, error) {
	var out []WorkerURL
	for _, wu := range c.cfg.Workers {
		if wu.sim == nil {
			out = append(out, wu)
			continue
		}
		f, err := sim.StartFleet(wu.raw)
		if err != nil {
			return nil, err
		}
		c.sims = append(c.sims, f)
		for _, u := range f.URLs() {
			out = append(out, WorkerURL{raw: u, base: u, host: strings.TrimPrefix(u, "http://"),
				role: wu.sim.Role, hasRole: wu.sim.HasRole, model: wu.sim.Model.Name, gpu: wu.sim.GPU.Name, tp: wu.sim.TP})
		}
	}
	return out, nil
}
