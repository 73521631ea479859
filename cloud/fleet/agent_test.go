package fleet

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/phaseless/phaseless/agent/fleetclient"
	"github.com/phaseless/phaseless/agent/telemetry"
	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// TestManagerDownWithAgents is TestManagerDownEmbedded with the real device
// side: agent/fleetclient clients with their bbolt telemetry stores. Records are
// appended before, during and after a Manager outage; in the end each
// device's store is empty (everything acknowledged and deleted) and the
// cloud holds exactly the appended records, each once.
func TestManagerDownWithAgents(t *testing.T) {
	b := startBroker(t, broker.Config{DevAuth: true})
	dir := t.TempDir()
	m1, err := Open(Config{DataDir: dir, Broker: b})
	if err != nil {
		t.Fatal(err)
	}
	type agent struct {
		id    string
		store *telemetry.Store
		seqs  map[uint64]bool
	}
	var agents []*agent
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 3)
	for i := range 3 {
		id := fmt.Sprintf("agent-%d", i)
		st, err := telemetry.Open(filepath.Join(t.TempDir(), "telemetry.db"), telemetry.Config{})
		if err != nil {
			t.Fatal(err)
		}
		c, err := fleetclient.New(fleetclient.Config{BrokerURL: "mqtt://" + b.TCPAddr(), DeviceID: id, Version: "t", Store: st,
			StatePath: filepath.Join(t.TempDir(), "fleet.db"), BackoffMin: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond,
			AckTimeout: 500 * time.Millisecond, UplinkRate: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		go func() { done <- c.Run(ctx) }()
		agents = append(agents, &agent{id: id, store: st, seqs: map[uint64]bool{}})
	}
	defer func() {
		cancel()
		for range agents {
			if err := <-done; err != nil && err != context.Canceled {
				t.Errorf("agent run: %v", err)
			}
		}
		for _, a := range agents {
			a.store.Close()
		}
	}()
	appendN := func(n int) {
		for _, a := range agents {
			for i := range n {
				seq, err := a.store.AppendRequest(ctx, fleetwire.RequestRecord{TraceID: fmt.Sprintf("%s-%d", a.id, i), Decision: "local", Outcome: "ok"})
				if err != nil {
					t.Fatal(err)
				}
				a.seqs[seq] = true
			}
		}
	}
	appendN(300)
	waitFor(t, "some telemetry stored", func() bool { c, _ := m1.Counts(); return c.Stored >= 300 })
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}
	appendN(300)            // produced while the cloud is down
	time.Sleep(time.Second) // let the agents hit their ack timeouts and resend into the void
	m2 := openManager(t, Config{DataDir: dir, Broker: b})
	appendN(100)
	for _, a := range agents {
		waitFor(t, a.id+" store drained", func() bool { return a.store.Stats().Records == 0 })
	}
	got := exportSeqs(t, m2, "")
	total := 0
	for _, a := range agents {
		if len(got[a.id]) != len(a.seqs) {
			t.Fatalf("%s: cloud has %d records, device appended %d", a.id, len(got[a.id]), len(a.seqs))
		}
		for _, s := range got[a.id] {
			if !a.seqs[s] {
				t.Fatalf("%s: cloud has seq %d the device never appended", a.id, s)
			}
		}
		total += len(a.seqs)
	}
	c, _ := m2.Counts()
	if c.Stored != uint64(total) || c.Ingested != uint64(total) {
		t.Fatalf("counts %+v, want %d", c, total)
	}
	t.Logf("%d records from %d agents across a Manager outage; %d duplicates recognised", total, len(agents), c.Duplicates)
	checkStore(t, m2)
}
