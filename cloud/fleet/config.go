package fleet

import (
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// Config configures a Manager. Exactly one of Broker and External is set.
type Config struct {
	// DataDir holds fleet.db (registry, telemetry, commands) and the
	// uploaded artifacts. Required.
	DataDir string
	// DB, when set, is a PostgreSQL URL (postgres://…) the fleet state is
	// kept in instead of fleet.db. Managers on one database run side by
	// side, each serving the admin API: they split device messages through
	// shared subscriptions (SharedGroup) and claim rollout steps with row
	// locks, so no Lease is used. DataDir still holds the artifacts, which
	// every manager serves: point them at one shared directory.
	DB string
	// Broker is the embedded broker to work through (in process, no ACL).
	Broker *broker.Broker
	// External is an external MQTT v5 broker to connect to as a client.
	External *External
	// Prefix is the topic prefix (default transport/fleetwire DefaultPrefix).
	Prefix string

	// MaxRecords bounds stored telemetry records (default 1,000,000); the
	// oldest ingested go first and are counted.
	MaxRecords int
	// MaxAge deletes records ingested longer ago (default 30 days).
	MaxAge time.Duration
	// ArchiveDir, when set, keeps telemetry past the store (package
	// archive): a record moves to an hourly Parquet file there once its
	// ingest hour ended ArchiveAfter ago (default 10 minutes), or earlier
	// while the store holds more than MaxRecords. MaxAge and
	// ArchiveMaxBytes then bound the files, and the store deletes only past
	// twice MaxRecords (moves failing or behind: counted as deleted, logged).
	ArchiveDir      string
	ArchiveAfter    time.Duration
	ArchiveMaxBytes int64
	// PruneInterval is how often age retention runs besides at ingest
	// (default 1 minute).
	PruneInterval time.Duration
	// MaxCommandsPerDevice bounds the command history kept per device
	// (default 100); the oldest finished ones go first.
	MaxCommandsPerDevice int
	// PublishTimeout bounds one publish to an external broker (default 10 s).
	PublishTimeout time.Duration
	// MaxPayloadBytes rejects larger messages before decoding (default 8 MiB).
	MaxPayloadBytes int

	// PublicURL is the cloud's HTTP base URL as devices reach it
	// (http://host:8080): rollouts send devices PublicURL/v1/fleet/artifacts/ID.
	PublicURL string
	// OTAPub, when set, is the fleet's OTA key: uploaded artifacts must be
	// signed with it, as devices require.
	OTAPub ed25519.PublicKey
	// RolloutInterval is how often rollouts are stepped besides after
	// device messages (default 2 s).
	RolloutInterval time.Duration

	// Lease, when set, makes this Manager the fleet's single writer
	// (lease.go): Open fails while another holds it, and rollouts, commands
	// and config changes stop if it is lost.
	Lease Lease
	// live, set by a Standby, is the Manager in force now: the metrics
	// registered by the first Manager it opened read through it.
	live *atomic.Pointer[Manager]

	// Shadow, when set, grades devices' shadow samples (shadow.go): the
	// cloud's own generator (the coordinator) answers each sampled request.
	Shadow llm.Generator
	// ShadowWorkers grade at once (default 2); ShadowQueue bounds samples
	// waiting (default 256, more are dropped and counted); ShadowTimeout
	// bounds one cloud answer (default 2 minutes).
	ShadowWorkers int
	ShadowQueue   int
	ShadowTimeout time.Duration

	// Now is the clock (default time.Now); tests inject one for retention.
	Now     func() time.Time
	Logger  *slog.Logger
	Metrics *metrics.Registry
}

// External is how the Manager reaches an external broker. The broker must
// let this user read and write everything under the prefix (Mosquitto:
// "user phaseless-cloud" + "topic readwrite phaseless/#").
type External struct {
	// URL is mqtt://host:1883, mqtts://host:8883 (or tls://), ws:// or wss://.
	URL      string
	Username string
	Password string
	// ClientID is the Manager's MQTT client id (default "phaseless-cloud").
	// It must be stable: the broker keeps this id's session (subscriptions
	// and queued telemetry) while the cloud is down.
	ClientID string
	// SessionExpiry is how long the broker keeps that session (default 7 days).
	SessionExpiry time.Duration
	// TLS for mqtts:// (RootCAs, and a client certificate if the broker wants one).
	TLS *tls.Config
	// KeepAlive in seconds (default 30).
	KeepAlive uint16
	// Workers handle the broker's messages (default 4×GOMAXPROCS, at least
	// 64). paho hands them over one at a time; handled on its goroutine,
	// each telemetry batch waited out bbolt's batch window alone, which
	// capped ingest near 235 batches/s whatever the cores (issue 37). A
	// worker spends its time waiting on a commit, not on a core, so the
	// count follows the commit latency: three quarters of 8 workers at
	// about 7 ms a commit held ingest near 900 batches/s on 2 cores
	// (docs/fleet-cloud.md, "Fleet load").
	// 1 handles them in arrival order as before: a baseline, not a mode.
	Workers int
	// DynamicSecurity says the broker is a Mosquitto running its dynamic
	// security plugin and Username holds the plugin's admin role: a device
	// revoked with phaselessctl pki revoke is then disabled there
	// (RevokeOnBroker), which closes its connections and refuses it.
	DynamicSecurity bool
}

func (c *Config) fillDefaults() {
	if c.Prefix == "" {
		c.Prefix = fleetwire.DefaultPrefix
	}
	if c.MaxRecords == 0 {
		c.MaxRecords = 1_000_000
	}
	if c.MaxAge == 0 {
		c.MaxAge = 30 * 24 * time.Hour
	}
	if c.ArchiveAfter == 0 {
		c.ArchiveAfter = 10 * time.Minute
	}
	if c.PruneInterval == 0 {
		c.PruneInterval = time.Minute
	}
	if c.MaxCommandsPerDevice == 0 {
		c.MaxCommandsPerDevice = 100
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = 10 * time.Second
	}
	if c.MaxPayloadBytes == 0 {
		c.MaxPayloadBytes = 8 << 20
	}
	if c.RolloutInterval == 0 {
		c.RolloutInterval = 2 * time.Second
	}
	if c.ShadowWorkers == 0 {
		c.ShadowWorkers = 2
	}
	if c.ShadowQueue == 0 {
		c.ShadowQueue = 256
	}
	if c.ShadowTimeout == 0 {
		c.ShadowTimeout = 2 * time.Minute
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Metrics == nil {
		c.Metrics = metrics.NewRegistry()
	}
	if e := c.External; e != nil {
		if e.ClientID == "" {
			e.ClientID = "phaseless-cloud"
		}
		if e.Workers == 0 {
			e.Workers = max(64, 4*runtime.GOMAXPROCS(0))
		}
		if e.SessionExpiry == 0 {
			e.SessionExpiry = 7 * 24 * time.Hour
			if c.DB != "" {
				// In a shared-subscription group the broker keeps sending
				// a share to a session whose manager is gone until the
				// session expires; the devices resend what was not
				// acknowledged, to the managers still there.
				e.SessionExpiry = sharedSessionExpiry
			}
		}
		if e.KeepAlive == 0 {
			e.KeepAlive = 30
		}
	}
}

// sharedSessionExpiry is the MQTT session expiry of a manager on
// PostgreSQL (Config.DB): long enough to ride out a restart, short enough
// that a manager gone for good stops taking a share of the messages.
const sharedSessionExpiry = 2 * time.Minute

// Validate reports the first bad field.
func (c *Config) Validate() error {
	if c.DataDir == "" {
		return &cli.FieldError{Field: "DataDir", Err: errors.New("required")}
	}
	if (c.Broker == nil) == (c.External == nil) {
		return &cli.FieldError{Field: "External", Err: errors.New("exactly one of an embedded broker and an external broker URL")}
	}
	if e := c.External; e != nil {
		u, err := url.Parse(e.URL)
		if err != nil || u.Host == "" {
			return &cli.FieldError{Field: "External", Err: fmt.Errorf("%q is not a broker URL like mqtt://host:1883", e.URL)}
		}
		switch u.Scheme {
		case "mqtt", "tcp", "mqtts", "tls", "ssl", "ws", "wss":
		default:
			return &cli.FieldError{Field: "External", Err: fmt.Errorf("scheme %q: want mqtt, mqtts, tls, ws or wss", u.Scheme)}
		}
		if e.Workers < 0 {
			return &cli.FieldError{Field: "External.Workers", Err: fmt.Errorf("%d: must be positive (0 for the default)", e.Workers)}
		}
		if e.SessionExpiry < time.Second || e.SessionExpiry > (1<<32-1)*time.Second {
			return &cli.FieldError{Field: "External.SessionExpiry", Err: errors.New("must be between 1s and 136 years")}
		}
	}
	if c.Prefix[len(c.Prefix)-1] != '/' {
		return &cli.FieldError{Field: "Prefix", Err: fmt.Errorf("%q must end with /", c.Prefix)}
	}
	if c.DB != "" {
		switch {
		case c.Lease != nil:
			return &cli.FieldError{Field: "Lease", Err: errors.New("managers on PostgreSQL run side by side: the single-writer lease is for the bbolt store only")}
		case c.ArchiveDir != "":
			return &cli.FieldError{Field: "ArchiveDir", Err: errArchiveNeedsBolt}
		}
	}
	if c.MaxRecords < 1 {
		return &cli.FieldError{Field: "MaxRecords", Err: errors.New("must be at least 1")}
	}
	if c.ArchiveAfter < 0 || c.ArchiveMaxBytes < 0 {
		return &cli.FieldError{Field: "ArchiveAfter/ArchiveMaxBytes", Err: errors.New("must not be negative")}
	}
	if c.MaxAge < 0 {
		return &cli.FieldError{Field: "MaxAge", Err: errors.New("must not be negative")}
	}
	if c.MaxCommandsPerDevice < 1 {
		return &cli.FieldError{Field: "MaxCommandsPerDevice", Err: errors.New("must be at least 1")}
	}
	return nil
}
