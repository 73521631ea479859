package broker

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/phaseless/phaseless/cloud/fleet/internal/gate"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/internal/mochilisten"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// Config configures the embedded broker. The zero value plus a password file
// (or DevAuth) is a working broker on :1883 without persistence.
type Config struct {
	// TCPAddr is the plain MQTT listener (username/password). Default ":1883"
	// when neither TCPAddr nor TLS is set; empty with TLS set means TLS only.
	TCPAddr string
	// TLSAddr is the MQTT-over-TLS listener, default ":8883" when TLS is set.
	TLSAddr string
	// TLS is the server side of the fleet PKI (certificate plus ClientCAs);
	// client certificates are verified when given, and their CN is the
	// device id. ClientAuth NoClientCert is raised to VerifyClientCertIfGiven.
	TLS *tls.Config

	// PasswordFile is a Mosquitto password_file (username = device id, or an
	// admin). Passwords, if set, is used instead (tests, generated setups).
	PasswordFile string
	Passwords    *Passwords
	// Admins are usernames that may publish and subscribe anywhere (a second
	// cloud replica, operator tools). They authenticate by password only.
	Admins []string
	// DevAuth admits any client whose client id is a valid device id without
	// credentials (the cloud's --dev mode); the ACL still applies.
	DevAuth bool
	// Revoked, when set, refuses devices on the fleet's deny list at
	// connect and in the ACL (pki.DenyList.Revoked); DisconnectDevice
	// closes one that is connected.
	Revoked func(deviceID string) bool

	// StorePath is the bbolt file for sessions, inflight and retained
	// messages; empty keeps them in memory only.
	StorePath string
	// Prefix is the topic prefix (default fleetwire.DefaultPrefix).
	Prefix string
	// MaxPacketBytes bounds one MQTT packet (default 4 MiB): a telemetry
	// batch must fit.
	MaxPacketBytes uint32
	// MaxSessionExpirySeconds caps how long a disconnected device's session
	// (subscriptions, queued QoS 1 messages) is kept (default 30 days).
	MaxSessionExpirySeconds uint32
	// MessageExpirySeconds is how long a queued message waits for an offline
	// client (default 7 days; mochi's own default is one day).
	MessageExpirySeconds int64
	// ClientQueue bounds the packets waiting to be written to one client
	// (default 128). mochi allocates the whole queue, 8 bytes a packet, for
	// every connected device when it connects: mochi's default, 8,192, was
	// a 64 KiB channel, a third of an idle device's memory (issue 37).
	// The fleet sends a device little at once: acks to the batches it has
	// in flight (the agent's MaxInFlight, 4), its retained config, at most
	// fleet.Config.MaxCommandsPerDevice (100) commands; 128 holds all of
	// them. A packet that does not fit is dropped and counted (mochi takes
	// a QoS 1 one back out of the session's inflight too), and the fleet
	// re-sends all of these (device retries, reconcile).
	ClientQueue int32
	// ReadBufferBytes is the read buffer mochi allocates per connection
	// when it connects (default 256; mochi's own default is 2 KiB, issue
	// 37). It only batches small reads: a packet larger than the buffer is
	// read straight into the packet's own slice, so it bounds nothing
	// (MaxPacketBytes does). An idle device's packets (PINGREQ, PUBACK) are
	// a few bytes; 256 keeps a status or a subscribe to one read.
	ReadBufferBytes int

	Logger  *slog.Logger
	Metrics *metrics.Registry
}

