package archive

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/fleetapi"
	"github.com/phaseless/phaseless/models/textfeat"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// deviceHour makes what n devices send in an hour at one request every
// 10 s: request records as the agent writes them, with the router's real
// feature vector of a real prompt (CLINC150's, shared/data/routing), random
// trace ids and latencies.
func deviceHour(tb testing.TB, n int) []fleetapi.ExportedRecord {
	raw, err := os.ReadFile("../../../../shared/data/routing/clinc150-small.json")
	if err != nil {
		tb.Skipf("CLINC150 sample not found: %v", err)
	}
	var sets map[string][][2]string
	if err := json.Unmarshal(raw, &sets); err != nil {
		tb.Fatal(err)
	}
	var prompts []string
	for _, rows := range sets {
		for _, r := range rows {
			prompts = append(prompts, r[0])
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	start := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	var out []fleetapi.ExportedRecord
	for d := range n {
		for i := range 360 {
			at := start.Add(time.Duration(i)*10*time.Second + time.Duration(rng.IntN(1e9)))
			local := rng.Float64() < 0.7
			rec := fleetwire.RequestRecord{
				TraceID: fmt.Sprintf("%016x%016x", rng.Uint64(), rng.Uint64()), Features: textfeat.Extract(prompts[rng.IntN(len(prompts))]),
				FeatureVersion: 3, CloudProb: rng.Float64(), Decision: "local", Reason: "predictor", Path: "local",
				TTFTMillis: 20 + rng.ExpFloat64()*30, ITLMillis: 8 + rng.Float64()*10,
				PromptTokens: 20 + rng.IntN(400), CompletionTokens: 1 + rng.IntN(200), Outcome: "ok",
			}
			if !local {
				rec.Decision, rec.Path = "cloud", "cloud/decode-heavy/w1"
			}
			data, _ := json.Marshal(rec)
			out = append(out, fleetapi.ExportedRecord{DeviceID: fmt.Sprintf("car-%05d", d), IngestedAt: at.Add(2 * time.Second),
				Record: fleetwire.Record{Seq: uint64(1_780_000_000_000_000 + i), Time: at, Kind: "request", Data: data}})
		}
	}
	return out
}

// BenchmarkDeviceHour reports the archive's bytes per device-hour against
// the fleet store's (its export line per record, which bbolt holds with
// its own page overhead on top: the baseline, same records).
func BenchmarkDeviceHour(b *testing.B) {
	const devices = 50
	recs := deviceHour(b, devices)
	var lines int
	rows := make([]Row, len(recs))
	for i := range recs {
		l, _ := json.Marshal(recs[i])
		lines += len(l)
		rows[i] = FromExported(&recs[i])
	}
	var size int64
	for b.Loop() {
		var err error
		if size, err = Write(b.TempDir(), recs[0].IngestedAt.Truncate(time.Hour), []byte{0}, []byte{1}, rows); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(size)/devices, "parquet-bytes/device-hour")
	b.ReportMetric(float64(lines)/devices, "store-line-bytes/device-hour")
	b.ReportMetric(float64(lines)/float64(size), "x-smaller")
}
