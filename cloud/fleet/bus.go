package fleet

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/internal/metrics"
)

// bus is how the Manager reaches devices: the embedded broker in process or
// an external broker as an MQTT client. Subscriptions are fixed at
// construction; deliver may run on many goroutines at once.
type bus interface {
	// publish sends a QoS 1 message and waits until the broker has it.
	publish(ctx context.Context, topic string, payload []byte, retain bool) error
	// publishLater sends without waiting; it is what message handlers use
	// (an external client's handler must not wait on its own connection).
	// A message that cannot be queued is dropped and counted: everything
	// the Manager sends this way is re-sent by design (acks by device
	// retries, config and commands by reconcile).
	publishLater(topic string, payload []byte, retain bool)
	ready() error
	close() error
}

// ErrNotConnected is returned while the external broker is unreachable.
var ErrNotConnected = errors.New("not connected to the MQTT broker")

// embeddedBus uses the in-process broker's inline client (privileged).
type embeddedBus struct {
	b      *broker.Broker
	cancel []func()
}

func (e *embeddedBus) subscribe(filters []string, deliver func(topic string, payload []byte)) error {
	for _, f := range filters {
		c, err := e.b.Subscribe(f, deliver)
		if err != nil {
			e.close()
			return err
		}
		e.cancel = append(e.cancel, c)
	}
	return nil
}

func (e *embeddedBus) publish(_ context.Context, topic string, payload []byte, retain bool) error {
	return e.b.Publish(topic, payload, retain)
}

// publishLater: an inline publish only enqueues to each subscriber, so it
// is safe (and cheap) from a handler.
func (e *embeddedBus) publishLater(topic string, payload []byte, retain bool) {
	_ = e.b.Publish(topic, payload, retain)
}

func (e *embeddedBus) ready() error { return nil }

// close cancels the subscriptions and waits for deliveries in progress.
func (e *embeddedBus) close() error {
	for _, c := range e.cancel {
		c()
	}
	e.cancel = nil
	return nil
}

// externalBus is an autopaho client with a persistent session: while the
// cloud is down the broker keeps its subscriptions and queues QoS 1
// telemetry for it. Messages are handled on workers (lanes) and
// acknowledged by hand after the handler returns, which is after the bbolt
// commit, so a PUBACK from the cloud still means stored; paho sends the
// PUBACKs in arrival order, as MQTT requires.
type externalBus struct {
	cfg     *Config
	cm      *autopaho.ConnectionManager
	filters []string
	deliver func(topic string, payload []byte)
	lanes   *lanes
	onUp    func()
	log     *slog.Logger
	timeout time.Duration

	outbox  chan outMsg
	dropped *metrics.Counter
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup // outbox workers and post-connect work

	mu sync.Mutex // guards up
	up bool
}

type outMsg struct {
	topic   string
	payload []byte
	retain  bool
}

// outboxWorkers publish concurrently so one slow PUBACK does not hold up
// every ack behind it.
const outboxWorkers = 4

// newExternalBus: laneOf names the device a topic belongs to and whether
// it carries telemetry (see lanes).
func newExternalBus(cfg *Config, filters []string, deliver func(topic string, payload []byte), laneOf func(topic string) (device string, telemetry bool), onUp func()) *externalBus {
	ctx, cancel := context.WithCancel(context.Background())
	return &externalBus{
		cfg: cfg, filters: filters, deliver: deliver, onUp: onUp, log: cfg.Logger, timeout: cfg.PublishTimeout,
		lanes:   newLanes(cfg.External.Workers, laneOf, deliver),
		outbox:  make(chan outMsg, 8192),
		dropped: cfg.Metrics.Counter("phaseless_fleet_mqtt_outbox_dropped_total", "messages to devices dropped because the outbox to the external broker was full"),
		ctx:     ctx, cancel: cancel,
	}
}

// start begins connecting (in the background, retrying with backoff).
func (x *externalBus) start() error {
	e := x.cfg.External
	u, err := url.Parse(e.URL)
	if err != nil {
		x.cancel()
		return err
	}
	expiry := uint32(e.SessionExpiry / time.Second)
	pc := autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{u},
		TlsCfg:                        e.TLS,
		KeepAlive:                     e.KeepAlive,
		CleanStartOnInitialConnection: false,
		SessionExpiryInterval:         expiry,
		ReconnectBackoff:              autopaho.NewExponentialBackoff(100*time.Millisecond, 10*time.Second, time.Second, 2),
		ConnectTimeout:                10 * time.Second,
		ConnectUsername:               e.Username,
		ConnectPassword:               []byte(e.Password),
		OnConnectionUp: func(cm *autopaho.ConnectionManager, ca *paho.Connack) {
			x.wg.Add(1)
			go func() {
				defer x.wg.Done()
				x.connected(cm, ca)
			}()
		},
		OnConnectionDown: func() bool {
			x.setUp(false)
			x.log.Warn("lost the external MQTT broker; reconnecting")
			return true
		},
		OnConnectError: func(err error) { x.log.Warn("connect to the external MQTT broker failed", "url", e.URL, "err", err) },
		ClientConfig: paho.ClientConfig{
			ClientID:                   e.ClientID,
			EnableManualAcknowledgment: true,
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
				// Acking after a reconnect reaches the old client, which
				// has forgotten the packet: the broker sends it again on
				// the resumed session, and every handler is idempotent.
				x.lanes.add(pr.Packet.Topic, pr.Packet.Payload, func() { _ = pr.Client.Ack(pr.Packet) })
				return true, nil
			}},
		},
	}
	cm, err := autopaho.NewConnection(x.ctx, pc)
	if err != nil {
		x.cancel()
		return fmt.Errorf("MQTT client for %s: %w", e.URL, err)
	}
	x.cm = cm
	for range outboxWorkers {
		x.wg.Add(1)
		go x.drain()
	}
	return nil
}

