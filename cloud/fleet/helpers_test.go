package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"go.uber.org/goleak"

	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/internal/mosquittotest"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(benchDevicesEnv); spec != "" {
		os.Exit(benchDevicesMain(spec)) // BenchmarkIdleDeviceMemory's devices
	}
	goleak.VerifyTestMain(m)
}

var topics = fleetwire.Topics{}

func startBroker(t testing.TB, cfg broker.Config) *broker.Broker {
	t.Helper()
	if cfg.TCPAddr == "" {
		cfg.TCPAddr = "127.0.0.1:0"
	}
	b, err := broker.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func openManager(t testing.TB, cfg Config) *Manager {
	t.Helper()
	m, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// waitFor polls cond; the deadline is a hang guard, not a timing assertion.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// simDevice is a stand-in device on a real autopaho MQTT v5 client with a
// persistent session. Its telemetry logic is the contract the real agent
// follows: records get increasing seqs, go out in batches, and a batch is
// forgotten only when the cloud acknowledges it; unacknowledged batches are
// sent again after retryAfter.
type simDevice struct {
	id         string
	cm         *autopaho.ConnectionManager
	cancel     context.CancelFunc
	retryAfter time.Duration
	updateTo   string

	mu       sync.Mutex // guards everything below
	nextSeq  uint64
	unsent   []fleetwire.Record
	inflight map[string]*simBatch // batch id → batch
	acked    uint64               // records acknowledged
	made     uint64               // records generated
	sent     int                  // batch publishes, resends included
	batchN   int
	desired  []fleetwire.DesiredConfig
	cmds     []fleetwire.Command
	applied  map[string]int // update command id → times received (updateTo)
	kick     chan struct{}
	wg       sync.WaitGroup
}

type simBatch struct {
	b      fleetwire.TelemetryBatch
	sentAt time.Time
}

type simOpts struct {
	user, pass string
	retryAfter time.Duration
	firstSeq   uint64
	// updateTo, when set, makes the device apply each update command: it
	// answers OK and reports running updateTo.
	updateTo string
}

func newSimDevice(t testing.TB, brokerURL, id string, o simOpts) *simDevice {
	t.Helper()
	u, err := url.Parse(brokerURL)
	if err != nil {
		t.Fatal(err)
	}
	if o.retryAfter == 0 {
		o.retryAfter = 300 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &simDevice{id: id, cancel: cancel, retryAfter: o.retryAfter, nextSeq: o.firstSeq + 1, updateTo: o.updateTo,
		inflight: map[string]*simBatch{}, kick: make(chan struct{}, 1)}
	will, _ := json.Marshal(fleetwire.Status{DeviceID: id, State: "offline", Version: "sim-1"})
	online, _ := json.Marshal(fleetwire.Status{DeviceID: id, State: "online", Version: "sim-1", Slot: "a", Time: time.Now()})
	cfg := autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{u},
		KeepAlive:                     10,
		CleanStartOnInitialConnection: false,
		SessionExpiryInterval:         3600,
		ReconnectBackoff:              autopaho.NewConstantBackoff(50 * time.Millisecond),
		ConnectUsername:               o.user,
		ConnectPassword:               []byte(o.pass),
		WillMessage:                   &paho.WillMessage{Topic: topics.Device(id, fleetwire.SuffixStatus), Payload: will, QoS: 1, Retain: true},
		OnConnectionUp: func(cm *autopaho.ConnectionManager, _ *paho.Connack) {
			d.wg.Add(1)
			go func() {
				defer d.wg.Done()
				sctx, c := context.WithTimeout(ctx, 10*time.Second)
				defer c()
				_, _ = cm.Subscribe(sctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{
					{Topic: topics.Device(id, fleetwire.SuffixTelemetryAck), QoS: 1},
					{Topic: topics.Device(id, fleetwire.SuffixConfigDesired), QoS: 1},
					{Topic: topics.Device(id, fleetwire.SuffixCmd), QoS: 1},
				}})
				_, _ = cm.Publish(sctx, &paho.Publish{QoS: 1, Retain: true, Topic: topics.Device(id, fleetwire.SuffixStatus), Payload: online})
				d.poke()
			}()
		},
		OnConnectError: func(error) {},
		ClientConfig: paho.ClientConfig{
			ClientID: id,
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
				d.onMessage(pr.Packet)
				return true, nil
			}},
		},
	}
	cm, err := autopaho.NewConnection(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.cm = cm
	d.wg.Add(1)
	go d.uplink(ctx)
	t.Cleanup(d.close)
	return d
}

func (d *simDevice) poke() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

func (d *simDevice) close() {
	ctx, c := context.WithTimeout(context.Background(), 5*time.Second)
	defer c()
	_ = d.cm.Disconnect(ctx)
	d.cancel()
	<-d.cm.Done()
	d.wg.Wait()
}

func (d *simDevice) onMessage(p *paho.Publish) {
	_, suffix, _ := topics.ParseDevice(p.Topic)
	d.mu.Lock()
	defer d.mu.Unlock()
	switch suffix {
	case fleetwire.SuffixTelemetryAck:
		var a fleetwire.TelemetryAck
		if json.Unmarshal(p.Payload, &a) != nil {
			return
		}
		if fb, ok := d.inflight[a.BatchID]; ok {
			d.acked += uint64(len(fb.b.Records))
			delete(d.inflight, a.BatchID)
		}
	case fleetwire.SuffixConfigDesired:
		var c fleetwire.DesiredConfig
		if json.Unmarshal(p.Payload, &c) == nil {
			d.desired = append(d.desired, c)
		}
	case fleetwire.SuffixCmd:
		var c fleetwire.Command
		if json.Unmarshal(p.Payload, &c) == nil {
			d.cmds = append(d.cmds, c)
			if c.Name == "update" && d.updateTo != "" {
				// Applied once per id, answered again on a repeat.
				if d.applied == nil {
					d.applied = map[string]int{}
				}
				d.applied[c.ID]++
				d.wg.Add(1)
				go d.applyUpdate(c)
			}
		}
	}
}

