// Package agent wires the device side of Phaseless: the local HTTP API, the
// router, the local engine, the QUIC uplink to the cloud, the telemetry
// buffer, the fleet client, OTA updates and shadow sampling. Each of those
// lives in its own sub-package; this package builds them from a Config, runs
// them together, and applies the fleet's desired config to them as they run
// (devconfig.go).
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/phaseless/phaseless/agent/fleetclient"
	"github.com/phaseless/phaseless/agent/local"
	"github.com/phaseless/phaseless/agent/ota"
	"github.com/phaseless/phaseless/agent/route"
	"github.com/phaseless/phaseless/agent/shadow"
	"github.com/phaseless/phaseless/agent/telemetry"
	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/internal/httplimit"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/predictor"
	"github.com/phaseless/phaseless/transport/fleetwire"
	"github.com/phaseless/phaseless/transport/httpapi"
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
	// OTAOrigins are where update bundles may be fetched from (the cloud's
	// HTTP listener, scheme://host[:port]); empty = updates refused.
	OTAOrigins cli.StringList

	// AllowHosts and AllowOrigins open the local API to more than loopback
	// callers without a browser Origin (httpapi.LocalGuard, docs/security.md).
	AllowHosts   cli.StringList
	AllowOrigins cli.StringList

	LocalModel string // model name sent to the --local-url server
	// A zero below means the default in parentheses (FillDefaults) unless it says "flag:".
	LocalConcurrency int           // generations the local engine runs at once (4)
	LocalQueue       int           // requests that may wait for the local engine before 503s (flag: 64)
	Threads          int           // compute threads of the built-in engine; 0 = every core the process may use (GOMAXPROCS)
	RouteThreshold   float64       // cloud probability at which the router prefers the cloud; 0 = the model's
	RouteHysteresis  float64       // relative band of the link and load signals, never the content score (flag: 0.1)
	RouteMode        string        // auto (the router decides), local or cloud for requests that pin no route (auto)
	CloudTools       bool          // the cloud calls tools (a tool-calling --worker serves it); false keeps tool requests the local model serves, and any the cloud would not, on the device
	ShadowShare      float64       // share of local answers sampled for shadow evaluation, 0..shadow.MaxShare (0: off)
	RouterAlpha      float64       // the fleet's bound on the share of wrong local answers its route-threshold was calibrated for; 0 = none
	RouterDelta      float64       // 1 − the confidence of that bound (the fleet's router-delta); 0 = none
	ProbeMargin      float64       // how much worse a model or router update may score on its probe set than the one in force; 0 = the probe set's own margin
	ProbeSet         string        // signed probe set gating updates whose bundle carries none: a file, or the set itself (inline JSON); "" = none
	MaxOutputTokens  int           // largest max_tokens accepted
	CloudRetryMax    time.Duration // longest wait between reconnect attempts to the cloud (30 s)
	CloudFirstToken  time.Duration // cloud requests without a token by then run locally (15 s)
	// ResumeDeadline: a cloud answer whose link dropped is resumed while
	// the cloud has been silent less than this; past it the local engine
	// continues it (DefaultResumeDeadline).
	ResumeDeadline time.Duration
	// NetWatch is how often the device's local addresses are checked; a
	// change migrates the uplink to the new network (handover.go). 0: 2 s;
	// negative: never.
	NetWatch      time.Duration
	TelemetryRate float64 // records per second the fleet uplink sends at most (500)
	TelemetryMax  int     // records the telemetry buffer keeps before dropping the oldest (200,000)
	// UpdateBandwidth caps update downloads in bytes per second (0: no
	// cap); UpdateOnMetered is "defer" or "allow" for a metered link, and
	// Metered says the link is metered (agent/ota.LinkPolicy).
	UpdateBandwidth int64
	UpdateOnMetered string
	Metered         bool
	// PromptCacheBytes bounds the built-in engine's prompt-state cache in
	// DataDir/prompt-cache: the KV blocks of requests' system prompts and
	// tool definitions, kept across restarts (lm.DefaultPromptCacheBytes;
	// negative: off).
	PromptCacheBytes int64
	AdminListen      string  // pprof and /metrics on their own listener; empty = off
	OTLP             cli.URL // OTLP/HTTP collector for request spans (tracing.go); parsed when set
	// HTTPLimits bounds the local API's connections, on the TCP listener
	// and the socket each (timeouts, a cap; internal/httplimit). Zero
	// fields: the defaults, with MaxConns DefaultHTTPMaxConns.
	HTTPLimits httplimit.Config
}

