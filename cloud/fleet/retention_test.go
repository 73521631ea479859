package fleet

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// fakeClock is the injected Now for retention tests.
type fakeClock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func batch(dev, id string, from, n uint64) []byte {
	b := fleetwire.TelemetryBatch{DeviceID: dev, BatchID: id}
	for s := from; s < from+n; s++ {
		b.Records = append(b.Records, fleetwire.Record{Seq: s, Kind: "request", Data: json.RawMessage(`{"trace_id":"x"}`)})
	}
	p, _ := json.Marshal(b)
	return p
}

// TestRetention drives ingest directly (deliver is what the broker calls)
// with an injected clock: the count bound deletes the oldest first, the age
// bound deletes by ingest time, deletions are counted, and a redelivery of
// deleted records still counts as a duplicate instead of coming back.
func TestRetention(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	b := startBroker(t, broker.Config{DevAuth: true})
	m := openManager(t, Config{DataDir: t.TempDir(), Broker: b, MaxRecords: 50, MaxAge: time.Hour, Now: clk.now, PruneInterval: time.Hour})
	tel := topics.Device("r-1", fleetwire.SuffixTelemetry)

	for i := range 12 {
		m.deliver(tel, batch("r-1", fmt.Sprint("b", i), uint64(i*10+1), 10))
		clk.advance(time.Second)
	}
	c, _ := m.Counts()
	if c.Stored != 50 || c.Ingested != 120 || c.Deleted != 70 {
		t.Fatalf("after 120 records with a bound of 50: %+v", c)
	}
	seqs := exportSeqs(t, m, "r-1")["r-1"]
	if len(seqs) != 50 || seqs[0] != 71 || seqs[49] != 120 {
		t.Fatalf("kept seqs %d..%d (%d), want 71..120", seqs[0], seqs[len(seqs)-1], len(seqs))
	}
	// Seqs 1..10 were deleted by retention; sent again they are duplicates.
	m.deliver(tel, batch("r-1", "b0-again", 1, 10))
	c, _ = m.Counts()
	if c.Stored != 50 || c.Duplicates != 10 {
		t.Fatalf("redelivery of deleted records: %+v", c)
	}
	dev, _ := m.Device("r-1")
	if dev.Telemetry.Stored != 50 || dev.Telemetry.Ingested != 120 {
		t.Fatalf("device telemetry %+v", dev.Telemetry)
	}

	// Age: two more batches later, then an hour passes for the old ones.
	clk.advance(30 * time.Minute)
	m.deliver(tel, batch("r-1", "late", 121, 5))
	clk.advance(31 * time.Minute)
	n, err := m.Prune()
	if err != nil {
		t.Fatal(err)
	}
	// The late batch pushed 5 more out by count; the other 45 are old.
	if n != 45 {
		t.Fatalf("age prune deleted %d, want the 45 older than an hour", n)
	}
	c, _ = m.Counts()
	if c.Stored != 5 || c.Deleted != 120 {
		t.Fatalf("after age prune: %+v", c)
	}
	if dev, _ := m.Device("r-1"); dev.Telemetry.Stored != 5 {
		t.Fatalf("device stored %d", dev.Telemetry.Stored)
	}
	checkStore(t, m)
}

// TestDeliverRefusesBadInput: malformed or forged payloads are counted and
// not acknowledged or stored; the Manager keeps working.
func TestDeliverRefusesBadInput(t *testing.T) {
	b := startBroker(t, broker.Config{DevAuth: true})
	m := openManager(t, Config{DataDir: t.TempDir(), Broker: b, MaxPayloadBytes: 4096})
	for _, c := range []struct{ topic, payload string }{
		{topics.Device("x-1", fleetwire.SuffixTelemetry), `{"records":[`},
		{topics.Device("x-1", fleetwire.SuffixTelemetry), `{"device_id":"x-2","records":[{"seq":1}]}`},
		{topics.Device("x-1", fleetwire.SuffixTelemetry), `{"records":[{"seq":1,"data":{"a":1}}],"dropped":-1}`},
		{topics.Device("x-1", fleetwire.SuffixTelemetry), string(make([]byte, 5000))},
		{topics.Device("x-1", fleetwire.SuffixStatus), `"online"`},
		{topics.Device("x-1", fleetwire.SuffixConfigReported), `{"version":"two"}`},
		{topics.Device("x-1", fleetwire.SuffixCmdResult), `{"ok":true}`},
		{"phaseless/dev/bad id/telemetry", `{}`},
	} {
		m.deliver(c.topic, []byte(c.payload))
	}
	cnt, _ := m.Counts()
	if cnt.Stored != 0 {
		t.Fatalf("stored %d from bad input", cnt.Stored)
	}
	var errs float64
	for _, s := range []string{"telemetry", "status", "config/reported", "cmd/result", "topic"} {
		errs += m.mDecodeErrors.With(s).Value()
	}
	if errs != 8 {
		t.Fatalf("decode errors %v, want 8", errs)
	}
	m.deliver(topics.Device("x-1", fleetwire.SuffixTelemetry), batch("x-1", "ok", 1, 3))
	if cnt, _ := m.Counts(); cnt.Stored != 3 {
		t.Fatalf("good batch after bad ones: %+v", cnt)
	}
}

// TestLastWillWins: a device's last will is stamped with the time of the
// CONNECT that registered it, before the "online" it published next; the
// will must still turn the device offline, and the next online reconciles.
func TestLastWillWins(t *testing.T) {
	b := startBroker(t, broker.Config{DevAuth: true})
	m := openManager(t, Config{DataDir: t.TempDir(), Broker: b})
	st := func(state string, at time.Time) []byte {
		p, _ := json.Marshal(fleetwire.Status{DeviceID: "w-1", State: state, Version: "1", Time: at})
		return p
	}
	connect := time.Now()
	tp := topics.Device("w-1", fleetwire.SuffixStatus)
	m.deliver(tp, st("online", connect.Add(time.Millisecond)))
	m.deliver(tp, st("offline", connect)) // the will
	if d, _ := m.Device("w-1"); d.State() != "offline" {
		t.Fatalf("state after last will: %s", d.State())
	}
}
