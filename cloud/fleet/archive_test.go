package fleet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/cloud/fleetapi/archive"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// archivedAndStored returns every record in the archive and in the store,
// keyed by device/seq, and fails on a record that is in both or twice.
func archivedAndStored(t *testing.T, m *Manager, dir string) map[string]ExportedRecord {
	t.Helper()
	all := map[string]ExportedRecord{}
	add := func(where string, line []byte) {
		var r ExportedRecord
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatal(err)
		}
		k := fmt.Sprintf("%s/%d", r.DeviceID, r.Seq)
		if _, dup := all[k]; dup {
			t.Fatalf("%s: record %s twice", where, k)
		}
		all[k] = r
	}
	var arch bytes.Buffer
	if _, err := archive.ExportLines(dir, &arch); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, l := range bytes.Split(bytes.TrimSpace(arch.Bytes()), []byte("\n")) {
		if len(l) > 0 {
			add("archive", l)
		}
	}
	var st bytes.Buffer
	if _, err := m.Export(t.Context(), &st, time.Time{}, ""); err != nil {
		t.Fatal(err)
	}
	for _, l := range bytes.Split(bytes.TrimSpace(st.Bytes()), []byte("\n")) {
		if len(l) > 0 {
			add("store", l)
		}
	}
	return all
}

// TestArchiveMovesFinishedHours: records move to one Parquet file per
// ingest hour once the hour ended ArchiveAfter ago, every field survives
// the trip (the export line read back from the file equals the one the
// store gave), nothing is lost or kept twice, and the counts follow.
func TestArchiveMovesFinishedHours(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 3, 1, 9, 10, 0, 0, time.UTC)}
	dir := filepath.Join(t.TempDir(), "archive")
	b := startBroker(t, broker.Config{DevAuth: true})
	m := openManager(t, Config{DataDir: t.TempDir(), Broker: b, Now: clk.now, PruneInterval: time.Hour, ArchiveDir: dir})
	send := func(dev string, from uint64) {
		m.deliver(topics.Device(dev, fleetwire.SuffixTelemetry), batch(dev, fmt.Sprint(dev, from), from, 10))
	}
	// Hour 09: two devices; hour 10: one more batch each.
	send("a-1", 1)
	send("a-2", 1)
	clk.advance(time.Hour)
	send("a-1", 11)
	send("a-2", 11)
	before := archivedAndStored(t, m, dir)

	// 10:10: hour 09 ended 10 minutes ago, exactly ArchiveAfter: due.
	if _, err := m.Prune(); err != nil {
		t.Fatal(err)
	}
	files, _ := archive.Files(dir)
	if len(files) != 1 || filepath.Base(filepath.Dir(files[0])) != "2026-03-01" || filepath.Base(files[0])[:3] != "09-" {
		t.Fatalf("files after the first sweep: %v", files)
	}
	c, _ := m.Counts()
	if c.Stored != 20 || c.Archived != 20 || c.Deleted != 0 {
		t.Fatalf("counts %+v", c)
	}
	if dev, _ := m.Device("a-1"); dev.Telemetry.Stored != 10 {
		t.Fatalf("a-1 stored %d, want 10", dev.Telemetry.Stored)
	}
	after := archivedAndStored(t, m, dir)
	if len(after) != 40 {
		t.Fatalf("%d records after the move, want 40", len(after))
	}
	for k, r := range before {
		want, _ := json.Marshal(r)
		got, _ := json.Marshal(after[k])
		if !bytes.Equal(want, got) {
			t.Fatalf("record %s changed in the archive:\n%s\n%s", k, want, got)
		}
	}
	// A sweep with nothing due moves nothing.
	if _, err := m.Prune(); err != nil {
		t.Fatal(err)
	}
	if files, _ := archive.Files(dir); len(files) != 1 {
		t.Fatalf("a sweep with nothing due wrote %v", files)
	}
	checkStore(t, m)
}