// DefaultResumeDeadline is how long a cloud answer waits for its link
// (quic.DefaultResumeDeadline says why 10 s).
const DefaultResumeDeadline = quic.DefaultResumeDeadline

// DefaultHTTPMaxConns caps the local API: its callers are the head unit's
// apps, a handful of connections; 3,000 trickling bodies once held the
// agent open (issue 27), and a device has little memory to spare.
const DefaultHTTPMaxConns = 256

// FillDefaults sets every field whose zero value is not a working setting,
// so a zero Config runs an offline agent on 127.0.0.1:7070. A field whose
// zero is a setting of its own (LocalQueue 0: no waiting; RouteHysteresis 0:
// no band) keeps it; its flag default is set in RegisterFlags.
func (c *Config) FillDefaults() {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:7070"
	}
	if c.HTTPLimits.MaxConns == 0 {
		c.HTTPLimits.MaxConns = DefaultHTTPMaxConns
	}
	c.HTTPLimits.FillDefaults()
	if c.Board == "" {
		c.Board = "generic"
	}
	if c.DataDir == "" {
		c.DataDir = "phaseless-agent-data"
	}
	if c.LocalConcurrency == 0 {
		c.LocalConcurrency = 4
	}
	if c.MaxOutputTokens == 0 {
		c.MaxOutputTokens = httpapi.DefaultMaxOutputTokens
	}
	if c.CloudFirstToken == 0 {
		c.CloudFirstToken = 15 * time.Second
	}
	if c.CloudRetryMax == 0 {
		c.CloudRetryMax = 30 * time.Second
	}
	if c.ResumeDeadline == 0 {
		c.ResumeDeadline = DefaultResumeDeadline
	}
	if c.NetWatch == 0 {
		c.NetWatch = 2 * time.Second
	}
	if c.TelemetryRate == 0 {
		c.TelemetryRate = 500
	}
	if c.UpdateOnMetered == "" {
		c.UpdateOnMetered = ota.MeteredDefer
	}
	if c.TelemetryMax == 0 {
		c.TelemetryMax = 200_000
	}
	if c.PromptCacheBytes == 0 {
		c.PromptCacheBytes = lm.DefaultPromptCacheBytes
	}
	if c.RouteMode == "" {
		c.RouteMode = route.ModeAuto
	}
}