func (c *Config) fillDefaults() {
	if c.TCPAddr == "" && c.TLS == nil {
		c.TCPAddr = ":1883"
	}
	if c.TLS != nil && c.TLSAddr == "" {
		c.TLSAddr = ":8883"
	}
	if c.Prefix == "" {
		c.Prefix = fleetwire.DefaultPrefix
	}
	if c.MaxPacketBytes == 0 {
		c.MaxPacketBytes = 4 << 20
	}
	if c.MaxSessionExpirySeconds == 0 {
		c.MaxSessionExpirySeconds = 30 * 24 * 3600
	}
	if c.MessageExpirySeconds == 0 {
		c.MessageExpirySeconds = 7 * 24 * 3600
	}
	if c.ClientQueue == 0 {
		c.ClientQueue = 128
	}
	if c.ReadBufferBytes == 0 {
		c.ReadBufferBytes = 256
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Metrics == nil {
		c.Metrics = metrics.NewRegistry()
	}
}

// Validate reports the first bad field by its Go name; the binary that
// fills the Config knows which of its settings that came from.
func (c *Config) Validate() error {
	if c.ClientQueue < 0 {
		return &cli.FieldError{Field: "ClientQueue", Err: fmt.Errorf("%d: must be positive (0 for the default)", c.ClientQueue)}
	}
	if c.ReadBufferBytes < 0 {
		return &cli.FieldError{Field: "ReadBufferBytes", Err: fmt.Errorf("%d: must be positive (0 for the default)", c.ReadBufferBytes)}
	}
	for _, f := range []struct{ name, addr string }{{"TCPAddr", c.TCPAddr}, {"TLSAddr", c.TLSAddr}} {
		if f.addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(f.addr); err != nil {
			return &cli.FieldError{Field: f.name, Err: err}
		}
	}
	if c.TCPAddr == "" && c.TLSAddr == "" {
		return &cli.FieldError{Field: "TCPAddr", Err: errors.New("no listener: set a TCP address or TLS")}
	}
	if c.TLSAddr != "" && c.TLS == nil {
		return &cli.FieldError{Field: "TLS", Err: errors.New("a TLS listener needs a server certificate")}
	}
	if c.TLS != nil && len(c.TLS.Certificates) == 0 && c.TLS.GetCertificate == nil {
		return &cli.FieldError{Field: "TLS", Err: errors.New("no server certificate")}
	}
	if !c.DevAuth && c.PasswordFile == "" && c.Passwords == nil && c.TLS == nil {
		return &cli.FieldError{Field: "PasswordFile", Err: errors.New("no way to authenticate devices: give a password file, TLS with client certificates, or DevAuth")}
	}
	if c.PasswordFile != "" && c.Passwords != nil {
		return &cli.FieldError{Field: "PasswordFile", Err: errors.New("set PasswordFile or Passwords, not both")}
	}
	for _, a := range c.Admins {
		if a == "" {
			return &cli.FieldError{Field: "Admins", Err: errors.New("empty admin name")}
		}
	}
	if c.Prefix != "" && c.Prefix[len(c.Prefix)-1] != '/' {
		return &cli.FieldError{Field: "Prefix", Err: fmt.Errorf("%q must end with /", c.Prefix)}
	}
	return nil
}

// Broker is a running embedded broker.
type Broker struct {
	srv     *mqtt.Server
	tcp     *mochilisten.Listener
	tls     *mochilisten.Listener
	store   *storeHook
	nextSub atomic.Int64

	closeOnce sync.Once
	closeErr  error
}

// Start validates cfg, restores the store and starts serving.
func Start(cfg Config) (*Broker, error) {
	cfg.fillDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pw := cfg.Passwords
	if cfg.PasswordFile != "" {
		var err error
		if pw, err = LoadPasswords(cfg.PasswordFile); err != nil {
			return nil, &cli.FieldError{Field: "PasswordFile", Err: err}
		}
	}
	caps := mqtt.NewDefaultServerCapabilities()
	caps.MaximumPacketSize = cfg.MaxPacketBytes
	caps.MaximumSessionExpiryInterval = cfg.MaxSessionExpirySeconds
	caps.MaximumMessageExpiryInterval = cfg.MessageExpirySeconds
	// The fleet scheme uses QoS 1 only; QoS 2 adds round trips and state.
	caps.MaximumQos = 1
	caps.MaximumClientWritesPending = cfg.ClientQueue
	srv := mqtt.New(&mqtt.Options{
		InlineClient:            true,
		Capabilities:            caps,
		ClientNetReadBufferSize: cfg.ReadBufferBytes,
		Logger:                  cfg.Logger.With("component", "mqtt-broker"),
		// $SYS topics are statistics nobody here reads; once a minute keeps
		// their cost negligible.
		SysTopicResendInterval: 60,
	})
	b := &Broker{srv: srv}

	admins := map[string]bool{}
	for _, a := range cfg.Admins {
		admins[a] = true
	}
	auth := &authHook{
		topics:     fleetwire.Topics{Prefix: cfg.Prefix},
		passwords:  pw,
		admins:     admins,
		devAuth:    cfg.DevAuth,
		revoked:    cfg.Revoked,
		log:        cfg.Logger,
		authFail:   cfg.Metrics.LabeledCounter("phaseless_fleet_broker_auth_failures_total", "MQTT connections refused, by reason", "reason"),
		aclDenied:  cfg.Metrics.LabeledCounter("phaseless_fleet_broker_acl_denied_total", "MQTT publishes or subscriptions refused by the fleet ACL", "direction"),
		pubRefused: cfg.Metrics.LabeledCounter("phaseless_fleet_broker_publish_refused_total", "Device publishes to an allowed topic refused for their retain flag or size (fleetwire.DeviceWrites)", "reason"),
	}
	if err := srv.AddHook(auth, nil); err != nil {
		return nil, err
	}
	if cfg.StorePath != "" {
		st, err := openStore(cfg.StorePath, cfg.Logger, cfg.Metrics)
		if err != nil {
			return nil, err
		}
		b.store = st
		if err := srv.AddHook(st, nil); err != nil {
			st.db.Close()
			return nil, err
		}
	}
	fail := func(err error) (*Broker, error) {
		if b.tcp != nil {
			b.tcp.Close(nil)
		}
		if b.tls != nil {
			b.tls.Close(nil)
		}
		if b.store != nil {
			b.store.db.Close()
		}
		return nil, err
	}
	if cfg.TCPAddr != "" {
		ln, err := net.Listen("tcp", cfg.TCPAddr)
		if err != nil {
			return fail(&cli.FieldError{Field: "TCPAddr", Err: err})
		}
		b.tcp = mochilisten.New(srv, "tcp", ln)
		if err := srv.AddListener(b.tcp); err != nil {
			return fail(err)
		}
	}
	if cfg.TLSAddr != "" {
		tc := cfg.TLS.Clone()
		if tc.ClientAuth == tls.NoClientCert {
			tc.ClientAuth = tls.VerifyClientCertIfGiven
		}
		if tc.MinVersion < tls.VersionTLS12 {
			tc.MinVersion = tls.VersionTLS12
		}
		ln, err := tls.Listen("tcp", cfg.TLSAddr, tc)
		if err != nil {
			return fail(&cli.FieldError{Field: "TLSAddr", Err: err})
		}
		b.tls = mochilisten.New(srv, "tls", ln)
		if err := srv.AddListener(b.tls); err != nil {
			return fail(err)
		}
	}
	cfg.Metrics.GaugeFunc("phaseless_fleet_broker_clients_connected", "MQTT clients connected to the embedded broker",
		func() float64 { return float64(atomic.LoadInt64(&srv.Info.ClientsConnected)) })
	if err := srv.Serve(); err != nil {
		srv.Close()
		return nil, fmt.Errorf("start MQTT broker: %w", err)
	}
	if b.store != nil {
		n, err := b.store.replayJournal(srv)
		if err != nil {
			srv.Close()
			return nil, err
		}
		if n > 0 {
			cfg.Logger.Info("broker store: routed publishes a crash had cut off", "messages", n)
		}
	}
	return b, nil
}

// TCPAddr is the bound plain listener address ("" when there is none).
func (b *Broker) TCPAddr() string {
	if b.tcp == nil {
		return ""
	}
	return b.tcp.Address()
}

// TLSAddr is the bound TLS listener address ("" when there is none).
func (b *Broker) TLSAddr() string {
	if b.tls == nil {
		return ""
	}
	return b.tls.Address()
}

// Connected is the number of connected clients.
func (b *Broker) Connected() int { return int(atomic.LoadInt64(&b.srv.Info.ClientsConnected)) }

// Publish sends a QoS 1 message from the cloud (no ACL applies). Offline
// subscribers with persistent sessions get it queued.
func (b *Broker) Publish(topic string, payload []byte, retain bool) error {
	return b.srv.Publish(topic, payload, retain, 1)
}

// Subscribe calls fn for every message matching filter, including retained
// ones at once. fn runs on the publishing client's goroutine, so a slow fn
// slows only that client. The returned cancel removes the subscription and
// waits for calls in progress to return.
func (b *Broker) Subscribe(filter string, fn func(topic string, payload []byte)) (cancel func(), err error) {
	id := int(b.nextSub.Add(1))
	g := &gate.Gate{}
	err = b.srv.Subscribe(filter, id, func(_ *mqtt.Client, _ packets.Subscription, pk packets.Packet) {
		if !g.Enter() {
			return
		}
		defer g.Leave()
		fn(pk.TopicName, pk.Payload)
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", filter, err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = b.srv.Unsubscribe(filter, id)
			g.Close()
		})
	}, nil
}

// Close disconnects every client, stops the listeners and closes the store.
// Sessions with an expiry survive in the store for the next Start.
func (b *Broker) Close() error {
	b.closeOnce.Do(func() {
		b.closeErr = b.srv.Close()
	})
	return b.closeErr
}
