package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// Every request's record leaves the device over MQTT: a real embedded
// broker receives the telemetry batch with the request's trace id and the
// router's decision.
func TestTelemetryReachesBroker(t *testing.T) {
	b, err := broker.Start(broker.Config{TCPAddr: "127.0.0.1:0", DevAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got := make(chan fleetwire.TelemetryBatch, 16)
	cancel, err := b.Subscribe(fleetwire.Topics{}.DeviceFilter(fleetwire.SuffixTelemetry), func(_ string, payload []byte) {
		var tb fleetwire.TelemetryBatch
		if json.Unmarshal(payload, &tb) == nil {
			got <- tb
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()

	cfg := testConfig(t)
	cfg.MQTT, cfg.DeviceID = "mqtt://"+b.TCPAddr(), "car-2"
	_, url := startAgent(t, cfg)
	resp := post(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"open the sunroof"}],"max_tokens":4}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	trace := resp.Header.Get("x-request-id")
	deadline := time.After(60 * time.Second) // hang guard: connect + uplink pacing
	for {
		select {
		case tb := <-got:
			if tb.DeviceID != "car-2" {
				t.Fatalf("batch from %q", tb.DeviceID)
			}
			for _, r := range tb.Records {
				var rr fleetwire.RequestRecord
				if r.Kind == "request" && json.Unmarshal(r.Data, &rr) == nil && rr.TraceID == trace {
					if rr.Decision != "local" || rr.Outcome != "ok" || len(rr.Features) == 0 {
						t.Errorf("record %+v", rr)
					}
					return
				}
			}
		case <-deadline:
			t.Fatal("the request's telemetry never reached the broker")
		}
	}
}

// logLines is a slog destination the test reads while the agent writes.
type logLines struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// The fleet client's log lines name their component once: the client adds
// it to its logger itself.
func TestFleetLogNamesComponentOnce(t *testing.T) {
	b, err := broker.Start(broker.Config{TCPAddr: "127.0.0.1:0", DevAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cfg := testConfig(t)
	cfg.MQTT, cfg.DeviceID = "mqtt://"+b.TCPAddr(), "car-3"
	var logs logLines
	a, err := New(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent Run: %v", err)
		}
	}()
	waitUntil(t, "the fleet client's connected line", func() bool { return strings.Contains(logs.String(), `msg=connected`) })
	for line := range strings.Lines(logs.String()) {
		if strings.Count(line, "component=fleet") > 1 {
			t.Errorf("component repeated: %s", line)
		}
	}
}