// Fields is phaseless-agent's configuration table: each field's flag, which
// is also its PHASELESS_* variable and YAML key (DESIGN.md §4).
func (c *Config) Fields() cli.Fields {
	return append(cli.Fields{
		{Flag: "listen", Go: "Listen", Value: &c.Listen, Usage: "local API address (HTTP)"},
		{Flag: "otlp", Go: "OTLP", Value: &c.OTLP, Usage: "OpenTelemetry collector URL (OTLP/HTTP, e.g. http://127.0.0.1:4318): export request spans (routing, local queueing, prefill, decode); the trace continues on the cloud"},
		{Flag: "socket", Go: "Socket", Value: &c.Socket, Usage: "also serve the local API on this Unix socket"},
		{Flag: "device-id", Go: "DeviceID", Value: &c.DeviceID, Usage: "this device's id (the CN of its certificate)"},
		{Flag: "board", Go: "Board", Value: &c.Board, Usage: "board profile name, checked against OTA bundles"},
		{Flag: "cloud", Go: "Cloud", Value: &c.Cloud, Usage: "cloud QUIC address host:port; empty runs offline-only"},
		{Flag: "pki-dir", Go: "PKIDir", Value: &c.PKIDir, Usage: "directory with ca.pem and this device's certificate (phaselessctl pki device)"},
		{Flag: "mqtt", Go: "MQTT", Value: &c.MQTT, Usage: "fleet MQTT broker URL, e.g. mqtt://127.0.0.1:1883"},
		{Flag: "data-dir", Go: "DataDir", Value: &c.DataDir, Usage: "directory for the telemetry buffer, OTA slots and state"},
		{Flag: "model", Go: "Model", Value: &c.Model, Usage: "GGUF model for the built-in engine (default: the shipped edge model)"},
		{Flag: "local-url", Go: "LocalURL", Value: &c.LocalURL, Usage: "OpenAI-compatible local server URL instead of the built-in engine"},
		{Flag: "ota-pub", Go: "OTAPub", Value: &c.OTAPub, Usage: "the fleet's OTA public key (phaselessctl ota keygen); without it update commands are refused"},
		{Flag: "ota-origin", Go: "OTAOrigins", Value: &c.OTAOrigins, Usage: "origin (scheme://host[:port]) update bundles may be fetched from: the cloud's HTTP listener, which serves /v1/fleet/artifacts/ (repeatable; update URLs elsewhere are refused before any fetch)"},
		{Flag: "predictor", Go: "Predictor", Value: &c.Predictor, Usage: `ONNX router model (default: the shipped predictor; "entropy": the 4.2 bits/byte rule)`},
		{Flag: "local-model", Go: "LocalModel", Value: &c.LocalModel, Usage: "model name to request from the --local-url server (default: the request's)"},
		{Flag: "local-concurrency", Go: "LocalConcurrency", Value: &c.LocalConcurrency, Usage: "generations the local engine runs at once"},
		{Flag: "threads", Go: "Threads", Value: &c.Threads, Usage: "compute threads of the built-in engine (0 = every core the process may use: GOMAXPROCS, all CPUs unless a cgroup quota or $GOMAXPROCS says fewer)"},
		{Flag: "local-queue", Go: "LocalQueue", Value: &c.LocalQueue, Usage: "requests that may wait for the local engine; more get 503 overloaded"},
		{Flag: "route-threshold", Go: "RouteThreshold", Value: &c.RouteThreshold, Usage: "cloud probability at or above which requests go to the cloud; 0 = the predictor model's own threshold (0.5 without one)"},
		{Flag: "route-mode", Go: "RouteMode", Value: &c.RouteMode, Usage: "route of requests without an x-phaseless-route header: auto (the router decides), local (all on the device) or cloud (all to the cloud, local fallback)"},
		{Flag: "probe-margin", Go: "ProbeMargin", Value: &c.ProbeMargin, Usage: "how much lower (mean grade score, 0..1) a model or router update may score on its bundle's probe set than the one in force and still commit; 0 = the probe set's own margin (docs/fleet-device.md)"},
		{Flag: "probe-set", Go: "ProbeSet", Value: &c.ProbeSet, Usage: "signed probe set (phaselessctl ota probes sign) that gates model, router and agent updates whose bundle carries none: a file on the device, or the signed set itself (a value starting with {, as the fleet config sends it); empty = none"},
		{Flag: "router-alpha", Go: "RouterAlpha", Value: &c.RouterAlpha, Usage: "bound on the share of wrong local answers that the fleet calibrated route-threshold for (set by the fleet; the status reports it suspended while the cloud is unreachable); 0 = none"},
		{Flag: "router-delta", Go: "RouterDelta", Value: &c.RouterDelta, Usage: "1 − the confidence with which the fleet's route-threshold keeps wrong local answers under router-alpha (set by the fleet beside it); 0 = none"},
		{Flag: "cloud-tools", Go: "CloudTools", Value: &c.CloudTools, Usage: "the cloud calls tools (its workers include a tool-calling --worker server; its built-in model calls none): tool requests the local model was not taught then go to the cloud"},
		{Flag: "shadow-share", Go: "ShadowShare", Value: &c.ShadowShare, Usage: "share of locally answered requests whose text and answer go to the cloud for shadow evaluation (0 = off, at most 0.25)"},
		{Flag: "route-hysteresis", Go: "RouteHysteresis", Value: &c.RouteHysteresis, Usage: "relative hysteresis of the link (RTT, loss) and load signals, so a flapping uplink does not bounce traffic; never applied to the content score"},
		{Flag: "max-output-tokens", Go: "MaxOutputTokens", Value: &c.MaxOutputTokens, Usage: "largest max_tokens a request may ask for"},
		{Flag: "cloud-first-token-timeout", Go: "CloudFirstToken", Value: &c.CloudFirstToken, Usage: "cloud requests that have produced no token by then are cancelled and run locally"},
		{Flag: "resume-deadline", Go: "ResumeDeadline", Value: &c.ResumeDeadline, Usage: "a cloud answer whose link dropped is resumed if the cloud is heard from again within this; past it the local engine finishes the answer (docs/agent.md)"},
		{Flag: "net-watch", Go: "NetWatch", Value: &c.NetWatch, Usage: "how often the device's network addresses are checked; a change moves the cloud connection to the new network without a new handshake (negative: never)"},
		{Flag: "cloud-retry-max", Go: "CloudRetryMax", Value: &c.CloudRetryMax, Usage: "longest wait between reconnect attempts while the cloud is unreachable"},
		{Flag: "allow-host", Go: "AllowHosts", Value: &c.AllowHosts, Usage: "extra name or address accepted in the local API's Host header besides loopback and localhost (repeatable; DNS rebinding guard)"},
		{Flag: "allow-origin", Go: "AllowOrigins", Value: &c.AllowOrigins, Usage: "browser origin (scheme://host[:port]) allowed to call the local API (repeatable; others get 403)"},
		{Flag: "telemetry-rate", Go: "TelemetryRate", Value: &c.TelemetryRate, Usage: "most telemetry records per second the fleet uplink sends (draining a backlog)"},
		{Flag: "telemetry-max-records", Go: "TelemetryMax", Value: &c.TelemetryMax, Usage: "telemetry records kept on the device while offline; the oldest go first"},
		{Flag: "update-bandwidth", Go: "UpdateBandwidth", Value: &c.UpdateBandwidth, Usage: "most bytes per second update downloads use (0 = no cap)"},
		{Flag: "update-on-metered", Go: "UpdateOnMetered", Value: &c.UpdateOnMetered, Usage: "what an update does on a metered link (--metered): defer (wait until the link is not metered) or allow"},
		{Flag: "metered", Go: "Metered", Value: &c.Metered, Usage: "the device's link is metered (cellular): updates follow update-on-metered"},
		{Flag: "prompt-cache-bytes", Go: "PromptCacheBytes", Value: &c.PromptCacheBytes, Usage: "bound on the built-in engine's prompt cache in the data dir (prompt-cache/): the computed state of system prompts and tool definitions, loaded at start so the first request after a restart skips their prefill; negative turns it off"},
		{Flag: "admin-listen", Go: "AdminListen", Value: &c.AdminListen, Usage: "diagnostics listener: Go pprof at /debug/pprof/ and /metrics, unauthenticated (keep it on loopback); empty disables it"},
	}, c.HTTPLimits.Fields("HTTPLimits.")...)
}

