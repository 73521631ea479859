package fleet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/internal/mosquittotest"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// exportSeqs reads the export and returns each device's seqs, failing on a
// (device, seq) that appears twice.
func exportSeqs(t testing.TB, m *Manager, device string) map[string][]uint64 {
	t.Helper()
	var buf bytes.Buffer
	if _, err := m.Export(context.Background(), &buf, time.Time{}, device); err != nil {
		t.Fatal(err)
	}
	out := map[string][]uint64{}
	seen := map[string]bool{}
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r ExportedRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("export line %q: %v", sc.Text(), err)
		}
		k := fmt.Sprintf("%s/%d", r.DeviceID, r.Seq)
		if seen[k] {
			t.Fatalf("record %s exported twice", k)
		}
		seen[k] = true
		out[r.DeviceID] = append(out[r.DeviceID], r.Seq)
	}
	for _, s := range out {
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	}
	return out
}

// checkComplete asserts every device has exactly seqs 1..n stored.
func checkComplete(t testing.TB, m *Manager, devs []string, n int) {
	t.Helper()
	got := exportSeqs(t, m, "")
	for _, id := range devs {
		s := got[id]
		if len(s) != n {
			t.Fatalf("%s: %d records stored, want %d", id, len(s), n)
		}
		for i, seq := range s {
			if seq != uint64(i+1) {
				t.Fatalf("%s: seq %d at %d (missing %d)", id, seq, i, i+1)
			}
		}
	}
	c, err := m.Counts()
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(len(devs) * n); c.Stored != want || c.Ingested != want {
		t.Fatalf("counts %+v, want stored = ingested = %d", c, want)
	}
}

func checkStore(t testing.TB, m *Manager) {
	t.Helper()
	// In a write transaction: Check reads the freelist, which concurrent
	// commits change.
	if err := m.st.(*store).db.Update(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			return err
		}
		return nil
	}); err != nil {
		t.Fatalf("fleet.db check: %v", err)
	}
}

// TestEmbeddedEndToEnd runs a device against the embedded broker and the
// Manager: status, telemetry with a redelivered batch, desired config with
// the reported version, and a command with its result.
func TestEmbeddedEndToEnd(t *testing.T) {
	reg := metrics.NewRegistry()
	b := startBroker(t, broker.Config{DevAuth: true, Metrics: reg})
	m := openManager(t, Config{DataDir: t.TempDir(), Broker: b, Metrics: reg})
	d := newSimDevice(t, "mqtt://"+b.TCPAddr(), "car-1", simOpts{})

	waitFor(t, "status online", func() bool {
		dev, err := m.Device("car-1")
		return err == nil && dev.State() == "online"
	})
	dev, _ := m.Device("car-1")
	if dev.Status.Version != "sim-1" || dev.Status.Slot != "a" {
		t.Fatalf("status %+v", dev.Status)
	}

	d.generate(250)
	waitFor(t, "telemetry acked", d.ackedAll)
	checkComplete(t, m, []string{"car-1"}, 250)

	// A batch delivered again (the device missed the ack) is acknowledged
	// again and counted as duplicates, not stored twice. (The device may
	// already have resent batches whose ack was slow: count from here.)
	before, _ := m.Device("car-1")
	dupMetric := reg.Counter("phaseless_fleet_telemetry_duplicates_total", "")
	dupsBefore := dupMetric.Value()
	d.mu.Lock()
	first := fleetwire.Record{Seq: 1, Time: time.Now(), Kind: "request", Data: json.RawMessage(`{}`)}
	d.inflight["again"] = &simBatch{b: fleetwire.TelemetryBatch{DeviceID: "car-1", BatchID: "again", Records: []fleetwire.Record{first, {Seq: 2, Kind: "request"}}}}
	d.made += 2
	d.mu.Unlock()
	d.poke()
	waitFor(t, "duplicate batch acked", d.ackedAll)
	checkComplete(t, m, []string{"car-1"}, 250)
	dev, _ = m.Device("car-1")
	if dev.Telemetry.Duplicates != before.Telemetry.Duplicates+2 || dev.Telemetry.Ingested != 250 || dev.Telemetry.LastSeq != 250 {
		t.Fatalf("telemetry %+v", dev.Telemetry)
	}

	// Desired config: versioned, retained, merged.
	v := func(s string) *string { return &s }
	if _, err := m.SetConfig(context.Background(), "car-1", ConfigUpdate{Values: map[string]*string{"route": v("auto"), "max_tokens": v("256")}}); err != nil {
		t.Fatal(err)
	}
	dc, err := m.SetConfig(context.Background(), "car-1", ConfigUpdate{Merge: true, Values: map[string]*string{"route": v("local"), "max_tokens": nil}})
	if err != nil {
		t.Fatal(err)
	}
	if dc.Version != 2 || len(dc.Values) != 1 || dc.Values["route"] != "local" {
		t.Fatalf("desired %+v", dc)
	}
	waitFor(t, "desired v2 at device", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.desired) > 0 && d.desired[len(d.desired)-1].Version == 2
	})
	rep, _ := json.Marshal(fleetwire.ReportedConfig{Version: 2, Applied: true})
	if _, err := d.cm.Publish(context.Background(), pub(topics.Device("car-1", fleetwire.SuffixConfigReported), rep, true)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "reported v2", func() bool {
		dev, _ := m.Device("car-1")
		return dev.Reported != nil && dev.Reported.Version == 2 && dev.Reported.Applied
	})

	// Command and result.
	cs, err := m.SendCommand(context.Background(), "car-1", "reload-model", map[string]string{"file": "p.onnx"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "command at device", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.cmds) == 1 && d.cmds[0].ID == cs.ID && d.cmds[0].Args["file"] == "p.onnx"
	})
	if dev, _ := m.Device("car-1"); dev.PendingCommands != 1 {
		t.Fatalf("pending %d", dev.PendingCommands)
	}
	res, _ := json.Marshal(fleetwire.CommandResult{ID: cs.ID, OK: true, Output: "reloaded"})
	if _, err := d.cm.Publish(context.Background(), pub(topics.Device("car-1", fleetwire.SuffixCmdResult), res, false)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "command done", func() bool {
		c, _ := m.Command("car-1", cs.ID)
		return c != nil && c.State == CommandDone && c.Result.Output == "reloaded"
	})
	if dev, _ := m.Device("car-1"); dev.PendingCommands != 0 || len(dev.Commands) != 1 {
		t.Fatalf("after result: pending %d, commands %d", dev.PendingCommands, len(dev.Commands))
	}

	if got := dupMetric.Value(); got < dupsBefore+2 || got != float64(dev.Telemetry.Duplicates) {
		t.Fatalf("duplicates metric %v (before %v, device %d)", got, dupsBefore, dev.Telemetry.Duplicates)
	}
	checkStore(t, m)
}