// connected (re)subscribes, then lets the Manager reconcile. A restored
// session already has the subscriptions; subscribing again is harmless and
// covers a session the broker expired.
func (x *externalBus) connected(cm *autopaho.ConnectionManager, ca *paho.Connack) {
	subs := make([]paho.SubscribeOptions, len(x.filters))
	for i, f := range x.filters {
		subs[i] = paho.SubscribeOptions{Topic: f, QoS: 1}
	}
	ctx, cancel := context.WithTimeout(x.ctx, x.timeout)
	defer cancel()
	if _, err := cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: subs}); err != nil {
		x.log.Error("subscribe on the external MQTT broker failed", "err", err)
		return
	}
	x.log.Info("connected to the external MQTT broker", "session_present", ca.SessionPresent)
	x.setUp(true)
	x.onUp()
}

func (x *externalBus) setUp(v bool) {
	x.mu.Lock()
	x.up = v
	x.mu.Unlock()
}

func (x *externalBus) ready() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.up {
		return ErrNotConnected
	}
	return nil
}

func (x *externalBus) publish(ctx context.Context, topic string, payload []byte, retain bool) error {
	ctx, cancel := context.WithTimeout(ctx, x.timeout)
	defer cancel()
	_, err := x.cm.Publish(ctx, &paho.Publish{QoS: 1, Topic: topic, Payload: payload, Retain: retain})
	if errors.Is(err, autopaho.ConnectionDownError) {
		return ErrNotConnected
	}
	return err
}

func (x *externalBus) publishLater(topic string, payload []byte, retain bool) {
	select {
	case x.outbox <- outMsg{topic, payload, retain}:
	default:
		x.dropped.Inc()
	}
}

func (x *externalBus) drain() {
	defer x.wg.Done()
	for {
		select {
		case <-x.ctx.Done():
			return
		case m := <-x.outbox:
			if err := x.publish(x.ctx, m.topic, m.payload, m.retain); err != nil && x.ctx.Err() == nil {
				x.dropped.Inc()
				x.log.Debug("publish to the external MQTT broker failed", "topic", m.topic, "err", err)
			}
		}
	}
}

// close disconnects cleanly (the broker keeps the session) and waits for
// the client's and the outbox's goroutines. It first leaves its
// shared-subscription groups: the broker would otherwise keep handing the
// session a share of the devices' messages until the session expires,
// which the devices get acknowledged only by resending. A restart
// subscribes again (connected).
func (x *externalBus) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var shared []string
	for _, f := range x.filters {
		if strings.HasPrefix(f, "$share/") {
			shared = append(shared, f)
		}
	}
	if len(shared) > 0 && x.ready() == nil {
		if _, err := x.cm.Unsubscribe(ctx, &paho.Unsubscribe{Topics: shared}); err != nil {
			x.log.Warn("leaving the shared subscriptions failed; the broker hands this session a share until it expires", "err", err)
		}
	}
	err := x.cm.Disconnect(ctx)
	x.cancel()
	<-x.cm.Done()
	x.lanes.close() // no more adds: paho's goroutines have ended
	x.wg.Wait()
	if err != nil && !strings.Contains(err.Error(), "context") {
		return err
	}
	return nil
}

// lanes handle an external broker's messages on workers. Each device's
// messages go to one worker, so they are handled in the order the broker
// sent them (MQTT orders per topic; this keeps it per device), while other
// devices' messages run beside them and bbolt's Batch commits their
// batches together. Telemetry and the control topics (status, reported
// config, command results) have separate workers: the storm of retained
// statuses after a broker restart queues behind itself, not ahead of
// telemetry. A full worker queue blocks paho's reader, which is the
// back-pressure to the broker (and, through its receive window, to devices).
type lanes struct {
	telemetry, control []chan laneMsg
	all                []chan laneMsg
	laneOf             func(topic string) (device string, telemetry bool)
	wg                 sync.WaitGroup
}

type laneMsg struct {
	topic   string
	payload []byte
	ack     func()
}

// laneQueue bounds each worker's backlog: enough to keep it busy through
// a bbolt commit, small enough that a stuck worker stops the reader soon.
const laneQueue = 64

func newLanes(workers int, laneOf func(string) (string, bool), deliver func(topic string, payload []byte)) *lanes {
	l := &lanes{laneOf: laneOf}
	// A quarter of the workers (at least one) for the control topics.
	control := max(1, workers/4)
	if workers == 1 {
		control = 0 // one worker for everything: arrival order, the baseline
	}
	for i := range workers {
		ch := make(chan laneMsg, laneQueue)
		l.all = append(l.all, ch)
		if i < control {
			l.control = append(l.control, ch)
		} else {
			l.telemetry = append(l.telemetry, ch)
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for m := range ch {
				deliver(m.topic, m.payload)
				m.ack()
			}
		}()
	}
	if len(l.control) == 0 {
		l.control = l.telemetry
	}
	return l
}

func (l *lanes) add(topic string, payload []byte, ack func()) {
	dev, tel := l.laneOf(topic)
	set := l.control
	if tel {
		set = l.telemetry
	}
	h := fnv.New32a()
	h.Write([]byte(dev))
	set[h.Sum32()%uint32(len(set))] <- laneMsg{topic, payload, ack}
}

// close ends the workers after they have handled what was queued.
func (l *lanes) close() {
	for _, ch := range l.all {
		close(ch)
	}
	l.wg.Wait()
}