// linkPolicy is the update link policy the config sets.
func (c *Config) linkPolicy() ota.LinkPolicy {
	return ota.LinkPolicy{Bandwidth: c.UpdateBandwidth, OnMetered: c.UpdateOnMetered, Metered: c.Metered}
}

// RegisterFlags fills c's defaults and binds its fields to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.FillDefaults()
	// The command line's defaults for fields whose zero means something else.
	c.LocalQueue, c.RouteHysteresis = 64, 0.1
	c.Fields().Register(fs)
}

// Validate reports the first bad field, by its Go name (Fields maps it to
// the flag).
func (c *Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return &cli.FieldError{Field: "Listen", Err: err}
	}
	if c.Cloud != "" {
		if _, _, err := net.SplitHostPort(c.Cloud); err != nil {
			return &cli.FieldError{Field: "Cloud", Err: err}
		}
		if c.DeviceID == "" {
			return &cli.FieldError{Field: "DeviceID", Err: errors.New("required when a cloud address is set")}
		}
		if c.PKIDir == "" {
			return &cli.FieldError{Field: "PKIDir", Err: errors.New("required when a cloud address is set: the directory phaselessctl pki device wrote")}
		}
	}
	if c.AdminListen != "" {
		if _, _, err := net.SplitHostPort(c.AdminListen); err != nil {
			return &cli.FieldError{Field: "AdminListen", Err: err}
		}
	}
	if c.MQTT != "" && c.DeviceID == "" {
		return &cli.FieldError{Field: "DeviceID", Err: errors.New("required when a fleet broker is set")}
	}
	if c.Model != "" && c.LocalURL != "" {
		return &cli.FieldError{Field: "LocalURL", Err: errors.New("give a model for the built-in engine or a local server URL, not both")}
	}
	if c.DataDir == "" {
		return &cli.FieldError{Field: "DataDir", Err: errors.New("must not be empty")}
	}
	if c.LocalConcurrency < 1 {
		return &cli.FieldError{Field: "LocalConcurrency", Err: fmt.Errorf("%d must be at least 1", c.LocalConcurrency)}
	}
	if c.Threads < 0 {
		return &cli.FieldError{Field: "Threads", Err: fmt.Errorf("%d must not be negative (0 = all cores)", c.Threads)}
	}
	if c.LocalQueue < 0 {
		return &cli.FieldError{Field: "LocalQueue", Err: fmt.Errorf("%d must not be negative", c.LocalQueue)}
	}
	if err := (route.Config{Threshold: c.RouteThreshold, Hysteresis: c.RouteHysteresis}).Validate(); err != nil {
		field := "RouteThreshold"
		if c.RouteThreshold > 0 && c.RouteThreshold < 1 {
			field = "RouteHysteresis"
		}
		return &cli.FieldError{Field: field, Err: err}
	}
	if c.ProbeSet != "" {
		// Its signature is checked at each update, against --ota-pub.
		if ota.InlineProbeSet(c.ProbeSet) {
			if !json.Valid([]byte(c.ProbeSet)) {
				return &cli.FieldError{Field: "ProbeSet", Err: errors.New("starts with { but is not JSON: give the signed probe set as ota probes sign wrote it, or a file's path")}
			}
		} else if _, err := os.Stat(c.ProbeSet); err != nil {
			return &cli.FieldError{Field: "ProbeSet", Err: err}
		}
	}
	if c.ProbeMargin < 0 || c.ProbeMargin > 1 || math.IsNaN(c.ProbeMargin) {
		return &cli.FieldError{Field: "ProbeMargin", Err: fmt.Errorf("%g must be in [0,1]", c.ProbeMargin)}
	}
	if c.RouterAlpha < 0 || c.RouterAlpha >= 1 || math.IsNaN(c.RouterAlpha) {
		return &cli.FieldError{Field: "RouterAlpha", Err: fmt.Errorf("%g must be in [0,1)", c.RouterAlpha)}
	}
	if c.RouterDelta < 0 || c.RouterDelta >= 1 || math.IsNaN(c.RouterDelta) {
		return &cli.FieldError{Field: "RouterDelta", Err: fmt.Errorf("%g must be in [0,1)", c.RouterDelta)}
	}
	if c.ShadowShare < 0 || c.ShadowShare > shadow.MaxShare || math.IsNaN(c.ShadowShare) {
		return &cli.FieldError{Field: "ShadowShare", Err: fmt.Errorf("%g must be in [0,%g]: shadow evaluation sends request text off the device", c.ShadowShare, shadow.MaxShare)}
	}
	if err := (route.Config{Mode: c.RouteMode}).Validate(); err != nil {
		return &cli.FieldError{Field: "RouteMode", Err: fmt.Errorf("%q must be auto, local or cloud", c.RouteMode)}
	}
	if c.CloudRetryMax < 250*time.Millisecond {
		return &cli.FieldError{Field: "CloudRetryMax", Err: fmt.Errorf("%v must be at least 250ms", c.CloudRetryMax)}
	}
	if c.ResumeDeadline < 100*time.Millisecond {
		return &cli.FieldError{Field: "ResumeDeadline", Err: fmt.Errorf("%v must be at least 100ms", c.ResumeDeadline)}
	}
	if c.CloudFirstToken < 100*time.Millisecond {
		return &cli.FieldError{Field: "CloudFirstToken", Err: fmt.Errorf("%v must be at least 100ms", c.CloudFirstToken)}
	}
	if c.MaxOutputTokens < 1 {
		return &cli.FieldError{Field: "MaxOutputTokens", Err: fmt.Errorf("%d must be at least 1", c.MaxOutputTokens)}
	}
	if err := (httpapi.LocalGuard{Hosts: c.AllowHosts}).Validate(); err != nil {
		return &cli.FieldError{Field: "AllowHosts", Err: err}
	}
	if err := (httpapi.LocalGuard{Origins: c.AllowOrigins}).Validate(); err != nil {
		return &cli.FieldError{Field: "AllowOrigins", Err: err}
	}
	if c.UpdateBandwidth < 0 {
		return &cli.FieldError{Field: "UpdateBandwidth", Err: fmt.Errorf("%d must not be negative", c.UpdateBandwidth)}
	}
	if c.UpdateOnMetered != ota.MeteredDefer && c.UpdateOnMetered != ota.MeteredAllow {
		return &cli.FieldError{Field: "UpdateOnMetered", Err: fmt.Errorf("%q: want defer or allow", c.UpdateOnMetered)}
	}
	if c.TelemetryRate <= 0 {
		return &cli.FieldError{Field: "TelemetryRate", Err: fmt.Errorf("%g must be positive", c.TelemetryRate)}
	}
	if c.TelemetryMax < 100 {
		return &cli.FieldError{Field: "TelemetryMax", Err: fmt.Errorf("%d must be at least 100", c.TelemetryMax)}
	}
	if err := c.HTTPLimits.Validate(); err != nil {
		return httplimit.Rename(err, "HTTPLimits.")
	}
	return nil
}

