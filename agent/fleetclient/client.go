package fleetclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	bolt "go.etcd.io/bbolt"

	"github.com/phaseless/phaseless/agent/fleetclient/boltqueue"
	"github.com/phaseless/phaseless/internal/backoff"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// CommandFunc runs one command and returns its output. It should honour
// ctx, which ends when the client stops.
type CommandFunc func(ctx context.Context, cmd fleetwire.Command) (output string, err error)

// Client is the device's MQTT v5 fleet client. Build it with New, register
// command handlers with Handle, then call Run once.
type Client struct {
	cfg Config
	log *slog.Logger

	// Topic names, fixed for the device.
	tStatus, tTelemetry, tAck, tDesired, tReported, tCmd, tResult string

	mu        sync.Mutex // guards handlers, ran, cm, connected, connCh
	handlers  map[string]CommandFunc
	ran       bool
	cm        *autopaho.ConnectionManager
	connected bool
	connCh    chan struct{} // closed and replaced whenever connected changes

	// Inbound work handed from paho's callback to the workers.
	upEvents  chan struct{} // 1-buffered: a connection came up
	acks      chan fleetwire.TelemetryAck
	cmds      chan fleetwire.Command
	cfgMu     sync.Mutex // guards desired
	desired   *fleetwire.DesiredConfig
	cfgSignal chan struct{} // 1-buffered: desired changed

	stats counters
}

type counters struct {
	connects, batchesSent, recordsSent, recordsAcked, ackTimeouts atomic.Uint64
	commandsRun, commandsDeduped, configsApplied, configsFailed   atomic.Uint64
	malformed, rateWaits, publishErrors                           atomic.Uint64
}

// Stats is a snapshot of what the client has done since Run started.
type Stats struct {
	Connected       bool
	Connects        uint64 // successful connections (first one included)
	BatchesSent     uint64 // telemetry batches published (resends included)
	RecordsSent     uint64
	RecordsAcked    uint64 // records deleted from the store after a cloud ack
	AckTimeouts     uint64 // times the uplink went back to the oldest unacked record
	CommandsRun     uint64
	CommandsDeduped uint64 // repeated command ids answered from the saved result
	ConfigsApplied  uint64
	ConfigsFailed   uint64
	Malformed       uint64 // inbound messages that did not decode (acked and dropped)
	RateWaits       uint64 // times the uplink rate limit held a batch back
	PublishErrors   uint64 // telemetry publishes that failed (link down, or refused by the broker)
}

// New validates cfg and builds a client; it does no I/O.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.fillDefaults()
	t, id := cfg.Topics, cfg.DeviceID
	return &Client{
		cfg:        cfg,
		log:        cfg.Logger.With("component", "fleet", "device", id),
		tStatus:    t.Device(id, fleetwire.SuffixStatus),
		tTelemetry: t.Device(id, fleetwire.SuffixTelemetry),
		tAck:       t.Device(id, fleetwire.SuffixTelemetryAck),
		tDesired:   t.Device(id, fleetwire.SuffixConfigDesired),
		tReported:  t.Device(id, fleetwire.SuffixConfigReported),
		tCmd:       t.Device(id, fleetwire.SuffixCmd),
		tResult:    t.Device(id, fleetwire.SuffixCmdResult),
		handlers:   map[string]CommandFunc{},
		connCh:     make(chan struct{}),
		upEvents:   make(chan struct{}, 1),
		acks:       make(chan fleetwire.TelemetryAck, 64),
		cmds:       make(chan fleetwire.Command, 64),
		cfgSignal:  make(chan struct{}, 1),
	}, nil
}

// Handle registers fn for commands named name, replacing any earlier one.
// Commands without a handler get an error result.
func (c *Client) Handle(name string, fn CommandFunc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.handlers[name] = fn
}

// Connected reports whether the MQTT connection is up.
func (c *Client) Connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.connected
}

// connState returns the connection state and a channel closed when it
// next changes.
func (c *Client) connState() (bool, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.connected, c.connCh
}

func (c *Client) setConnected(up bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.connected = up
	close(c.connCh)
	c.connCh = make(chan struct{})
}