// applyUpdate answers an update command and reports the new version, as
// an agent whose update committed would.
func (d *simDevice) applyUpdate(c fleetwire.Command) {
	defer d.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, _ := json.Marshal(fleetwire.CommandResult{ID: c.ID, OK: true})
	st, _ := json.Marshal(fleetwire.Status{DeviceID: d.id, State: "online", Version: d.updateTo, Slot: "b", Time: time.Now()})
	_, _ = d.cm.Publish(ctx, pub(topics.Device(d.id, fleetwire.SuffixCmdResult), res, false))
	_, _ = d.cm.Publish(ctx, pub(topics.Device(d.id, fleetwire.SuffixStatus), st, true))
}

// generate appends n records.
func (d *simDevice) generate(n int) {
	d.mu.Lock()
	for range n {
		data, _ := json.Marshal(fleetwire.RequestRecord{TraceID: fmt.Sprintf("%s-%d", d.id, d.nextSeq), Decision: "local", Path: "local", Outcome: "ok", CloudProb: 0.25})
		d.unsent = append(d.unsent, fleetwire.Record{Seq: d.nextSeq, Time: time.Now().UTC(), Kind: "request", Data: data})
		d.nextSeq++
		d.made++
	}
	d.mu.Unlock()
	d.poke()
}

func (d *simDevice) uplink(ctx context.Context) {
	defer d.wg.Done()
	t := time.NewTicker(d.retryAfter / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-d.kick:
		}
		d.mu.Lock()
		var out []*simBatch
		now := time.Now()
		for len(d.unsent) > 0 {
			n := min(100, len(d.unsent))
			d.batchN++
			fb := &simBatch{b: fleetwire.TelemetryBatch{DeviceID: d.id, BatchID: fmt.Sprintf("%s-b%d", d.id, d.batchN), Records: d.unsent[:n:n]}}
			d.unsent = d.unsent[n:]
			d.inflight[fb.b.BatchID] = fb
		}
		for _, fb := range d.inflight {
			if now.Sub(fb.sentAt) >= d.retryAfter {
				fb.sentAt = now
				out = append(out, fb)
			}
		}
		d.mu.Unlock()
		for _, fb := range out {
			p, _ := json.Marshal(fb.b)
			pctx, c := context.WithTimeout(ctx, 5*time.Second)
			_, err := d.cm.Publish(pctx, &paho.Publish{QoS: 1, Topic: topics.Device(d.id, fleetwire.SuffixTelemetry), Payload: p})
			c()
			d.mu.Lock()
			if err == nil {
				d.sent++
			} else {
				fb.sentAt = time.Time{} // not out: retry at the next tick
			}
			d.mu.Unlock()
		}
	}
}

// ackedAll reports whether every generated record was acknowledged.
func (d *simDevice) ackedAll() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.unsent) == 0 && len(d.inflight) == 0 && d.acked == d.made
}

func (d *simDevice) stats() (acked uint64, sent int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.acked, d.sent
}

// startMosquitto runs the real Mosquitto on a random port with a password
// file written by broker.HashPassword (the two formats are one) and the ACL
// DESIGN.md asks for. It skips without mosquitto unless CI is set.
func startMosquitto(t testing.TB, users map[string]string, admin string) string {
	t.Helper()
	bin := "/usr/sbin/mosquitto"
	if _, err := os.Stat(bin); err != nil {
		if p, err := exec.LookPath("mosquitto"); err == nil {
			bin = p
		} else if os.Getenv("CI") != "" {
			t.Fatal("mosquitto is required in CI (apt-get install mosquitto)")
		} else {
			t.Skip("mosquitto not installed")
		}
	}
	dir := t.TempDir()
	var pw strings.Builder
	for u, p := range users {
		line, err := broker.HashPassword(u, p)
		if err != nil {
			t.Fatal(err)
		}
		pw.WriteString(line + "\n")
	}
	write := func(name, s string) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pwFile := write("passwd", pw.String())
	aclFile := write("acl", fmt.Sprintf("user %s\ntopic readwrite phaseless/#\n\npattern readwrite phaseless/dev/%%u/#\npattern read phaseless/fleet/#\n", admin))
	port := mosquittotest.FreePort(t)
	// As root, mosquitto drops to user "mosquitto", which cannot read the
	// test's private temp dir; keep it as the test's user.
	runAs := ""
	if os.Geteuid() == 0 {
		runAs = "user root\n"
	}
	conf := write("mosquitto.conf", runAs+fmt.Sprintf(`listener %d 127.0.0.1
allow_anonymous false
password_file %s
acl_file %s
per_listener_settings false
persistence false
max_queued_messages 0
max_inflight_messages 0
log_dest stderr
log_type error
log_type warning
`, port, pwFile, aclFile))
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	mosquittotest.Run(t, bin, conf, addr)
	return "mqtt://" + addr
}

func pub(topic string, payload []byte, retain bool) *paho.Publish {
	return &paho.Publish{QoS: 1, Topic: topic, Payload: payload, Retain: retain}
}