// TestManagerDownEmbedded stops the Manager while devices keep producing
// and the broker stays up: nothing is acknowledged meanwhile, the devices
// resend, and after the Manager is back every record is stored exactly once.
func TestManagerDownEmbedded(t *testing.T) {
	b := startBroker(t, broker.Config{DevAuth: true})
	dir := t.TempDir()
	m1, err := Open(Config{DataDir: dir, Broker: b})
	if err != nil {
		t.Fatal(err)
	}
	var devs []*simDevice
	var ids []string
	for i := range 5 {
		id := fmt.Sprintf("dev-%d", i)
		ids = append(ids, id)
		devs = append(devs, newSimDevice(t, "mqtt://"+b.TCPAddr(), id, simOpts{retryAfter: 200 * time.Millisecond}))
	}
	for _, d := range devs {
		d.generate(300)
	}
	waitFor(t, "some telemetry stored", func() bool { c, _ := m1.Counts(); return c.Stored >= 300 })
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		d.generate(300) // produced while the cloud is down
	}
	// Resends pile up unacknowledged while the Manager is away.
	waitFor(t, "resends while down", func() bool {
		_, sent := devs[0].stats()
		return sent > 8
	})
	m2 := openManager(t, Config{DataDir: dir, Broker: b})
	for _, d := range devs {
		waitFor(t, d.id+" acked", d.ackedAll)
	}
	checkComplete(t, m2, ids, 600)
	checkStore(t, m2)
}

// TestCloudRestartEmbedded restarts broker and Manager together (the cloud
// process) with the broker store: devices reconnect to their sessions and
// nothing is lost or counted twice.
func TestCloudRestartEmbedded(t *testing.T) {
	dir := t.TempDir()
	port := mosquittotest.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	start := func() (*broker.Broker, *Manager) {
		b, err := broker.Start(broker.Config{TCPAddr: addr, DevAuth: true, StorePath: filepath.Join(dir, "broker.db")})
		if err != nil {
			t.Fatal(err)
		}
		m, err := Open(Config{DataDir: dir, Broker: b})
		if err != nil {
			t.Fatal(err)
		}
		return b, m
	}
	b1, m1 := start()
	var devs []*simDevice
	var ids []string
	for i := range 3 {
		id := fmt.Sprintf("veh-%d", i)
		ids = append(ids, id)
		devs = append(devs, newSimDevice(t, "mqtt://"+addr, id, simOpts{retryAfter: 200 * time.Millisecond}))
	}
	for _, d := range devs {
		d.generate(400)
	}
	waitFor(t, "some telemetry stored", func() bool { c, _ := m1.Counts(); return c.Stored >= 200 })
	cs, err := m1.SendCommand(context.Background(), "veh-0", "update", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		d.generate(100) // buffered on the device while the cloud is gone
	}
	b2, m2 := start()
	t.Cleanup(func() { m2.Close(); b2.Close() })
	for _, d := range devs {
		waitFor(t, d.id+" acked", d.ackedAll)
	}
	checkComplete(t, m2, ids, 500)
	// The command reached the device once or more (queued in its session and
	// re-sent by reconcile); the device dedupes by id.
	waitFor(t, "command delivered", func() bool {
		devs[0].mu.Lock()
		defer devs[0].mu.Unlock()
		for _, c := range devs[0].cmds {
			if c.ID == cs.ID {
				return true
			}
		}
		return false
	})
	checkStore(t, m2)
}