// Agent is a running device agent.
type Agent struct {
	cfg     Config
	baseCfg Config // the configuration as given (flags, env, file), before the fleet's

	cfgMu      sync.Mutex // guards running and applying a desired config
	running    Config     // what the process runs with now: cfg plus live fleet changes
	startLevel string     // the log level as given, when the fleet sets none
	disp       *route.Dispatcher
	log        *slog.Logger
	metrics    *metrics.Registry

	engine  *localEngine
	runner  *local.Runner
	cloud   *quic.Client // nil when offline-only
	store   *telemetry.Store
	rec     *telemetryRecorder
	fleet   *fleetclient.Client // nil without --mqtt
	ota     *ota.Updater
	pred    *predictor.Swappable // the router model: a learned one or the entropy rule, swappable either way
	handler http.Handler
	srv     *http.Server
	lns     []net.Listener
	admin   *metrics.Admin // nil without --admin-listen
	tracer  tracerProvider // spans (--otlp); a no-op without it

	restartc chan struct{} // closed when an installed update wants a restart

	mFeedback   *metrics.LabeledCounter // POST /v1/feedback verdicts stored, by rating
	mMigrations *metrics.LabeledCounter // uplink moves to a new network, by result (handover.go)
	netAddrs    netAddrs                // the device's addresses, watched for a network change
	shadow      *shadow.Tap             // the local engine as the dispatcher sees it: samples answers for shadow evaluation

	closeOnce sync.Once
	closeErr  error
}

