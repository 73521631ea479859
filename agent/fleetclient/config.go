package fleetclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"

	"net/url"
	"strings"
	"time"

	"github.com/phaseless/phaseless/agent/telemetry"
	"github.com/phaseless/phaseless/internal/backoff"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// Config is what a Client is built from. Zero values mean the defaults.
type Config struct {
	// BrokerURL is mqtt://host:port, or tls://host:port (also mqtts, ssl)
	// for TLS. Required.
	BrokerURL string
	// DeviceID is the MQTT client id and the {id} in every topic; with
	// TLS it is the CN of the device certificate. Required.
	DeviceID string
	Version  string        // agent version, reported in the status
	Board    string        // board profile, reported in the status
	Slot     func() string // active OTA slot, read at every status publish; nil reports none
	// Artifacts reports, at every status publish, the version of each
	// artifact kind the device runs and any update it rolled back
	// (fleet.Status.Artifacts and RolledBack); nil reports none.
	Artifacts func() (running, rolledBack map[string]string)
	// Trial reports whether the agent runs an OTA slot still on trial
	// (fleet.Status.Trial); nil reports false.
	Trial func() bool
	// RouterBound reports the state of the device's bound on wrong local
	// answers (fleetwire.Status.RouterBound); nil reports none.
	RouterBound func() string
	// Update reports the device's update download and link policy
	// (fleetwire.Status.Update); nil reports none.
	Update func() *fleetwire.UpdateStatus
	// ProbeGates reports the last probe gate of each artifact kind
	// (fleetwire.Status.ProbeGates); nil reports none.
	ProbeGates func() map[string]fleetwire.ProbeGate

	// TLS is used for tls:// brokers: RootCAs with the fleet CA and the
	// device certificate (transport/pki) in Certificates.
	TLS *tls.Config
	// Username and Password authenticate when no client certificate does.
	Username string
	Password string

	Topics fleetwire.Topics // prefix; zero means fleetwire.DefaultPrefix

	// Store is the telemetry buffer the uplink drains; nil disables the
	// uplink. The caller owns it (Run does not close it).
	Store *telemetry.Store
	// StatePath is the bbolt file for the outgoing message queue and the
	// results of executed commands. Required.
	StatePath string

	KeepAlive      time.Duration // MQTT keep-alive, default 30 s
	SessionExpiry  time.Duration // broker keeps the session this long offline, default 24 h
	ConnectTimeout time.Duration // per connection attempt, default 10 s
	BackoffMin     time.Duration // reconnect backoff base, default 500 ms
	BackoffMax     time.Duration // reconnect backoff cap, default 60 s

	// BatchSize is the most records per TelemetryBatch (default 256).
	BatchSize int
	// MaxInFlight is how many batches may await their ack (default 4).
	MaxInFlight int
	// UplinkRate caps the uplink in records per second (default 500,
	// about 150 KB/s of typical records); negative means unlimited.
	UplinkRate float64
	// AckTimeout is how long a batch waits for its TelemetryAck before
	// the uplink resends from the oldest unacknowledged record (default 15 s).
	AckTimeout time.Duration

	// OnConfig applies a desired configuration; its error is reported to
	// the cloud in ReportedConfig. nil reports every config as not applied.
	OnConfig func(ctx context.Context, c fleetwire.DesiredConfig) (restartPending []string, err error)

	Logger *slog.Logger // default slog.Default()
	Clock  Clock        // default the system clock
}

func (c *Config) fillDefaults() {
	if c.KeepAlive == 0 {
		c.KeepAlive = 30 * time.Second
	}
	if c.SessionExpiry == 0 {
		c.SessionExpiry = 24 * time.Hour
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 10 * time.Second
	}
	if c.BackoffMin == 0 {
		c.BackoffMin = 500 * time.Millisecond
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = time.Minute
	}
	if c.BatchSize == 0 {
		c.BatchSize = 256
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 4
	}
	if c.UplinkRate == 0 {
		c.UplinkRate = 500
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = 15 * time.Second
	}
	if c.Trial == nil {
		c.Trial = func() bool { return false }
	}
	if c.Artifacts == nil {
		c.Artifacts = func() (map[string]string, map[string]string) { return nil, nil }
	}
	if c.Slot == nil {
		c.Slot = func() string { return "" }
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = backoff.System{}
	}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	if c.BrokerURL == "" {
		return errors.New("fleet: BrokerURL is required")
	}
	u, err := url.Parse(c.BrokerURL)
	if err != nil {
		return fmt.Errorf("fleet: BrokerURL: %w", err)
	}
	tlsScheme := false
	switch strings.ToLower(u.Scheme) {
	case "mqtt", "tcp":
	case "tls", "ssl", "mqtts":
		tlsScheme = true
	default:
		return fmt.Errorf("fleet: BrokerURL scheme %q: want mqtt:// or tls://", u.Scheme)
	}
	if u.Host == "" {
		return fmt.Errorf("fleet: BrokerURL %q has no host", c.BrokerURL)
	}
	if c.TLS != nil && !tlsScheme {
		return fmt.Errorf("fleet: TLS is set but BrokerURL %q is not tls://", c.BrokerURL)
	}
	if err := fleetwire.ValidateDeviceID(c.DeviceID); err != nil {
		return fmt.Errorf("fleet: DeviceID: %w", err)
	}
	if cn, ok := clientCertCN(c.TLS); ok && cn != c.DeviceID {
		// The broker's ACL trusts the certificate, so a mismatch would be
		// refused on every publish; say so at startup instead.
		return fmt.Errorf("fleet: TLS client certificate is for %q, DeviceID is %q", cn, c.DeviceID)
	}
	if c.Topics.Prefix != "" && !strings.HasSuffix(c.Topics.Prefix, "/") {
		return fmt.Errorf("fleet: Topics.Prefix %q must end with /", c.Topics.Prefix)
	}
	if c.StatePath == "" {
		return errors.New("fleet: StatePath is required")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"KeepAlive", c.KeepAlive}, {"SessionExpiry", c.SessionExpiry}, {"ConnectTimeout", c.ConnectTimeout},
		{"BackoffMin", c.BackoffMin}, {"BackoffMax", c.BackoffMax}, {"AckTimeout", c.AckTimeout},
	} {
		if d.v < 0 {
			return fmt.Errorf("fleet: %s must not be negative", d.name)
		}
	}
	if c.KeepAlive > 0xffff*time.Second {
		return errors.New("fleet: KeepAlive must be at most 65535 s")
	}
	if c.SessionExpiry > 0xffffffff*time.Second {
		return errors.New("fleet: SessionExpiry is too long for MQTT")
	}
	if c.BackoffMin > 0 && c.BackoffMax > 0 && c.BackoffMax < c.BackoffMin {
		return errors.New("fleet: BackoffMax must not be below BackoffMin")
	}
	if c.BatchSize < 0 {
		return errors.New("fleet: BatchSize must not be negative")
	}
	if c.MaxInFlight < 0 {
		return errors.New("fleet: MaxInFlight must not be negative")
	}
	return nil
}

// clientCertCN returns the common name of cfg's first client certificate.
func clientCertCN(cfg *tls.Config) (string, bool) {
	if cfg == nil || len(cfg.Certificates) == 0 || len(cfg.Certificates[0].Certificate) == 0 {
		return "", false
	}
	leaf := cfg.Certificates[0].Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(cfg.Certificates[0].Certificate[0]); err != nil {
			return "", false
		}
	}
	return leaf.Subject.CommonName, true
}