// TestArchiveBoundMovesEarly: while the store is over MaxRecords, the oldest
// move before their hour is done instead of being deleted, and the
// backstop (twice MaxRecords) deletes only what could not move.
func TestArchiveBoundMovesEarly(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)}
	dir := t.TempDir()
	b := startBroker(t, broker.Config{DevAuth: true})
	m := openManager(t, Config{DataDir: t.TempDir(), Broker: b, Now: clk.now, PruneInterval: time.Hour, ArchiveDir: dir, MaxRecords: 30})
	tel := topics.Device("e-1", fleetwire.SuffixTelemetry)
	for i := range 5 {
		m.deliver(tel, batch("e-1", fmt.Sprint(i), uint64(i*10+1), 10))
		clk.advance(time.Second)
	}
	if c, _ := m.Counts(); c.Stored != 50 || c.Deleted != 0 {
		t.Fatalf("ingest deleted below the backstop: %+v", c)
	}
	if _, err := m.Prune(); err != nil {
		t.Fatal(err)
	}
	c, _ := m.Counts()
	if c.Stored != 30 || c.Archived != 20 || c.Deleted != 0 {
		t.Fatalf("after the sweep: %+v", c)
	}
	if all := archivedAndStored(t, m, dir); len(all) != 50 {
		t.Fatalf("%d records, want 50", len(all))
	}
	// The archive unwritable: the backstop deletes past 2×MaxRecords.
	os.RemoveAll(dir)
	if err := os.WriteFile(dir, nil, 0o600); err != nil { // a file where the directory was
		t.Fatal(err)
	}
	for i := 5; i < 9; i++ {
		m.deliver(tel, batch("e-1", fmt.Sprint(i), uint64(i*10+1), 10))
	}
	if _, err := m.Prune(); err == nil {
		t.Fatal("a sweep into an unwritable archive reported no error")
	}
	if c, _ := m.Counts(); c.Stored != 60 || c.Deleted != 10 {
		t.Fatalf("backstop: %+v", c)
	}
}

// TestArchiveCrashBetweenFileAndDelete: a move whose file was written but
// whose deletes did not (all, or only some) commit is finished by the next
// sweep from the file: no second file, no record twice, none lost.
func TestArchiveCrashBetweenFileAndDelete(t *testing.T) {
	for _, partial := range []bool{false, true} {
		t.Run(fmt.Sprint("partial=", partial), func(t *testing.T) {
			clk := &fakeClock{t: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)}
			dir := t.TempDir()
			b := startBroker(t, broker.Config{DevAuth: true})
			m := openManager(t, Config{DataDir: t.TempDir(), Broker: b, Now: clk.now, PruneInterval: time.Hour, ArchiveDir: dir})
			tel := topics.Device("c-1", fleetwire.SuffixTelemetry)
			for i := range 4 {
				m.deliver(tel, batch("c-1", fmt.Sprint(i), uint64(i*10+1), 10))
			}
			clk.advance(2 * time.Hour)
			cutoff := clk.now().Add(-10 * time.Minute).Truncate(time.Hour)
			first, hour, _, err := m.st.(*store).oldestRecord(m.cfg.MaxRecords)
			if err != nil {
				t.Fatal(err)
			}
			last, _, err := m.st.(*store).writeArchive(dir, first, hour, cutoff, 0)
			if err != nil {
				t.Fatal(err)
			}
			if partial { // the first 15 deletes committed, then the crash
				var mid []byte
				_ = m.st.(*store).db.View(func(tx *bolt.Tx) error {
					c := tx.Bucket(bucketRecords).Cursor()
					k, _ := c.First()
					for range 14 {
						k, _ = c.Next()
					}
					mid = append([]byte(nil), k...)
					return nil
				})
				if n, err := m.st.(*store).deleteRange(clk.now(), first, mid); err != nil || n != 15 {
					t.Fatalf("partial delete: %d %v", n, err)
				}
			}
			if _, err := m.Prune(); err != nil {
				t.Fatal(err)
			}
			files, _ := archive.Files(dir)
			if len(files) != 1 {
				t.Fatalf("files %v", files)
			}
			if filepath.Base(files[0]) != filepath.Base(archive.Name(hour, first, last)) {
				t.Fatalf("file %s", files[0])
			}
			if all := archivedAndStored(t, m, dir); len(all) != 40 {
				t.Fatalf("%d records, want 40", len(all))
			}
			if c, _ := m.Counts(); c.Stored != 0 {
				t.Fatalf("counts %+v", c)
			}
		})
	}
}
