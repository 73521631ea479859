// Package trainset reads the fleet's telemetry export into labelled
// examples for the router predictor: each request record labelled by its
// outcome, and local answers relabelled by the quality signals joined to
// them (apps' feedback, the cloud's shadow grades). It also draws the
// held-out slice of the fleet's requests that candidate routers are judged
// on and training never sees.
//
// How it fits: `phaselessctl model train --telemetry` adds the training
// part to models/predictor/train's data, and `model evaluate` and `model
// publish` score routers on the held-out part (train.ScoreFleet). It sits
// with the fleet, whose records it interprets, because models never import
// transport (DESIGN.md §3): the trainer gets examples, not wire records.
// Only phaselessctl links it (it brings the trainer and gorgonia).
package trainset

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/phaseless/phaseless/models/predictor/train"
	"github.com/phaseless/phaseless/models/textfeat"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// The fleet's telemetry export holds, besides one record per request, the
// quality signals of local answers: apps' verdicts (fleetwire.KindFeedback)
// and the cloud's shadow grades (fleetwire.KindShadowGrade), each naming its
// request by trace id. Load joins them: a local answer that an app called
// bad, or that failed its shadow grade, needed the cloud (label 1) although
// it "ran locally and returned"; one called good, or that passed, did not
// (0). A request without a signal keeps LoadRequests' outcome label. When
// both signals exist the app's verdict wins (a person judged it).
//
// HeldOutShare of the requests, picked by a hash of the trace id, form the
// held-out slice that `phaselessctl model evaluate` and `model publish`
// judge a candidate router on; training never sees them.

// HeldOutShare is the share of fleet requests kept out of training.
const HeldOutShare = 0.2

// Part picks a slice of the fleet's telemetry.
type Part int

// Slices of the fleet's telemetry.
const (
	All Part = iota
	Train
	HeldOut
)

// RequestStats counts what LoadRequests kept and skipped.
type RequestStats struct {
	Records, Local, Cloud int
	SkippedVersion        int // other feature version or width
	SkippedUnknown        int // outcome says nothing about whether the device could have answered
}

// Stats counts what Load read.
type Stats struct {
	RequestStats
	Feedback, ShadowGrades int // quality records read
	// Relabelled counts local answers whose label a quality signal set to
	// cloud (BadLocal) or confirmed local (GoodLocal).
	BadLocal, GoodLocal int
	// OtherPart counts requests left out because they belong to the other part.
	OtherPart int
}

// InHeldOut reports whether a trace id belongs to the held-out slice.
func InHeldOut(traceID string) bool {
	h := sha256.Sum256([]byte("fleet-holdout\x00" + traceID))
	return float64(binary.BigEndian.Uint64(h[:8])>>11)/float64(1<<53) < HeldOutShare
}

