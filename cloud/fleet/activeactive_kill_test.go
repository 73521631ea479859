package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet/pgtest"
	"github.com/phaseless/phaseless/cloud/fleetapi"
	"github.com/phaseless/phaseless/internal/crashtest"
)

// TestActiveActiveKill runs three managers as processes of their own on
// one PostgreSQL and one Mosquitto, and kills one with SIGKILL in the
// middle of a staged rollout and of a telemetry burst: the rollout
// finishes, every record is stored exactly once, and each device gets
// one update command, once.
func TestActiveActiveKill(t *testing.T) {
	child := func(arg string, ack *crashtest.Acker) {
		f := strings.Split(arg, "|") // db, broker, data dir, index
		m, err := Open(Config{DataDir: f[2], DB: f[0], RolloutInterval: 100 * time.Millisecond, External: &External{
			URL: f[1], Username: "phaseless-cloud", Password: "cloud-pw", ClientID: "phaseless-cloud-" + f[3], SessionExpiry: time.Second}})
		if err != nil {
			crashtest.Fail("open: %v", err)
		}
		for m.Ready() != nil {
			time.Sleep(20 * time.Millisecond)
		}
		ack.Ack("ready")
		select {} // until killed
	}
	if crashtest.IsChild(t) {
		crashtest.Start(t, "", 0, child)
	}
	db := pgtest.CreateDB(t, pgtest.Start(t), "fleet")
	users := map[string]string{"phaseless-cloud": "cloud-pw"}
	var ids []string
	for i := range 9 {
		id := fmt.Sprintf("kd-%d", i)
		ids = append(ids, id)
		users[id] = "pw-" + id
	}
	brokerURL := startMosquitto(t, users, "phaseless-cloud")
	dir := t.TempDir()
	var procs []*crashtest.Proc
	for i := range 3 {
		p := crashtest.Start(t, fmt.Sprintf("%s|%s|%s|%d", db, brokerURL, dir, i), i, child)
		if got := p.Ack(); got != "ready" {
			t.Fatalf("manager %d: %q", i, got)
		}
		procs = append(procs, p)
	}
	defer func() {
		for _, p := range procs[1:] {
			p.Kill()
		}
	}()
	st, err := openPGStore(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	var devs []*simDevice
	for _, id := range ids {
		devs = append(devs, newSimDevice(t, brokerURL, id, simOpts{user: id, pass: users[id], updateTo: "sim-2"}))
	}
	waitFor(t, "every device registered", func() bool {
		ds, _ := st.devices()
		return len(ds) == len(ids)
	})

	// A rollout in three stages, stepped every 100 ms by whichever
	// manager claims it, and a telemetry burst beside it.
	r := &Rollout{ID: "r-kill", Spec: RolloutSpec{Stages: []float64{0.34, 0.67, 1}, UpdateTimeout: fleetapi.Duration(time.Minute)},
		Kind: "agent", Version: "sim-2", URL: "http://example.invalid/a.plota", State: RolloutRunning, Devices: map[string]*RolloutDevice{}}
	if err := st.putRollout(r); err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		d.generate(2000)
	}
	// Kill a manager once the rollout is under way and records are
	// arriving, neither finished.
	waitFor(t, "the rollout's first stage and the first records", func() bool {
		r, _ := st.rollout("r-kill")
		c, _ := st.counts()
		return r != nil && len(r.Devices) > 0 && c.Stored > 0
	})
	r0, _ := st.rollout("r-kill")
	c0, _ := st.counts()
	procs[0].Kill()
	t.Logf("killed manager 0 at rollout stage %d (%d devices, state %s), %d of %d records stored", r0.Stage, len(r0.Devices), r0.State, c0.Stored, 2000*len(ids))

	for _, d := range devs {
		waitFor(t, d.id+" acknowledged", d.ackedAll)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) { // a hang guard
		r, _ := st.rollout("r-kill")
		if r.State == RolloutDone {
			break
		}
		if time.Now().After(deadline) {
			ds, _ := st.devicesWithCommands()
			for _, d := range ds {
				t.Logf("%s: status %+v, commands %+v, in the rollout %+v", d.ID, d.Status, d.Commands, r.Devices[d.ID])
			}
			t.Fatalf("the rollout did not finish: %s %s, stage %d", r.State, r.Reason, r.Stage)
		}
	}
	c, err := st.counts()
	if err != nil {
		t.Fatal(err)
	}
	want := uint64(2000 * len(ids))
	if c.Stored != want || c.Ingested != want {
		t.Fatalf("counts %+v, want %d records stored once", c, want)
	}
	seen := map[string]bool{}
	err = st.export(time.Time{}, "", func(line []byte) error {
		var rec ExportedRecord
		if err := json.Unmarshal(line, &rec); err != nil {
			return err
		}
		k := fmt.Sprintf("%s/%d", rec.DeviceID, rec.Seq)
		if seen[k] {
			return fmt.Errorf("%s stored twice", k)
		}
		seen[k] = true
		return nil
	})
	if err != nil || uint64(len(seen)) != want {
		t.Fatalf("export: %d records, %v", len(seen), err)
	}
	final, _ := st.rollout("r-kill")
	repeats := 0
	for _, d := range devs {
		d.mu.Lock()
		applied := maps.Clone(d.applied)
		d.mu.Unlock()
		rd := final.Devices[d.id]
		if rd == nil || rd.State != DeviceSucceeded {
			t.Errorf("%s: %+v", d.id, rd)
			continue
		}
		// One update command per device: its id is the one the rollout
		// recorded. A repeat of that id (resendStale) is not a second
		// command; the device applies it once.
		if len(applied) != 1 || applied[rd.Command] == 0 {
			t.Errorf("%s got update commands %v, the rollout recorded %s", d.id, applied, rd.Command)
		}
		repeats += applied[rd.Command] - 1
	}
	t.Logf("repeated publishes of an update command: %d", repeats)
	fmt.Fprintln(os.Stderr) // keep the child's output apart in -v runs
}
