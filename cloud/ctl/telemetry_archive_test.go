package ctl

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/fleetapi"
	"github.com/phaseless/phaseless/cloud/fleetapi/archive"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// TestOpenTelemetryReadsTheArchive: model train/evaluate's --telemetry
// reads a Parquet archive directory, or one file of it, as the export
// lines the records were.
func TestOpenTelemetryReadsTheArchive(t *testing.T) {
	dir := t.TempDir()
	h := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	var want bytes.Buffer
	var rows []archive.Row
	for i := range 3 {
		data, _ := json.Marshal(fleetwire.RequestRecord{TraceID: "t", Decision: "local", Path: "local", Outcome: "ok", PromptTokens: i})
		r := fleetapi.ExportedRecord{DeviceID: "car-1", IngestedAt: h.Add(time.Minute),
			Record: fleetwire.Record{Seq: uint64(i + 1), Time: h, Kind: "request", Data: data}}
		json.NewEncoder(&want).Encode(r)
		rows = append(rows, archive.FromExported(&r))
	}
	if _, err := archive.Write(dir, h, []byte{1}, []byte{3}, rows); err != nil {
		t.Fatal(err)
	}
	files, _ := archive.Files(dir)
	for _, path := range []string{dir, files[0]} {
		rc, err := openTelemetry(path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("%s: %v\n%s\nwant\n%s", path, err, got, want.Bytes())
		}
	}
}