// New builds an agent from a validated config: it opens the telemetry
// store, loads the local engine and the predictor, starts connecting to the
// cloud in the background, and binds the listeners (so Addr is known before
// Run). Close releases everything if Run is never called.
func New(cfg Config, log *slog.Logger) (a *Agent, err error) {
	cfg.FillDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Settings the fleet changed (desired config) apply over the flags
	// from the last run's kept copy, restart-only ones included.
	base := cfg
	startLevel := cli.LogLevel.Level().String()
	cfg = loadDeviceConfig(cfg, log)
	a = &Agent{cfg: cfg, baseCfg: base, running: cfg, startLevel: startLevel, log: log, metrics: metrics.NewRegistry()}
	built := a // a "return nil, err" below sets a to nil before this defer runs
	defer func() {
		if err != nil {
			built.Close()
			a = nil
		}
	}()
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, &cli.FieldError{Field: "DataDir", Err: err}
	}
	if a.store, err = telemetry.Open(filepath.Join(cfg.DataDir, "telemetry.db"), telemetry.Config{MaxRecords: cfg.TelemetryMax}); err != nil {
		return nil, fmt.Errorf("telemetry store: %w", err)
	}
	a.rec = newTelemetryRecorder(a.store, a.metrics)
	a.restartc = make(chan struct{})
	var restartOnce sync.Once
	if a.ota, err = ota.Open(ota.Config{
		DataDir: cfg.DataDir, Board: cfg.Board, OTAPub: cfg.OTAPub, Origins: cfg.OTAOrigins, Slot: os.Getenv(firmware.EnvSlot),
		Restart: func() { restartOnce.Do(func() { close(a.restartc) }) },
		Changed: a.publishStatus, Log: log, Link: cfg.linkPolicy(), ProbeMargin: a.probeMargin, ProbeSet: a.probeSet,
	}); err != nil {
		return nil, err
	}

	if a.engine, err = openEngine(cfg, log.With("component", "engine")); err != nil {
		return nil, err
	}
	if a.engine.templateSkipped {
		log.Warn("the model's chat template is not rendered in this build (lm_nojinja); chats use the built-in prompt format", "model", a.engine.name)
	}
	kv := a.engine.kvFaults
	if a.runner, err = local.NewRunner(a.engine.gen, local.Config{Concurrency: cfg.LocalConcurrency, QueueDepth: cfg.LocalQueue, KVFaultsPerMs: kv}); err != nil {
		return nil, err
	}
	a.shadow = shadow.NewTap(a.runner, a.store, a.metrics, log, cfg.ShadowShare, a.routerVersion)
	pred, predName, err := loadPredictor(cfg.Predictor)
	if err != nil {
		return nil, &cli.FieldError{Field: "Predictor", Err: err}
	}
	a.pred = pred
	// Router and edge models the fleet installed replace what the flags
	// name (a rollout's purpose), from the last run's kept install.
	inForce, err := a.ota.OpenArtifacts(context.Background(), ota.Targets{Router: pred, Engine: a.engine.swap, EngineConfig: a.engine.engineCfg, RouterOwn: routerSource(cfg.Predictor), ModelOwn: modelSource(cfg)})
	if err != nil {
		return nil, err
	}
	if v := inForce[firmware.KindPredictor]; v != "" {
		predName = "fleet " + v
	}
	router, err := route.NewRouter(a.routeConfig(cfg), pred)
	if err != nil {
		return nil, err
	}
	dcfg := route.DispatcherConfig{
		Router: router, Local: a.shadow, Shadow: a.shadow, Record: a.rec.record, Metrics: a.metrics, Logger: log,
		CloudFirstToken: cfg.CloudFirstToken,
		Load: func() route.Load {
			l := a.runner.Load()
			return route.Load{Waiting: l.Waiting, Running: l.Running, Capacity: l.QueueDepth, KVFaultsPerMs: l.KVFaultsPerMs}
		},
	}
	if cfg.Cloud != "" {
		tc, err := pki.DeviceTLS(cfg.PKIDir, cfg.DeviceID)
		if err != nil {
			return nil, &cli.FieldError{Field: "PKIDir", Err: err}
		}
		// Background: an agent must start, and serve locally, while the
		// cloud is unreachable; the client keeps redialling.
		if a.cloud, err = quic.Dial(context.Background(), cfg.Cloud, quic.ClientConfig{
			TLS: tc, Background: true, Logger: log.With("component", "uplink"), ResumeDeadline: cfg.ResumeDeadline,
			Backoff: quic.Backoff{Initial: min(250*time.Millisecond, cfg.CloudRetryMax), Max: cfg.CloudRetryMax},
		}); err != nil {
			return nil, &cli.FieldError{Field: "Cloud", Err: err}
		}
		dcfg.Cloud = a.cloud
		a.netAddrs = interfaceAddrs
		a.mMigrations = a.metrics.LabeledCounter("phaseless_uplink_migrations_total", "moves of the cloud connection to a new network without a new handshake, by result", "result")
		dcfg.Link = func() route.Link {
			ls := a.cloud.Link()
			return route.Link{Configured: true, Connected: ls.Connected, RTT: ls.SmoothedRTT, Loss: ls.LossRate}
		}
	}
	disp, err := route.NewDispatcher(dcfg)
	if err != nil {
		return nil, err
	}
	a.disp = disp
	if a.tracer, err = newTracer(cfg); err != nil {
		return nil, &cli.FieldError{Field: "OTLP", Err: err}
	}
	api, err := httpapi.NewHandler(traced{next: modelPin{next: disp, local: a.engine.name}, tp: a.tracer.TracerProvider()}, httpapi.Options{
		MaxOutputTokens: cfg.MaxOutputTokens,
		Models:          a.listModels,
		Logger:          log, Metrics: a.metrics,
	})
	if err != nil {
		return nil, err
	}
	if cfg.MQTT != "" {
		if a.fleet, err = a.newFleetClient(); err != nil {
			return nil, &cli.FieldError{Field: "MQTT", Err: err}
		}
	}
	a.registerGauges()
	mux := http.NewServeMux()
	metrics.Health(mux, a.metrics, a.ready)
	mux.Handle("/v1/", api)
	mux.HandleFunc("POST /v1/feedback", a.feedback)
	a.handler = localGuard(cfg).Wrap(mux)
	a.srv = cfg.HTTPLimits.Server(a.handler)
	a.srv.MaxHeaderBytes = httpapi.ServerMaxHeaderBytes

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, &cli.FieldError{Field: "Listen", Err: err}
	}
	a.lns = append(a.lns, cfg.HTTPLimits.Listener(ln))
	if cfg.Socket != "" {
		uln, err := listenUnix(cfg.Socket)
		if err != nil {
			return nil, &cli.FieldError{Field: "Socket", Err: err}
		}
		a.lns = append(a.lns, cfg.HTTPLimits.Listener(uln))
	}
	if cfg.AdminListen != "" {
		if a.admin, err = metrics.ListenAdmin(cfg.AdminListen, a.metrics, cfg.AllowHosts); err != nil {
			return nil, &cli.FieldError{Field: "AdminListen", Err: err}
		}
	}
	log.Info("agent ready", "listen", ln.Addr().String(), "socket", cfg.Socket, "engine", a.engine.name, "predictor", predName, "cloud", cfg.Cloud)
	return a, nil
}

