package fleet

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestLanesKeepDeviceOrderAndLetTelemetryPass: each device's messages are
// handled in the order they were added, whatever worker they share, and
// telemetry keeps flowing while every control worker is stuck (a status
// storm must not hold up telemetry).
func TestLanesKeepDeviceOrderAndLetTelemetryPass(t *testing.T) {
	laneOf := func(topic string) (string, bool) {
		dev, suffix, _ := strings.Cut(topic, "/")
		return dev, suffix == "telemetry"
	}
	release := make(chan struct{})
	var (
		mu    sync.Mutex
		seen  = map[string][]int{}
		acked int
	)
	deliver := func(topic string, payload []byte) {
		if strings.HasSuffix(topic, "/status") {
			<-release
			return
		}
		var n int
		fmt.Sscan(string(payload), &n)
		mu.Lock()
		seen[topic] = append(seen[topic], n)
		mu.Unlock()
	}
	l := newLanes(8, laneOf, deliver)
	ack := func() { mu.Lock(); acked++; mu.Unlock() }
	// Block every control worker: one status per worker at least.
	for d := range 64 {
		l.add(fmt.Sprintf("dev-%d/status", d), nil, ack)
	}
	const devices, per = 40, 50
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range per {
			for d := range devices {
				l.add(fmt.Sprintf("dev-%d/telemetry", d), []byte(fmt.Sprint(i)), ack)
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second): // a hang guard, not a speed check
		t.Fatal("telemetry blocked behind stuck status handlers")
	}
	waitFor(t, "telemetry handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return acked == devices*per
	})
	close(release)
	l.close()
	if acked != devices*per+64 {
		t.Fatalf("acked %d, want %d", acked, devices*per+64)
	}
	for topic, got := range seen {
		for i, n := range got {
			if n != i {
				t.Fatalf("%s handled %v: out of order", topic, got)
			}
		}
	}
}