// Load reads a fleet telemetry export (JSON lines of
// fleetapi.ExportedRecord) and returns the requests of part as examples,
// labelled with the quality signals joined to them.
func Load(r io.Reader, part Part) ([]train.Example, Stats, error) {
	var st Stats
	var reqs []fleetwire.RequestRecord
	verdict := map[string]bool{} // trace id → good (apps)
	shadow := map[string]bool{}  // trace id → passed (cloud)
	// One JSON value after another (the export's lines): an exported
	// record with kind and data, or a bare RequestRecord.
	dec := json.NewDecoder(r)
	for line := 1; ; line++ {
		var v json.RawMessage
		if err := dec.Decode(&v); err == io.EOF {
			break
		} else if err != nil {
			return nil, st, fmt.Errorf("telemetry record %d: %w", line, err)
		}
		var env struct {
			Kind string          `json:"kind"`
			Data json.RawMessage `json:"data"`
		}
		raw := []byte(v)
		if err := json.Unmarshal(raw, &env); err == nil && len(env.Data) > 0 {
			raw = env.Data
		} else {
			env.Kind = fleetwire.KindRequest
		}
		switch env.Kind {
		case fleetwire.KindRequest, "":
			var rec fleetwire.RequestRecord
			if err := json.Unmarshal(raw, &rec); err != nil {
				return nil, st, fmt.Errorf("telemetry record %d: %w", line, err)
			}
			reqs = append(reqs, rec)
		case fleetwire.KindFeedback:
			var f fleetwire.FeedbackRecord
			if err := json.Unmarshal(raw, &f); err != nil || f.Validate() != nil {
				return nil, st, fmt.Errorf("telemetry record %d: bad feedback record", line)
			}
			verdict[f.TraceID] = f.Rating == fleetwire.RatingGood
			st.Feedback++
		case fleetwire.KindShadowGrade:
			var g fleetwire.ShadowGrade
			if err := json.Unmarshal(raw, &g); err != nil || g.TraceID == "" {
				return nil, st, fmt.Errorf("telemetry record %d: bad shadow grade", line)
			}
			if g.Error == "" {
				shadow[g.TraceID] = g.OK
				st.ShadowGrades++
			}
		}
	}
	var out []train.Example
	for _, rec := range reqs {
		if part != All && InHeldOut(rec.TraceID) != (part == HeldOut) {
			st.OtherPart++
			continue
		}
		st.Records++
		if rec.FeatureVersion != textfeat.Version || len(rec.Features) != textfeat.Dim {
			st.SkippedVersion++
			continue
		}
		label, ok := outcomeLabel(rec)
		if rec.Ran() == "local" && rec.Outcome == "ok" {
			good, has := verdict[rec.TraceID]
			if !has {
				good, has = shadow[rec.TraceID]
			}
			if has {
				if good {
					label, ok = 0, true
					st.GoodLocal++
				} else {
					label, ok = 1, true
					st.BadLocal++
				}
			}
		}
		if !ok {
			st.SkippedUnknown++
			continue
		}
		out = st.keep(out, rec.Features, label)
	}
	return out, st, nil
}

// LoadRequests reads JSON lines of fleetwire.RequestRecord (as the fleet
// exports them; a line may also be a fleetwire.Record whose Data is one) and
// turns those whose outcome tells whether the device could answer into
// examples:
//   - ran locally and finished ok → 0 (the device handled it);
//   - ran locally and failed, or was routed local and ended in the cloud
//     through a fallback → 1 (it needed the cloud);
//   - anything else is skipped: a request routed to the cloud says nothing
//     about what the device would have done, and a cancelled one says
//     nothing at all.
//
// Records of another feature version or width are skipped, because their
// vectors mean something else. Quality records are skipped too: Load joins
// them.
func LoadRequests(r io.Reader) ([]train.Example, RequestStats, error) {
	var st RequestStats
	var out []train.Example
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		b := strings.TrimSpace(sc.Text())
		if b == "" {
			continue
		}
		var probe struct {
			Kind string          `json:"kind"`
			Data json.RawMessage `json:"data"`
		}
		raw := []byte(b)
		if err := json.Unmarshal(raw, &probe); err == nil && len(probe.Data) > 0 {
			if probe.Kind != "" && probe.Kind != fleetwire.KindRequest {
				continue
			}
			raw = probe.Data
		}
		var rec fleetwire.RequestRecord
		if err := json.Unmarshal(raw, &rec); err != nil {
			return nil, st, fmt.Errorf("telemetry line %d: %w", line, err)
		}
		st.Records++
		if rec.FeatureVersion != textfeat.Version || len(rec.Features) != textfeat.Dim {
			st.SkippedVersion++
			continue
		}
		label, ok := outcomeLabel(rec)
		if !ok {
			st.SkippedUnknown++
			continue
		}
		out = st.keep(out, rec.Features, label)
	}
	return out, st, sc.Err()
}

// keep counts a telemetry example under its label and appends it to out.
func (st *RequestStats) keep(out []train.Example, features []float32, label float32) []train.Example {
	if label == 1 {
		st.Cloud++
	} else {
		st.Local++
	}
	return append(out, train.Example{Features: features, Label: label, Source: train.SourceTelemetry, Group: train.SourceTelemetry})
}

// outcomeLabel is what a request's outcome alone says: 0 the device
// answered, 1 it needed the cloud, false nothing.
func outcomeLabel(r fleetwire.RequestRecord) (float32, bool) {
	switch {
	case r.Ran() == "local" && r.Outcome == "ok":
		return 0, true
	case r.Ran() == "local" && r.Outcome == "error":
		return 1, true
	case r.Decision == "local" && r.Ran() == "cloud" && r.Outcome != "cancelled":
		return 1, true
	}
	return 0, false
}