// loadPredictor returns the router model named by --predictor: the shipped
// one by default, a file, or the entropy rule.
// routerSource and modelSource are what the agent started with, whose
// chunks an update of that kind need not fetch.
func routerSource(spec string) ota.Source {
	switch spec {
	case "entropy":
		return ota.Source{}
	case "":
		return ota.Source{Bytes: predictor.Shipped(), Name: "predictor.onnx"}
	}
	return ota.Source{Path: spec}
}

func loadPredictor(spec string) (*predictor.Swappable, string, error) {
	switch spec {
	case "entropy":
		// The rule is a Predictor like any model, behind the same Swappable,
		// so reload-predictor can replace it (and put it back).
		return predictor.NewSwappable(predictor.EntropyRule{}), "entropy rule (4.2 bits/byte)", nil
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
func (a *Agent) newFleetClient() (*fleetclient.Client, error) {
	fc := fleetclient.Config{
		BrokerURL: a.cfg.MQTT, DeviceID: a.cfg.DeviceID, Version: cli.Version, Board: a.cfg.Board,
		Store: a.store, StatePath: filepath.Join(a.cfg.DataDir, "fleet.db"), Logger: a.log, // the client names its component itself
		Slot: a.ota.Slot, Artifacts: a.ota.Artifacts, Trial: a.ota.OnTrial, RouterBound: a.routerBound, Update: a.ota.UpdateStatus, ProbeGates: a.ota.ProbeGates,
		UplinkRate: a.cfg.TelemetryRate, OnConfig: a.applyDesired,
	}
	if a.cfg.PKIDir != "" {
		tc, err := pki.DeviceTLS(a.cfg.PKIDir, a.cfg.DeviceID)
		if err != nil {
			return nil, err
		}
		fc.TLS = tc
	}
	c, err := fleetclient.New(fc)
	if err != nil {
		return nil, err
	}
	c.Handle("update", a.ota.Update)
	c.Handle("ota-commit", a.ota.Commit)
	c.Handle("ota-rollback", a.ota.Rollback)
	// The router's model is swapped in place: requests in flight finish on
	// the old one, a file that fails validation leaves the old one serving.
	c.Handle("reload-predictor", a.reloadPredictor)
	return c, nil
}

// publishStatus republishes the fleet status (artifact versions) when a
// fleet client runs.
func (a *Agent) publishStatus() {
	if a.fleet == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.fleet.PublishStatus(ctx); err != nil {
		a.log.Warn("status not republished", "err", err)
	}
}

// reloadPredictor is the fleet's "reload-predictor" command: swap the router
// model for an ONNX file on the device, or for the entropy rule ("entropy"),
// whichever the agent started with.
func (a *Agent) reloadPredictor(_ context.Context, cmd fleetwire.Command) (string, error) {
	path := cmd.Args["path"]
	switch path {
	case "":
		return "", errors.New(`argument "path" (an ONNX file on the device, or "entropy" for the 4.2-bit rule) is required`)
	case "entropy":
		if err := a.pred.SwapTo(predictor.EntropyRule{}); err != nil {
			return "", err
		}
	default:
		if a.ota.Trusted() {
			// This fleet signs its router models: an unsigned file on the
			// device would go round the manifest check.
			return "", errors.New(`this agent trusts a fleet OTA key: router models come as signed predictor bundles ("update url=…", phaselessctl ota sign --kind predictor); reload-predictor takes only path=entropy`)
		}
		if err := a.pred.Swap(path); err != nil {
			return "", err
		}
	}
	return "predictor now " + path, nil
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
	a.mFeedback = a.metrics.LabeledCounter("phaseless_agent_feedback_total", "app verdicts on answers (POST /v1/feedback) kept with the telemetry, by rating", "rating")
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
	if err := a.ota.TrialReady(); err != nil {
		return err
	}
	return a.store.Err()
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
		go func() {
			var watch sync.WaitGroup
			watch.Go(func() { a.ota.WatchCommit(fleetCtx, a.fleet.PublishStatus) })
			watch.Go(func() { a.ota.RunPending(fleetCtx) })
			watch.Go(func() { a.watchRouterBound(fleetCtx, routerBoundWatch, a.fleet.PublishStatus) })
			err := a.fleet.Run(fleetCtx)
			watch.Wait()
			fleetDone <- err
		}()
	} else {
		fleetDone <- nil
	}
	netCtx, stopNet := context.WithCancel(ctx)
	var netWatch sync.WaitGroup
	if a.cloud != nil && a.cfg.NetWatch > 0 {
		netWatch.Go(func() { a.watchNetwork(netCtx, a.cfg.NetWatch, a.netAddrs) })
	}
	// The probe gate of a trial build: /readyz fails until it has run.
	netWatch.Go(func() { a.ota.TrialGate(netCtx) })
	defer func() {
		stopNet()
		netWatch.Wait()
	}()
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
	case <-a.restartc:
		a.log.Info("restarting into the slot just installed")
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
		if a.shadow != nil {
			a.shadow.Close()
		}
		if a.store != nil {
			errs = append(errs, a.store.Close())
		}
		if a.tracer != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			errs = append(errs, a.tracer.Shutdown(ctx))
			cancel()
		}
		if a.cfg.Socket != "" && len(a.lns) > 1 {
			os.Remove(a.cfg.Socket)
		}
		a.closeErr = errors.Join(errs...)
	})
	return a.closeErr
}
