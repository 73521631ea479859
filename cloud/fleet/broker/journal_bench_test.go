package broker

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/eclipse/paho.golang/paho"

	"github.com/phaseless/phaseless/transport/fleetwire"
)

// BenchmarkQoS1Publish measures what the QoS 1 journal costs: devices
// publish telemetry at QoS 1, each waiting for its PUBACK before the next
// (as autopaho does), to a persistent cloud subscriber, on a broker that
// keeps state in memory (the baseline: no journal, nothing survives a
// kill) and on one with the bbolt store (journal written before each
// PUBACK, batched across publishers by bbolt's Batch). Compare msgs/s of
// the two in the same run:
//
//	go test -run '^$' -bench QoS1Publish -benchtime 2000x ./cloud/fleet/broker/
func BenchmarkQoS1Publish(b *testing.B) {
	for _, store := range []string{"memory", "bbolt"} {
		for _, devices := range []int{1, 16} {
			b.Run(fmt.Sprintf("store=%s/devices=%d", store, devices), func(b *testing.B) {
				benchPublish(b, store == "bbolt", devices)
			})
		}
	}
}

func benchPublish(b *testing.B, persist bool, devices int) {
	ids := []string{"ops"}
	for i := range devices {
		ids = append(ids, fmt.Sprintf("car-%d", i))
	}
	cfg := Config{Passwords: passwordsFor(b, ids...), Admins: []string{"ops"}}
	if persist {
		cfg.StorePath = filepath.Join(b.TempDir(), "broker.db")
	}
	br := startBroker(b, cfg)
	tp := fleetwire.Topics{}
	sub, err := dial(b, br.TCPAddr(), "ops", dialOpts{user: "ops", pass: "pw-ops", persistent: true})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := subscribe(b, sub, tp.DeviceFilter(fleetwire.SuffixTelemetry)); err != nil {
		b.Fatal(err)
	}
	pubs := make([]*mqttClient, devices)
	for i := range pubs {
		if pubs[i], err = dial(b, br.TCPAddr(), ids[i+1], dialOpts{user: ids[i+1], pass: "pw-" + ids[i+1]}); err != nil {
			b.Fatal(err)
		}
	}
	payload := make([]byte, 512) // a small telemetry batch
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, devices)
	for i, c := range pubs {
		n := b.N / devices
		if i < b.N%devices {
			n++
		}
		topic := tp.Device(ids[i+1], fleetwire.SuffixTelemetry)
		wg.Go(func() {
			for range n {
				if _, err := c.Publish(context.Background(), &paho.Publish{QoS: 1, Topic: topic, Payload: payload}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	sub.waitMsgs(b, b.N) // every acknowledged publish reached the subscriber
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