// Stats returns a snapshot of the counters.
func (c *Client) Stats() Stats {
	s := &c.stats
	return Stats{
		Connected: c.Connected(), Connects: s.connects.Load(),
		BatchesSent: s.batchesSent.Load(), RecordsSent: s.recordsSent.Load(), RecordsAcked: s.recordsAcked.Load(),
		AckTimeouts: s.ackTimeouts.Load(), CommandsRun: s.commandsRun.Load(), CommandsDeduped: s.commandsDeduped.Load(),
		ConfigsApplied: s.configsApplied.Load(), ConfigsFailed: s.configsFailed.Load(), Malformed: s.malformed.Load(), RateWaits: s.rateWaits.Load(), PublishErrors: s.publishErrors.Load(),
	}
}

func (c *Client) status(state string) []byte {
	running, rolledBack := c.cfg.Artifacts()
	bound := ""
	if c.cfg.RouterBound != nil {
		bound = c.cfg.RouterBound()
	}
	st := fleetwire.Status{
		DeviceID: c.cfg.DeviceID, State: state, Version: c.cfg.Version,
		Slot: c.cfg.Slot(), Board: c.cfg.Board, Artifacts: running, RolledBack: rolledBack, Trial: c.cfg.Trial(),
		RouterBound: bound, Time: c.cfg.Clock.Now().UTC(),
	}
	if c.cfg.Update != nil {
		st.Update = c.cfg.Update()
	}
	if c.cfg.ProbeGates != nil {
		st.ProbeGates = c.cfg.ProbeGates()
	}
	b, _ := json.Marshal(st)
	return b
}

// Run connects, keeps the connection up and serves the fleet protocol until
// ctx ends; then it publishes status offline, disconnects and returns nil.
// It returns an error only if it cannot start. Run may be called once.
func (c *Client) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.ran {
		c.mu.Unlock()
		return errors.New("fleet: Run called twice")
	}
	c.ran = true
	c.mu.Unlock()

	db, err := bolt.Open(c.cfg.StatePath, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return fmt.Errorf("fleet: open state %s: %w", c.cfg.StatePath, err)
	}
	defer db.Close()
	q, err := boltqueue.New(db, "outbox", boltqueue.Config{
		OnCorrupt: func(id uint64, err error) { c.log.Warn("dropped corrupt queued message", "id", id, "err", err) },
	})
	if err != nil {
		return err
	}
	defer q.Close()
	results, err := newResultStore(db)
	if err != nil {
		return err
	}

	workCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	cm, err := autopaho.NewConnection(context.WithoutCancel(ctx), c.pahoConfig(workCtx, q))
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	c.mu.Lock()
	c.cm = cm
	c.mu.Unlock()

	var wg sync.WaitGroup
	wg.Go(func() { c.sessionLoop(workCtx, cm) })
	wg.Go(func() { c.configLoop(workCtx, cm) })
	wg.Go(func() { c.commandLoop(workCtx, cm, results) })
	if c.cfg.Store != nil {
		wg.Go(func() { c.uplinkLoop(workCtx, cm) })
	}
	<-ctx.Done()
	stopWork()
	wg.Wait()

	// Say goodbye explicitly: a clean DISCONNECT suppresses the will.
	if c.Connected() {
		pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if _, err := cm.Publish(pctx, &paho.Publish{Topic: c.tStatus, QoS: 1, Retain: true, Payload: c.status("offline")}); err != nil {
			c.log.Warn("publish offline status", "err", err)
		}
		cancel()
	}
	dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cm.Disconnect(dctx); err != nil {
		c.log.Warn("disconnect", "err", err)
	}
	return nil
}

