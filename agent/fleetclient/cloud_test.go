package fleetclient

import (
	"context"
	"encoding/json"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/phaseless/phaseless/transport/fleetwire"
)

// fakeCloud is the cloud side as far as a device can tell: a real MQTT
// client on the same broker that records what devices publish, ingests
// telemetry idempotently on (device, seq) and acknowledges batches.
type fakeCloud struct {
	t      testing.TB
	topics fleetwire.Topics
	cm     *autopaho.ConnectionManager
	acking atomic.Bool
	acks   chan fleetwire.TelemetryBatch
	wg     sync.WaitGroup

	mu        sync.Mutex // guards everything below
	changed   chan struct{}
	seen      map[string]map[uint64]string // device -> seq -> data
	firstSeen []uint64                     // seqs in the order they were first ingested
	redeliv   int                          // records received again (ignored by ingest)
	batches   int
	dropped   map[string]uint64 // largest cumulative Dropped per device
	status    map[string][]fleetwire.Status
	reported  map[string][]fleetwire.ReportedConfig
	results   map[string][]fleetwire.CommandResult
}

var cloudSeq atomic.Int64

func startCloud(t testing.TB, brokerURL string, topics fleetwire.Topics) *fakeCloud {
	t.Helper()
	f := &fakeCloud{
		t: t, topics: topics, acks: make(chan fleetwire.TelemetryBatch, 1024), changed: make(chan struct{}),
		seen: map[string]map[uint64]string{}, dropped: map[string]uint64{},
		status: map[string][]fleetwire.Status{}, reported: map[string][]fleetwire.ReportedConfig{}, results: map[string][]fleetwire.CommandResult{},
	}
	f.acking.Store(true)
	u, _ := url.Parse(brokerURL)
	ctx, cancel := context.WithCancel(context.Background())
	cm, err := autopaho.NewConnection(ctx, autopaho.ClientConfig{
		ServerUrls:       []*url.URL{u},
		KeepAlive:        30,
		ReconnectBackoff: autopaho.NewConstantBackoff(50 * time.Millisecond),
		OnConnectionUp: func(cm *autopaho.ConnectionManager, _ *paho.Connack) {
			f.wg.Go(func() { // must not block the callback; resubscribe after every connect
				sctx, c := context.WithTimeout(ctx, 10*time.Second)
				defer c()
				var subs []paho.SubscribeOptions
				for _, s := range []string{fleetwire.SuffixStatus, fleetwire.SuffixTelemetry, fleetwire.SuffixConfigReported, fleetwire.SuffixCmdResult} {
					subs = append(subs, paho.SubscribeOptions{Topic: topics.DeviceFilter(s), QoS: 1})
				}
				if _, err := cm.Subscribe(sctx, &paho.Subscribe{Subscriptions: subs}); err == nil {
					f.mu.Lock()
					f.bumpLocked()
					f.mu.Unlock()
				}
			})
		},
		ClientConfig: paho.ClientConfig{
			ClientID: "cloud-" + strconv.FormatInt(cloudSeq.Add(1), 10) + "-" + strconv.FormatInt(time.Now().UnixNano()%1e6, 10),
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
				f.receive(pr.Packet)
				return true, nil
			}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.cm = cm
	// Acks go out from their own goroutine: a QoS 1 publish waits for its
	// PUBACK and must not run inside paho's receive callback.
	f.wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case b := <-f.acks:
				ack := fleetwire.TelemetryAck{BatchID: b.BatchID, UpTo: b.Records[len(b.Records)-1].Seq}
				payload, _ := json.Marshal(ack)
				// Concurrently, so acks need not wait for each other's
				// PUBACK (the device accepts them in any order).
				f.wg.Go(func() {
					pctx, c := context.WithTimeout(ctx, 5*time.Second)
					defer c()
					_, _ = cm.Publish(pctx, &paho.Publish{Topic: topics.Device(b.DeviceID, fleetwire.SuffixTelemetryAck), QoS: 1, Payload: payload})
				})
			}
		}
	})
	t.Cleanup(func() {
		dctx, c := context.WithTimeout(context.Background(), 10*time.Second)
		defer c()
		_ = cm.Disconnect(dctx)
		cancel()
		f.wg.Wait()
	})
	aw, c := context.WithTimeout(ctx, 30*time.Second)
	defer c()
	if err := cm.AwaitConnection(aw); err != nil {
		t.Fatalf("cloud connect: %v", err)
	}
	return f
}

func (f *fakeCloud) bumpLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeCloud) receive(p *paho.Publish) {
	id, suffix, ok := f.topics.ParseDevice(p.Topic)
	if !ok {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.bumpLocked()
	switch suffix {
	case fleetwire.SuffixStatus:
		var s fleetwire.Status
		if json.Unmarshal(p.Payload, &s) == nil {
			f.status[id] = append(f.status[id], s)
		}
	case fleetwire.SuffixConfigReported:
		var r fleetwire.ReportedConfig
		if json.Unmarshal(p.Payload, &r) == nil {
			f.reported[id] = append(f.reported[id], r)
		}
	case fleetwire.SuffixCmdResult:
		var r fleetwire.CommandResult
		if json.Unmarshal(p.Payload, &r) == nil {
			f.results[id] = append(f.results[id], r)
		}
	case fleetwire.SuffixTelemetry:
		var b fleetwire.TelemetryBatch
		if err := json.Unmarshal(p.Payload, &b); err != nil || len(b.Records) == 0 || b.DeviceID != id {
			f.t.Errorf("bad telemetry batch on %s: %v", p.Topic, err)
			return
		}
		f.batches++
		m := f.seen[id]
		if m == nil {
			m = map[uint64]string{}
			f.seen[id] = m
		}
		for _, r := range b.Records {
			if _, dup := m[r.Seq]; dup {
				f.redeliv++
				continue
			}
			m[r.Seq] = string(r.Data)
			f.firstSeen = append(f.firstSeen, r.Seq)
		}
		f.dropped[id] = max(f.dropped[id], b.Dropped)
		if f.acking.Load() {
			select {
			case f.acks <- b:
			default:
			}
		}
	}
}

// waitFor blocks until cond holds (checked under the lock after every
// event). The deadline is a hang guard only.
func (f *fakeCloud) waitFor(what string, cond func() bool) {
	f.t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		f.mu.Lock()
		ok, ch := cond(), f.changed
		f.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-time.After(200 * time.Millisecond): // conditions that read device state
		case <-deadline:
			f.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (f *fakeCloud) publish(topic string, retain bool, v any) {
	f.t.Helper()
	b, _ := json.Marshal(v)
	ctx, c := context.WithTimeout(context.Background(), 10*time.Second)
	defer c()
	if _, err := f.cm.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Retain: retain, Payload: b}); err != nil {
		f.t.Fatalf("cloud publish %s: %v", topic, err)
	}
}

func (f *fakeCloud) lastStatus(id string) (fleetwire.Status, bool) {
	s := f.status[id]
	if len(s) == 0 {
		return fleetwire.Status{}, false
	}
	return s[len(s)-1], true
}
