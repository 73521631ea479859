package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet/pgtest"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// storeBackend is one fleetStore kind: setup readies it for a test (a
// PostgreSQL cluster: skipped without the binaries, except in CI) and
// returns fresh, which opens an empty store of that kind; reopen opens the
// same store again — a second manager on the same database — or is nil
// where the kind has one opener at a time (bbolt).
type storeBackend struct {
	name  string
	setup func(t *testing.T) (fresh func(t *testing.T) (st fleetStore, reopen func() fleetStore))
}

var storeBackends = []storeBackend{
	{"bbolt", func(*testing.T) func(*testing.T) (fleetStore, func() fleetStore) {
		return func(t *testing.T) (fleetStore, func() fleetStore) {
			st, err := openStore(filepath.Join(t.TempDir(), "fleet.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.close() })
			return st, nil
		}
	}},
	{"postgres", func(t *testing.T) func(*testing.T) (fleetStore, func() fleetStore) {
		url := pgtest.Start(t)
		var n atomic.Int64
		return func(t *testing.T) (fleetStore, func() fleetStore) {
			dbURL := pgtest.CreateDB(t, url, fmt.Sprintf("fleet%d", n.Add(1)))
			open := func() fleetStore {
				st, err := openPGStore(context.Background(), dbURL)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { st.close() })
				return st
			}
			return open(), open
		}
	}},
}

// storeCase is one behaviour every backend must have.
type storeCase struct {
	name string
	run  func(t *testing.T, st fleetStore, reopen func() fleetStore)
}

// TestStoreSuite runs every storeCase against every backend, so the
// Manager sees one behaviour whichever store it is on.
func TestStoreSuite(t *testing.T) {
	for _, b := range storeBackends {
		t.Run(b.name, func(t *testing.T) {
			fresh := b.setup(t)
			for _, c := range storeCases {
				t.Run(c.name, func(t *testing.T) {
					st, reopen := fresh(t)
					c.run(t, st, reopen)
				})
			}
		})
	}
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func batchOf(dev string, seqs ...uint64) *fleetwire.TelemetryBatch {
	b := &fleetwire.TelemetryBatch{DeviceID: dev}
	for _, s := range seqs {
		b.Records = append(b.Records, fleetwire.Record{Seq: s, Time: t0, Kind: fleetwire.KindRequest, Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, s))})
	}
	return b
}

