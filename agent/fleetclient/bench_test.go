package fleetclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/phaseless/phaseless/agent/fleetclient/internal/brokertest"
	"github.com/phaseless/phaseless/agent/telemetry"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// benchRecord is a typical RequestRecord (about 230 bytes of JSON).
var benchBatch = 1024

var benchRecord = fleetwire.RequestRecord{
	TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", CloudProb: 0.42, Decision: "local", Reason: "entropy 3.1 < 4.2",
	Path: "local", TTFTMillis: 31.5, ITLMillis: 9.1, PromptTokens: 120, CompletionTokens: 64, Outcome: "ok",
	Features: []float32{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8}, FeatureVersion: 1,
}

// fill appends n records from 64 goroutines (group commit keeps it quick).
func fill(b *testing.B, s *telemetry.Store, n int) {
	b.Helper()
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Go(func() {
			for i := w; i < n; i += 64 {
				if _, err := s.AppendRequest(context.Background(), benchRecord); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// drainOnce starts a device on a store holding n records and returns how
// long until the cloud acknowledged all of them and the store is empty.
func drainOnce(b *testing.B, brokerURL string, cloud *fakeCloud, n, iter int) time.Duration {
	b.Helper()
	b.StopTimer()
	dir := b.TempDir()
	store, err := telemetry.Open(filepath.Join(dir, "t.db"), telemetry.Config{MaxRecords: n + 1})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	fill(b, store, n)
	c, err := New(Config{BrokerURL: brokerURL, DeviceID: fmt.Sprintf("bench-%d-%d", n, iter), StatePath: filepath.Join(dir, "f.db"),
		Store: store, UplinkRate: -1, BatchSize: benchBatch, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	b.StartTimer()
	start := time.Now()
	go func() { done <- c.Run(ctx) }()
	for store.Stats().Records > 0 {
		time.Sleep(time.Millisecond)
	}
	el := time.Since(start)
	b.StopTimer()
	cancel()
	<-done
	cloud.mu.Lock()
	got := len(cloud.seen[fmt.Sprintf("bench-%d-%d", n, iter)])
	cloud.mu.Unlock()
	if got != n {
		b.Fatalf("cloud ingested %d of %d", got, n)
	}
	b.StartTimer()
	return el
}

// rawPublish is the baseline: the same batches, pre-encoded, published
// QoS 1 one after another by a bare autopaho client, without store reads,
// encoding, acks or deletes.
func rawPublish(b *testing.B, brokerURL string, n, batch int) time.Duration {
	b.Helper()
	b.StopTimer()
	recs := make([]fleetwire.Record, batch)
	data, _ := json.Marshal(benchRecord)
	for i := range recs {
		recs[i] = fleetwire.Record{Seq: uint64(i), Time: time.Now(), Kind: telemetry.KindRequest, Data: data}
	}
	payload, _ := json.Marshal(fleetwire.TelemetryBatch{DeviceID: "raw", BatchID: "x", Records: recs})
	u, _ := url.Parse(brokerURL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cm, err := autopaho.NewConnection(ctx, autopaho.ClientConfig{ServerUrls: []*url.URL{u}, KeepAlive: 30,
		ClientConfig: paho.ClientConfig{ClientID: "raw-baseline"}})
	if err != nil {
		b.Fatal(err)
	}
	if err := cm.AwaitConnection(ctx); err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	start := time.Now()
	for sent := 0; sent < n; sent += batch {
		if _, err := cm.Publish(ctx, &paho.Publish{Topic: "phaseless/dev/raw/telemetry", QoS: 1, Payload: payload}); err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(start)
	b.StopTimer()
	_ = cm.Disconnect(context.Background())
	b.StartTimer()
	return el
}

// BenchmarkUplink measures records/s from a device's store to an acking
// cloud through the embedded broker, against raw QoS 1 publishing of the
// same bytes in the same run. backlog=100000 is the 100k backlog drain
// time.
func BenchmarkUplink(b *testing.B) {
	for _, n := range []int{20000, 100000} {
		b.Run(fmt.Sprintf("backlog=%d", n), func(b *testing.B) {
			broker := brokertest.StartMochi(b)
			cloud := startCloud(b, broker.URL(), fleetwire.Topics{})
			var ours, raw time.Duration
			iter := 0
			for b.Loop() {
				ours += drainOnce(b, broker.URL(), cloud, n, iter)
				raw += rawPublish(b, broker.URL(), n, 256)
				iter++
			}
			oursRate := float64(n*iter) / ours.Seconds()
			rawRate := float64(n*iter) / raw.Seconds()
			b.ReportMetric(oursRate, "records/s")
			b.ReportMetric(rawRate, "raw-publish-records/s")
			b.ReportMetric(oursRate/rawRate, "x-of-raw")
			b.ReportMetric(ours.Seconds()/float64(iter), "drain-s")
		})
	}
}
