package archive

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/fleetapi"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

func sampleRows() []Row {
	at := time.Date(2026, 3, 1, 9, 15, 7, 123456789, time.UTC)
	var rows []Row
	for i, dev := range []string{"car-1", "car-2", "car-1"} {
		r := fleetapi.ExportedRecord{DeviceID: dev, IngestedAt: at.Add(time.Duration(i) * time.Nanosecond),
			Record: fleetwire.Record{Seq: uint64(10 + i), Time: at.Add(-time.Second), Kind: "request", Data: json.RawMessage(`{"ttft_ms":38.5,"route":"local"}`)}}
		rows = append(rows, FromExported(&r))
	}
	// A record without data or time: both must come back as they were.
	rows = append(rows, FromExported(&fleetapi.ExportedRecord{DeviceID: "car-3", Record: fleetwire.Record{Seq: 1, Kind: "boot"}}))
	return rows
}

// TestRoundTrip: the export lines read back from a file equal those the
// rows were made from, to the nanosecond.
func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	rows := sampleRows()
	h := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	size, err := Write(dir, h, []byte{1}, []byte{2}, rows)
	if err != nil || size == 0 {
		t.Fatal(size, err)
	}
	var got bytes.Buffer
	n, err := ExportLines(dir, &got)
	if err != nil || n != len(rows) {
		t.Fatal(n, err)
	}
	var want bytes.Buffer
	for i := range rows {
		json.NewEncoder(&want).Encode(rows[i].Exported())
	}
	if got.String() != want.String() {
		t.Fatalf("got\n%s\nwant\n%s", got.String(), want.String())
	}
	first := rows[0].Exported()
	if first.Time.Nanosecond() != 123456789 || first.IngestedAt.Nanosecond() != 123456789 {
		t.Fatalf("times lost precision: %v %v", first.Time, first.IngestedAt)
	}
	if last := rows[3].Exported(); !last.Time.IsZero() || last.Data != nil {
		t.Fatalf("zero fields came back as %+v", last)
	}
	// No temporary file is left beside it.
	ents, _ := os.ReadDir(filepath.Join(dir, "2026-03-01"))
	if len(ents) != 1 || !strings.HasPrefix(ents[0].Name(), "09-01-02") {
		t.Fatalf("day directory holds %v", ents)
	}
}

func TestCovering(t *testing.T) {
	dir := t.TempDir()
	h := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	if _, err := Write(dir, h, []byte{0, 5}, []byte{0, 9}, sampleRows()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key  []byte
		hour time.Time
		want []byte
	}{
		{[]byte{0, 5}, h, []byte{0, 9}},
		{[]byte{0, 7}, h, []byte{0, 9}},
		{[]byte{0, 9}, h, []byte{0, 9}},
		{[]byte{0, 4}, h, nil},
		{[]byte{0, 10}, h, nil},
		{[]byte{0, 7}, h.Add(time.Hour), nil},
	} {
		got, err := Covering(dir, c.hour, c.key)
		if err != nil || !bytes.Equal(got, c.want) {
			t.Errorf("Covering(%v, %v) = %v, %v; want %v", c.hour, c.key, got, err, c.want)
		}
	}
}

// TestRetain: files go oldest first, by the age of their hour and by the
// archive's size; empty day directories go with them.
func TestRetain(t *testing.T) {
	dir := t.TempDir()
	day := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	var sizes []int64
	for h := range 4 {
		n, err := Write(dir, day.Add(time.Duration(h)*time.Hour), []byte{byte(h)}, []byte{byte(h)}, sampleRows())
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, n)
	}
	now := day.Add(4 * time.Hour)
	// A crashed move's temporary file, two hours old: removed.
	stale := filepath.Join(dir, "2026-03-01", ".part-123")
	if err := os.WriteFile(stale, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(stale, now.Add(-2*time.Hour), now.Add(-2*time.Hour))
	// Age: hour 00 ended 3h before now, hour 01 2h, hour 02 1h.
	files, size, err := Retain(dir, now, 90*time.Minute, 0)
	if err != nil || files != 2 || size != sizes[2]+sizes[3] {
		t.Fatalf("age: %d files %d bytes %v", files, size, err)
	}
	// Size: room for one file.
	files, _, err = Retain(dir, now, 0, sizes[3])
	if err != nil || files != 1 {
		t.Fatalf("size: %d files %v", files, err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale temporary file kept: %v", err)
	}
	left, _ := Files(dir)
	if len(left) != 1 || !strings.HasPrefix(filepath.Base(left[0]), "03-") {
		t.Fatalf("kept %v", left)
	}
	if _, _, err := Retain(dir, now, 0, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "2026-03-01")); !os.IsNotExist(err) {
		t.Fatalf("empty day directory kept: %v", err)
	}
}

// FuzzReadFile: a damaged archive file is an error, never a panic.
func FuzzReadFile(f *testing.F) {
	dir := f.TempDir()
	h := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	if _, err := Write(dir, h, []byte{1}, []byte{2}, sampleRows()); err != nil {
		f.Fatal(err)
	}
	good, err := os.ReadFile(filepath.Join(dir, Name(h, []byte{1}, []byte{2})))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte("PAR1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "x.parquet")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		_ = ReadFile(p, func(*Row) error { return nil })
	})
}