func seqRange(from, to uint64) []uint64 {
	var out []uint64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

// exported is the export's (device, seq) pairs in order.
func exported(t *testing.T, st fleetStore, since time.Time, dev string) []string {
	t.Helper()
	var out []string
	err := st.export(since, dev, func(line []byte) error {
		var r ExportedRecord
		if err := json.Unmarshal(line, &r); err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("%s/%d", r.DeviceID, r.Seq))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

var storeCases = []storeCase{
	{"IngestIdempotentOnDeviceSeq", func(t *testing.T, st fleetStore, _ func() fleetStore) {
		res := must[ingestResult](t)(st.ingest("car-1", batchOf("car-1", 1, 2, 3, 4, 5), t0, 1000, 0))
		if res.stored != 5 || res.duplicates != 0 || !res.newDevice || res.upTo != 5 {
			t.Fatalf("first batch: %+v", res)
		}
		res = must[ingestResult](t)(st.ingest("car-1", batchOf("car-1", 3, 4, 5, 6, 7), t0.Add(time.Second), 1000, 0))
		if res.stored != 2 || res.duplicates != 3 || res.newDevice || res.upTo != 7 {
			t.Fatalf("redelivery: %+v", res)
		}
		must[ingestResult](t)(st.ingest("car-2", batchOf("car-2", 1), t0.Add(2*time.Second), 1000, 0))
		c := must[Counts](t)(st.counts())
		if c.Stored != 8 || c.Ingested != 8 || c.Duplicates != 3 || c.Devices != 2 {
			t.Fatalf("counts %+v", c)
		}
		d := must[*Device](t)(st.device("car-1"))
		if d.Telemetry.Stored != 7 || d.Telemetry.LastSeq != 7 || d.Telemetry.Duplicates != 3 || d.Telemetry.Batches != 2 || !d.FirstSeen.Equal(t0) {
			t.Fatalf("device %+v", d.Telemetry)
		}
		if got := fmt.Sprint(exported(t, st, time.Time{}, "")); got != "[car-1/1 car-1/2 car-1/3 car-1/4 car-1/5 car-1/6 car-1/7 car-2/1]" {
			t.Fatalf("export %s", got)
		}
		if got := fmt.Sprint(exported(t, st, t0.Add(time.Second), "car-1")); got != "[car-1/6 car-1/7]" {
			t.Fatalf("export since, one device: %s", got)
		}
	}},
	{"RetentionKeepsNewestAndRemembersDeleted", func(t *testing.T, st fleetStore, _ func() fleetStore) {
		for i := range uint64(4) {
			must[ingestResult](t)(st.ingest("car-1", batchOf("car-1", seqRange(i*5+1, i*5+5)...), t0.Add(time.Duration(i)*time.Second), 12, 0))
		}
		c := must[Counts](t)(st.counts())
		if c.Stored != 12 || c.Deleted != 8 || c.Ingested != 20 {
			t.Fatalf("counts %+v", c)
		}
		if d := must[*Device](t)(st.device("car-1")); d.Telemetry.Stored != 12 {
			t.Fatalf("device stored %d", d.Telemetry.Stored)
		}
		// A redelivery of deleted records stores nothing.
		res := must[ingestResult](t)(st.ingest("car-1", batchOf("car-1", 1, 2, 3), t0.Add(5*time.Second), 12, 0))
		if res.stored != 0 || res.duplicates != 3 {
			t.Fatalf("redelivery of deleted records: %+v", res)
		}
		// By age, in the periodic sweep.
		n := must[int](t)(st.prune(t0.Add(time.Hour+2500*time.Millisecond), 1000, time.Hour))
		if n != 7 { // 9, 10 (ingested at t0+1s) and 11..15 (t0+2s)
			got := exported(t, st, time.Time{}, "")
			t.Fatalf("age prune deleted %d, left %v", n, got)
		}
		if got := fmt.Sprint(exported(t, st, time.Time{}, "")); got != "[car-1/16 car-1/17 car-1/18 car-1/19 car-1/20]" {
			t.Fatalf("left %s", got)
		}
	}},
	{"ConcurrentIngestStoresEachRecordOnce", func(t *testing.T, st fleetStore, reopen func() fleetStore) {
		// Four writers — four managers on one database where the backend
		// allows it — get the same batches (a shared subscription's
		// redelivery after a manager died lands on another).
		writers := []fleetStore{st, st, st, st}
		if reopen != nil {
			writers = []fleetStore{st, reopen(), reopen(), reopen()}
		}
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for w, ws := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for dev := range 5 {
					for b := range uint64(4) {
						id := fmt.Sprintf("car-%d", (dev+w)%5)
						if _, err := ws.ingest(id, batchOf(id, seqRange(b*10+1, b*10+10)...), t0, 1_000_000, 0); err != nil {
							errs <- err
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		c := must[Counts](t)(st.counts())
		if c.Stored != 200 || c.Ingested != 200 || c.Duplicates != 600 || c.Devices != 5 {
			t.Fatalf("counts %+v", c)
		}
		if n := len(exported(t, st, time.Time{}, "")); n != 200 {
			t.Fatalf("exported %d records", n)
		}
		for _, d := range must[[]*Device](t)(st.devices()) {
			if d.Telemetry.Stored != 40 || d.Telemetry.Batches != 16 || d.Telemetry.LastSeq != 40 {
				t.Fatalf("%s: %+v", d.ID, d.Telemetry)
			}
		}
	}},
	{"Commands", func(t *testing.T, st fleetStore, _ func() fleetStore) {
		for i := range 5 {
			at := t0.Add(time.Duration(i) * time.Second)
			cs := CommandState{DeviceID: "car-1", Command: fleetwire.Command{ID: fmt.Sprintf("c%d", i), Name: "reload-model", IssuedAt: at}, State: CommandPending, UpdatedAt: at}
			if added := must[bool](t)(st.addCommand(cs, 3)); !added {
				t.Fatalf("%s not added", cs.ID)
			}
			if i == 4 { // the same id again: kept as it was, not added
				cs.Name = "rollback"
				if added := must[bool](t)(st.addCommand(cs, 3)); added {
					t.Fatal("a second command under one id was added")
				}
				if c := must[*CommandState](t)(st.command("car-1", cs.ID)); c.Name != "reload-model" {
					t.Fatalf("stored command changed to %+v", c)
				}
			}
			if i == 1 {
				if ok := must[bool](t)(st.commandResult("car-1", &fleetwire.CommandResult{ID: "c0", OK: true}, at)); !ok {
					t.Fatal("result of c0 not found")
				}
				if ok := must[bool](t)(st.commandResult("car-1", &fleetwire.CommandResult{ID: "c1", OK: false, Error: "no"}, at)); !ok {
					t.Fatal("result of c1 not found")
				}
			}
		}
		// Finished commands went first: c2..c4 pending, kept.
		d := must[*Device](t)(st.device("car-1"))
		var ids []string
		for _, c := range d.Commands {
			ids = append(ids, c.ID+":"+c.State)
		}
		if fmt.Sprint(ids) != "[c4:pending c3:pending c2:pending]" || d.PendingCommands != 3 {
			t.Fatalf("commands %v, pending %d", ids, d.PendingCommands)
		}
		if ok := must[bool](t)(st.commandResult("car-1", &fleetwire.CommandResult{ID: "c0", OK: true}, t0)); ok {
			t.Fatal("result of a trimmed command was found")
		}
		must[bool](t)(st.commandResult("car-1", &fleetwire.CommandResult{ID: "c3", OK: false, Error: "disk full"}, t0))
		cs := must[*CommandState](t)(st.command("car-1", "c3"))
		if cs == nil || cs.State != CommandFailed || cs.Result.Error != "disk full" {
			t.Fatalf("c3 %+v", cs)
		}
		if cs := must[*CommandState](t)(st.command("car-1", "nope")); cs != nil {
			t.Fatalf("unknown command %+v", cs)
		}
		devs := must[[]*Device](t)(st.devicesWithCommands())
		if len(devs) != 1 || len(devs[0].Commands) != 3 || devs[0].PendingCommands != 2 {
			t.Fatalf("devicesWithCommands %+v", devs)
		}
		if devs := must[[]*Device](t)(st.devices()); devs[0].Commands != nil || devs[0].PendingCommands != 2 {
			t.Fatalf("devices: %+v", devs[0])
		}
		// A status (updateDeviceConfig) counts them in its transaction.
		for id, want := range map[string]int{"car-1": 2, "car-2": 0} {
			d, _, err := st.updateDeviceConfig(id, t0, true, func(*Device) error { return nil })
			if err != nil || d.PendingCommands != want {
				t.Fatalf("updateDeviceConfig %s: pending %v, want %d (err %v)", id, d.PendingCommands, want, err)
			}
		}
	}},
	{"ConfigLayersAndOverrides", func(t *testing.T, st fleetStore, _ func() fleetStore) {
		set := func(d *Device) error { d.Labels = map[string]string{"region": "eu"}; return nil }
		must[*Device](t)(st.updateDevice("car-1", t0, true, set))
		must[*Device](t)(st.updateDevice("car-2", t0, true, func(*Device) error { return nil }))
		if d := must[*Device](t)(st.updateDevice("ghost", t0, false, set)); d != nil {
			t.Fatalf("updateDevice without create made %+v", d)
		}
		v := func(s string) *string { return &s }
		l, changed, err := st.setLayer("region=eu", ConfigUpdate{Values: map[string]*string{"route-threshold": v("0.4")}}, t0)
		if err != nil || l.Version != 1 || len(changed) != 1 || changed[0].ID != "car-1" || changed[0].Desired.Values["route-threshold"] != "0.4" {
			t.Fatalf("setLayer: %+v %+v %v", l, changed, err)
		}
		dev, ch, err := st.updateDeviceConfig("car-1", t0, false, func(d *Device) error {
			d.Overrides = map[string]string{"route-threshold": "0.6"}
			return nil
		})
		if err != nil || !ch || dev.Desired.Values["route-threshold"] != "0.6" || dev.Desired.Version != 2 {
			t.Fatalf("override: %+v %v %v", dev, ch, err)
		}
		if _, ch, _ := st.updateDeviceConfig("car-1", t0, false, func(*Device) error { return nil }); ch {
			t.Fatal("no change, yet a new version")
		}
		if ls := must[map[string]*ConfigLayer](t)(st.layers()); len(ls) != 1 || ls["region=eu"].Values["route-threshold"] != "0.4" {
			t.Fatalf("layers %+v", ls)
		}
		// Emptied, the layer goes; car-1 keeps its override.
		_, changed, err = st.setLayer("region=eu", ConfigUpdate{Values: map[string]*string{"route-threshold": nil}, Merge: true}, t0)
		if err != nil || len(changed) != 0 {
			t.Fatalf("emptying: %+v %v", changed, err)
		}
		if ls := must[map[string]*ConfigLayer](t)(st.layers()); len(ls) != 0 {
			t.Fatalf("layers %+v", ls)
		}
		if d := must[*Device](t)(st.device("car-1")); d.Labels["region"] != "eu" || d.Desired.Values["route-threshold"] != "0.6" {
			t.Fatalf("car-1 %+v", d)
		}
	}},
	{"Rollouts", func(t *testing.T, st fleetStore, _ func() fleetStore) {
		for _, id := range []string{"r2", "r1"} {
			if err := st.putRollout(&Rollout{ID: id, Version: "1.0"}); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.updateRollout("r1", func(r *Rollout) error { r.Version = "1.1"; return nil }); err != nil {
			t.Fatal(err)
		}
		if err := st.updateRollout("r9", func(*Rollout) error { return nil }); !errors.Is(err, ErrUnknownRollout) {
			t.Fatalf("unknown rollout: %v", err)
		}
		boom := errors.New("boom")
		if err := st.updateRollout("r1", func(r *Rollout) error { r.Version = "x"; return boom }); !errors.Is(err, boom) {
			t.Fatalf("fn's error: %v", err)
		}
		if r := must[*Rollout](t)(st.rollout("r1")); r.Version != "1.1" {
			t.Fatalf("r1 %+v", r)
		}
		if r := must[*Rollout](t)(st.rollout("r9")); r != nil {
			t.Fatalf("r9 %+v", r)
		}
		claimed, err := st.claimRollout("r2", func(r *Rollout) error { r.Version = "2.0"; return nil })
		if err != nil || !claimed {
			t.Fatalf("claim: %v %v", claimed, err)
		}
		if claimed, err := st.claimRollout("r9", func(*Rollout) error { t.Fatal("fn ran on no rollout"); return nil }); claimed || err != nil {
			t.Fatalf("claim of no rollout: %v %v", claimed, err)
		}
		rs := must[[]*Rollout](t)(st.rollouts())
		if len(rs) != 2 || rs[0].ID != "r1" || rs[1].ID != "r2" || rs[1].Version != "2.0" {
			t.Fatalf("rollouts %+v", rs)
		}
	}},
	{"RolloutClaimedByOneManager", func(t *testing.T, st fleetStore, reopen func() fleetStore) {
		if reopen == nil {
			t.Skip("one writer: the lease, not the store, keeps a second manager out")
		}
		if err := st.putRollout(&Rollout{ID: "r1"}); err != nil {
			t.Fatal(err)
		}
		other := reopen()
		inside, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := st.claimRollout("r1", func(r *Rollout) error {
				close(inside)
				<-release
				r.Version = "first"
				return nil
			})
			done <- err
		}()
		<-inside
		// While the first manager steps it, the second skips it.
		claimed, err := other.claimRollout("r1", func(*Rollout) error { t.Error("stepped twice at once"); return nil })
		if err != nil || claimed {
			t.Fatalf("second claim during the first: %v %v", claimed, err)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		// Then it steps it, from the first one's result.
		claimed, err = other.claimRollout("r1", func(r *Rollout) error {
			if r.Version != "first" {
				t.Errorf("second step saw %q", r.Version)
			}
			return nil
		})
		if err != nil || !claimed {
			t.Fatalf("claim after the first: %v %v", claimed, err)
		}
	}},
	{"Artifacts", func(t *testing.T, st fleetStore, _ func() fleetStore) {
		if err := st.putArtifact(&ArtifactInfo{ID: "ab", Kind: "router", Version: "1.1", Size: 7}); err != nil {
			t.Fatal(err)
		}
		if a := must[*ArtifactInfo](t)(st.artifact("ab")); a == nil || a.Version != "1.1" || a.Size != 7 {
			t.Fatalf("artifact %+v", a)
		}
		if a := must[*ArtifactInfo](t)(st.artifact("cd")); a != nil {
			t.Fatalf("missing artifact %+v", a)
		}
		if as := must[[]*ArtifactInfo](t)(st.artifacts()); len(as) != 1 || as[0].ID != "ab" {
			t.Fatalf("artifacts %+v", as)
		}
	}},
	{"ShadowGradeOnce", func(t *testing.T, st fleetStore, _ func() fleetStore) {
		p := 0.3
		key := commandKey("car-1", "trace-1")
		g := fleetwire.ShadowGrade{TraceID: "trace-1", OK: true, CloudProb: &p, Path: "local"}
		for range 2 {
			if _, _, stale, err := st.storeShadowGrade("car-1", key, g, t0); err != nil || stale {
				t.Fatalf("stale %v, %v", stale, err)
			}
		}
		// Scored by a router the device does not run: stored, not calibrated.
		old := g
		old.TraceID, old.Router = "trace-old", "0.9"
		if _, _, stale, err := st.storeShadowGrade("car-1", commandKey("car-1", "trace-old"), old, t0); err != nil || !stale {
			t.Fatalf("grade of another router: stale %v, %v", stale, err)
		}
		if !must[bool](t)(st.shadowGraded(key)) || must[bool](t)(st.shadowGraded(commandKey("car-1", "trace-2"))) {
			t.Fatal("shadowGraded wrong")
		}
		d := must[*Device](t)(st.device("car-1"))
		if d.Telemetry.ShadowPassed != 2 || d.Telemetry.Stored != 2 || d.Router == nil || d.Router.Outcomes != 1 {
			t.Fatalf("device %+v router %+v", d.Telemetry, d.Router)
		}
		if c := must[Counts](t)(st.counts()); c.Stored != 2 {
			t.Fatalf("counts %+v", c)
		}
	}},
	{"IdentityKept", func(t *testing.T, st fleetStore, reopen func() fleetStore) {
		id := must[string](t)(st.id())
		if len(id) != 32 {
			t.Fatalf("id %q", id)
		}
		if reopen != nil {
			if id2 := must[string](t)(reopen().id()); id2 != id {
				t.Fatalf("reopened: %s, was %s", id2, id)
			}
		}
	}},
}
