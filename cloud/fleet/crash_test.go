package fleet

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phaseless/phaseless/internal/crashtest"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

const crashDevices = 4

// TestKillDuringIngestStoresEachRecordOnce kills a cloud that ingests
// telemetry from four devices at once (a third of the batches redeliver
// records it already has, as QoS 1 does after a reconnect) and records
// commands and their results, many times over one fleet.db. After every
// kill: every acknowledged record is stored, no (device, seq) is stored
// twice, the counters match what is stored, every acknowledged command
// and result is there, and bbolt's check is clean.
//
// It kills processes, not goroutines: the race detector adds nothing but
// minutes, so under -race it is skipped and make test runs it without.
func TestKillDuringIngestStoresEachRecordOnce(t *testing.T) {
	if raceEnabled {
		t.Skip("make test runs this crash test without -race")
	}
	path := filepath.Join(t.TempDir(), "fleet.db")
	ackedRecs := map[string]bool{} // "dev seq"
	ackedCmds := map[string]string{}
	crashtest.Run(t, crashtest.Config{
		Progress: true,                    // the test checks that something was acknowledged
		Cycles:   crashtest.Cycles(t, 30), // 100 with PHASELESS_CRASH_CYCLES=100
		Arg:      path,
		Child:    ingestChild,
		Verify: func(t *testing.T, _ int, lines, _ []string) {
			for _, l := range lines {
				f := strings.Fields(l)
				switch {
				case f[0] == "rec" && len(f) == 3:
					ackedRecs[f[1]+" "+f[2]] = true
				case f[0] == "cmd" && len(f) == 3:
					ackedCmds[f[1]+" "+f[2]] = CommandPending
				case f[0] == "res" && len(f) == 3:
					ackedCmds[f[1]+" "+f[2]] = CommandDone
				default:
					t.Fatalf("bad line %q", l)
				}
			}
			verifyFleetStore(t, path, ackedRecs, ackedCmds)
		},
	})
	if len(ackedRecs) == 0 || len(ackedCmds) == 0 {
		t.Fatalf("nothing acknowledged: %d records, %d commands", len(ackedRecs), len(ackedCmds))
	}
}

// ingestChild ingests until it is killed and acknowledges each record and
// command once the call that stored it returned.
func ingestChild(path string, ack *crashtest.Acker) {
	st, err := openStore(path)
	if err != nil {
		crashtest.Fail("open: %v", err)
	}
	var wg sync.WaitGroup
	for d := range crashDevices {
		id := fmt.Sprint("car-", d)
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(d)))
			dev, err := st.device(id)
			if err != nil {
				crashtest.Fail("device %s: %v", id, err)
			}
			next := uint64(1)
			if dev != nil {
				next = dev.Telemetry.LastSeq + 1
			}
			for {
				from, n := next, 1+rng.IntN(16)
				if next > 1 && rng.IntN(3) == 0 { // redeliver an older range
					from = 1 + rng.Uint64N(next-1)
				}
				b := &fleetwire.TelemetryBatch{DeviceID: id}
				for seq := from; seq < from+uint64(n); seq++ {
					b.Records = append(b.Records, fleetwire.Record{Seq: seq, Time: time.Unix(1700000000, 0), Kind: "crash", Data: json.RawMessage(fmt.Sprint(seq))})
				}
				if _, err := st.ingest(id, b, time.Now(), 1<<30, 0); err != nil {
					crashtest.Fail("ingest: %v", err)
				}
				for _, r := range b.Records {
					ack.Ack("rec %s %d", id, r.Seq)
				}
				next = max(next, from+uint64(n))
			}
		})
	}
	wg.Go(func() {
		dev := fmt.Sprint("cmd-", os.Getpid()) // one device per life keeps commandsTx short
		for n := 0; ; n++ {
			id := fmt.Sprint("c", n)
			now := time.Now()
			cs := CommandState{DeviceID: dev, Command: fleetwire.Command{ID: id, Name: "reload-model", IssuedAt: now}, State: CommandPending, UpdatedAt: now}
			if _, err := st.addCommand(cs, 1<<20); err != nil {
				crashtest.Fail("add command: %v", err)
			}
			ack.Ack("cmd %s %s", dev, id)
			if _, err := st.commandResult(dev, &fleetwire.CommandResult{ID: id, OK: true}, time.Now()); err != nil {
				crashtest.Fail("command result: %v", err)
			}
			ack.Ack("res %s %s", dev, id)
		}
	})
	wg.Wait()
}

func verifyFleetStore(t *testing.T, path string, recs map[string]bool, cmds map[string]string) {
	t.Helper()
	crashtest.CheckBolt(t, path)
	st, err := openStore(path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer st.db.Close()
	stored := map[string]bool{}
	perDev := map[string]uint64{}
	err = st.export(time.Time{}, "", func(line []byte) error {
		var r ExportedRecord
		if err := json.Unmarshal(line, &r); err != nil {
			return err
		}
		k := fmt.Sprint(r.DeviceID, " ", r.Seq)
		if stored[k] {
			return fmt.Errorf("record %s stored twice", k)
		}
		stored[k] = true
		perDev[r.DeviceID]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for k := range recs {
		if !stored[k] {
			t.Fatalf("acknowledged record %s lost", k)
		}
	}
	c, err := st.counts()
	if err != nil {
		t.Fatal(err)
	}
	if c.Stored != uint64(len(stored)) || c.Ingested != c.Stored || c.Deleted != 0 {
		t.Fatalf("counts %+v, %d records stored", c, len(stored))
	}
	for d := range crashDevices {
		id := fmt.Sprint("car-", d)
		dev, err := st.device(id)
		if err != nil {
			t.Fatal(err)
		}
		if dev == nil {
			if perDev[id] != 0 {
				t.Fatalf("%s has records but no device entry", id)
			}
			continue
		}
		if dev.Telemetry.Stored != perDev[id] || dev.Telemetry.Ingested != perDev[id] || !stored[fmt.Sprint(id, " ", dev.Telemetry.LastSeq)] {
			t.Fatalf("%s: telemetry %+v, %d records stored", id, dev.Telemetry, perDev[id])
		}
	}
	for k, want := range cmds {
		dev, id, _ := strings.Cut(k, " ")
		cs, err := st.command(dev, id)
		if err != nil || cs == nil {
			t.Fatalf("acknowledged command %s lost: %v", k, err)
		}
		if want == CommandDone && cs.State != CommandDone {
			t.Fatalf("command %s: acknowledged result lost, state %s", k, cs.State)
		}
	}
}
