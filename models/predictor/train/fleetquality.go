package train

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"

	"github.com/phaseless/phaseless/models/predictor"
	"github.com/phaseless/phaseless/models/textfeat"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// The fleet's telemetry export holds, besides one record per request, the
// quality signals of local answers: apps' verdicts (fleetwire.KindFeedback)
// and the cloud's shadow grades (fleetwire.KindShadowGrade), each naming its
// request by trace id. LoadFleetTelemetry joins them: a local answer that
// an app called bad, or that failed its shadow grade, needed the cloud
// (label 1) although it "ran locally and returned"; one called good, or
// that passed, did not (0). A request without a signal keeps LoadTelemetry's
// outcome label. When both signals exist the app's verdict wins (a person
// judged it).
//
// HeldOutShare of the requests, picked by a hash of the trace id, form the
// held-out slice that `phaselessctl model evaluate` and `model publish`
// judge a candidate router on; training never sees them.

// HeldOutShare is the share of fleet requests kept out of training.
const HeldOutShare = 0.2

// FleetPart picks a slice of the fleet's telemetry.
type FleetPart int

// Slices of the fleet's telemetry.
const (
	FleetAll FleetPart = iota
	FleetTrain
	FleetHeldOut
)

// FleetStats counts what LoadFleetTelemetry read.
type FleetStats struct {
	TelemetryStats
	Feedback, ShadowGrades int // quality records read
	// Relabelled counts local answers whose label a quality signal set to
	// cloud (BadLocal) or confirmed local (GoodLocal).
	BadLocal, GoodLocal int
	// HeldOut counts requests left out because they belong to the other part.
	OtherPart int
}

// InHeldOut reports whether a trace id belongs to the held-out slice.
func InHeldOut(traceID string) bool {
	h := sha256.Sum256([]byte("fleet-holdout\x00" + traceID))
	return float64(binary.BigEndian.Uint64(h[:8])>>11)/float64(1<<53) < HeldOutShare
}

// LoadFleetTelemetry reads a fleet telemetry export (JSON lines of
// fleetapi.ExportedRecord) and returns the requests of part as examples,
// labelled with the quality signals joined to them.
func LoadFleetTelemetry(r io.Reader, part FleetPart) ([]Example, FleetStats, error) {
	var st FleetStats
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
	var out []Example
	for _, rec := range reqs {
		if part != FleetAll && InHeldOut(rec.TraceID) != (part == FleetHeldOut) {
			st.OtherPart++
			continue
		}
		st.Records++
		if rec.FeatureVersion != textfeat.Version || len(rec.Features) != textfeat.Dim {
			st.SkippedVersion++
			continue
		}
		label, ok := telemetryLabel(rec)
		if rec.Path == "local" && rec.Outcome == "ok" {
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

// FleetScore is a router's result on the fleet's held-out slice, at the
// threshold it routes with.
type FleetScore struct {
	Name      string
	Threshold float64
	// Cloud and Local count the held-out requests by label.
	Cloud, Local int
	// CloudSent is the share of cloud-labelled requests (local answers
	// that were bad, failures) the router sends to the cloud; LocalKept the
	// share of local-labelled ones it keeps on the device.
	CloudSent, LocalKept float64
	// Balanced is their mean: what model evaluate compares.
	Balanced float64
}

// ScoreFleet scores p (routing to the cloud at or above threshold) on
// held-out fleet examples. Both labels must be present: a slice of one
// label cannot tell a better router from one that sends everything one way.
func ScoreFleet(name string, p predictor.Predictor, threshold float64, ex []Example) (FleetScore, error) {
	s := FleetScore{Name: name, Threshold: threshold}
	var sent, kept int
	for _, e := range ex {
		v, err := p.Predict(e.Features)
		if err != nil {
			return s, fmt.Errorf("%s: %w", name, err)
		}
		if e.Label > 0.5 {
			s.Cloud++
			if v >= threshold {
				sent++
			}
		} else {
			s.Local++
			if v < threshold {
				kept++
			}
		}
	}
	if s.Cloud == 0 || s.Local == 0 {
		return s, fmt.Errorf("the held-out slice has %d cloud-labelled and %d local-labelled requests: both are needed to compare routers", s.Cloud, s.Local)
	}
	s.CloudSent, s.LocalKept = float64(sent)/float64(s.Cloud), float64(kept)/float64(s.Local)
	s.Balanced = (s.CloudSent + s.LocalKept) / 2
	return s, nil
}