func (c *Client) pahoConfig(workCtx context.Context, q *boltqueue.Queue) autopaho.ClientConfig {
	u, _ := url.Parse(c.cfg.BrokerURL) // validated in New
	willDelay := uint32(0)
	cfg := autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{u},
		TlsCfg:                        c.cfg.TLS,
		KeepAlive:                     uint16(c.cfg.KeepAlive / time.Second),
		CleanStartOnInitialConnection: false,
		SessionExpiryInterval:         uint32(c.cfg.SessionExpiry / time.Second),
		ReconnectBackoff:              jitteredBackoff(c.cfg.BackoffMin, c.cfg.BackoffMax, backoff.Rand),
		ConnectTimeout:                c.cfg.ConnectTimeout,
		Queue:                         q,
		ConnectUsername:               c.cfg.Username,
		ConnectPassword:               []byte(c.cfg.Password),
		WillMessage:                   &paho.WillMessage{Topic: c.tStatus, QoS: 1, Retain: true},
		WillProperties:                &paho.WillProperties{WillDelayInterval: &willDelay},
		// Rebuild the will at every connect so it carries the slot and the
		// time of the connection it covers.
		ConnectPacketBuilder: func(cp *paho.Connect, _ *url.URL) (*paho.Connect, error) {
			cp.WillMessage.Payload = c.status("offline")
			return cp, nil
		},
		OnConnectionUp: func(_ *autopaho.ConnectionManager, ack *paho.Connack) {
			c.stats.connects.Add(1)
			c.log.Info("connected", "broker", c.cfg.BrokerURL, "session_present", ack.SessionPresent)
			c.setConnected(true)
			select { // must not block: the session loop subscribes and says online
			case c.upEvents <- struct{}{}:
			default:
			}
		},
		OnConnectionDown: func() bool {
			c.log.Info("connection lost")
			c.setConnected(false)
			return true
		},
		OnConnectError: func(err error) { c.log.Debug("connect failed", "err", err) },
		ClientConfig: paho.ClientConfig{
			ClientID: c.cfg.DeviceID,
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){
				func(pr paho.PublishReceived) (bool, error) { return c.onPublish(workCtx, pr.Packet), nil },
			},
			OnClientError: func(err error) { c.log.Debug("client error", "err", err) },
		},
	}
	return cfg
}

// sessionLoop (re)subscribes and publishes status online after every
// connect. Subscribing again is harmless when the broker kept the session,
// and needed when it did not (a restarted broker without persistence).
func (c *Client) sessionLoop(ctx context.Context, cm *autopaho.ConnectionManager) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.upEvents:
		}
		sctx, cancel := context.WithTimeout(ctx, c.cfg.ConnectTimeout)
		_, err := cm.Subscribe(sctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{
			{Topic: c.tDesired, QoS: 1},
			{Topic: c.tCmd, QoS: 1},
			{Topic: c.tAck, QoS: 1},
		}})
		if err == nil {
			_, err = cm.Publish(sctx, &paho.Publish{Topic: c.tStatus, QoS: 1, Retain: true, Payload: c.status("online")})
		}
		cancel()
		if err != nil && ctx.Err() == nil {
			c.log.Warn("subscribe or status online failed; retried at next connect", "err", err)
		}
	}
}

// PublishStatus publishes the online status again now, e.g. after an OTA
// slot switch. It fails if the connection is down (the next connect
// publishes a fresh status anyway).
func (c *Client) PublishStatus(ctx context.Context) error {
	c.mu.Lock()
	cm := c.cm
	c.mu.Unlock()
	if cm == nil {
		return errors.New("fleet: not running")
	}
	_, err := cm.Publish(ctx, &paho.Publish{Topic: c.tStatus, QoS: 1, Retain: true, Payload: c.status("online")})
	return err
}

// onPublish routes an inbound message to its worker. It returns true
// (handled) even for malformed payloads: the broker must not redeliver a
// message that can never decode.
func (c *Client) onPublish(ctx context.Context, p *paho.Publish) bool {
	in, err := decodeInbound(c.cfg.Topics, c.cfg.DeviceID, p.Topic, p.Payload)
	if err != nil {
		c.stats.malformed.Add(1)
		c.log.Warn("dropped inbound message", "topic", p.Topic, "err", err)
		return true
	}
	switch {
	case in.desired != nil:
		c.cfgMu.Lock()
		newer := c.desired == nil || in.desired.Version >= c.desired.Version
		if newer {
			c.desired = in.desired
		}
		c.cfgMu.Unlock()
		if !newer {
			c.log.Warn("ignored stale desired config", "version", in.desired.Version)
			break
		}
		select {
		case c.cfgSignal <- struct{}{}:
		default:
		}
	case in.cmd != nil:
		// Blocking here holds back the PUBACK: backpressure on the cloud.
		select {
		case c.cmds <- *in.cmd:
		case <-ctx.Done():
		}
	case in.ack != nil:
		select {
		case c.acks <- *in.ack:
		default: // a lost ack only delays deletion until the batch is resent
			c.log.Warn("telemetry ack dropped: uplink busy", "batch", in.ack.BatchID)
		}
	}
	return true
}

// inbound is one decoded message from the cloud; exactly one field is set.
type inbound struct {
	desired *fleetwire.DesiredConfig
	cmd     *fleetwire.Command
	ack     *fleetwire.TelemetryAck
}

// decodeInbound checks that topic belongs to this device and decodes its
// payload. It is the device's only decoder of bytes from the network.
func decodeInbound(t fleetwire.Topics, deviceID, topic string, payload []byte) (inbound, error) {
	id, suffix, ok := t.ParseDevice(topic)
	if !ok || id != deviceID {
		return inbound{}, fmt.Errorf("topic %q is not this device's", topic)
	}
	var in inbound
	var err error
	switch suffix {
	case fleetwire.SuffixConfigDesired:
		in.desired = new(fleetwire.DesiredConfig)
		err = json.Unmarshal(payload, in.desired)
	case fleetwire.SuffixCmd:
		in.cmd = new(fleetwire.Command)
		if err = json.Unmarshal(payload, in.cmd); err == nil && in.cmd.ID == "" {
			err = errors.New("command without id")
		}
	case fleetwire.SuffixTelemetryAck:
		in.ack = new(fleetwire.TelemetryAck)
		if err = json.Unmarshal(payload, in.ack); err == nil && in.ack.BatchID == "" {
			err = errors.New("ack without batch id")
		}
	default:
		return inbound{}, fmt.Errorf("unexpected topic suffix %q", suffix)
	}
	if err != nil {
		return inbound{}, fmt.Errorf("%s: %w", suffix, err)
	}
	return in, nil
}

// enqueue publishes through the durable queue: the message survives a
// restart and goes out, in order, when the link is up.
func (c *Client) enqueue(ctx context.Context, cm *autopaho.ConnectionManager, topic string, retain bool, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return cm.PublishViaQueue(ctx, &autopaho.QueuePublish{Publish: &paho.Publish{Topic: topic, QoS: 1, Retain: retain, Payload: b}})
}

// configLoop applies the newest desired config and reports the outcome.
// Configs arriving while one is applied coalesce: only the newest runs.
func (c *Client) configLoop(ctx context.Context, cm *autopaho.ConnectionManager) {
	var applied uint64
	var appliedOK, haveApplied bool
	var last fleetwire.ReportedConfig // the report of the applied version
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.cfgSignal:
		}
		c.cfgMu.Lock()
		d := c.desired
		c.cfgMu.Unlock()
		if d == nil {
			continue
		}
		switch {
		case haveApplied && d.Version < applied:
			c.log.Warn("ignored stale desired config", "version", d.Version, "applied", applied)
			continue
		case haveApplied && d.Version == applied && appliedOK:
			// Redelivered (every resubscribe sends the retained config):
			// report again without re-applying, in case the broker lost
			// the retained report.
		default:
			var err error
			var restart []string
			if c.cfg.OnConfig == nil {
				err = errors.New("device has no config handler")
			} else {
				restart, err = c.cfg.OnConfig(ctx, *d)
			}
			applied, appliedOK, haveApplied = d.Version, err == nil, true
			rep := fleetwire.ReportedConfig{Version: d.Version, Applied: err == nil, RestartPending: restart}
			last = rep
			if err != nil {
				rep.Error = err.Error()
				c.stats.configsFailed.Add(1)
				c.log.Warn("config not applied", "version", d.Version, "err", err)
			} else {
				c.stats.configsApplied.Add(1)
				c.log.Info("config applied", "version", d.Version)
			}
			if err := c.enqueue(ctx, cm, c.tReported, true, rep); err != nil {
				c.log.Error("queue config report", "err", err)
			}
			continue
		}
		if err := c.enqueue(ctx, cm, c.tReported, true, last); err != nil {
			c.log.Error("queue config report", "err", err)
		}
	}
}
