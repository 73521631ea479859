package fleet

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/grade"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// Shadow evaluation: devices whose config sets shadow-share send a sample
// of their locally answered requests, with the local answer, as
// fleetwire.ShadowRecords. The Manager re-runs each on the cloud's own
// generator (Config.Shadow, the coordinator) and grades the local answer
// with the cloud's as the reference (models/grade.Against). The grade is
// stored as a record of kind shadow-grade beside the device's records, so
// the telemetry export carries it to `phaselessctl model train`, which
// labels the local answer by it. Grading runs on a few workers off the
// ingest path; a full queue drops the sample (counted), and a sample is
// graded once however often its batch is redelivered.

// shadowJob is one sample to grade.
type shadowJob struct {
	device string
	rec    fleetwire.ShadowRecord
}

var bucketShadowGraded = []byte("shadowgraded") // device 0x00 trace id → empty: graded

func (m *Manager) startShadow() {
	if m.cfg.Shadow == nil {
		return
	}
	m.shadowCh = make(chan shadowJob, m.cfg.ShadowQueue)
	for range m.cfg.ShadowWorkers {
		m.wg.Go(m.shadowWorker)
	}
}

// queueShadow hands the batch's shadow samples to the graders.
func (m *Manager) queueShadow(id string, b *fleetwire.TelemetryBatch) {
	for _, r := range b.Records {
		if r.Kind != fleetwire.KindShadow {
			continue
		}
		var rec fleetwire.ShadowRecord
		if err := json.Unmarshal(r.Data, &rec); err != nil || rec.TraceID == "" || len(rec.Messages) == 0 {
			m.mShadow.With("malformed").Inc()
			continue
		}
		if m.shadowCh == nil {
			m.mShadow.With("no_grader").Inc()
			continue
		}
		select {
		case m.shadowCh <- shadowJob{id, rec}:
		default:
			m.mShadow.With("dropped").Inc()
		}
	}
}

func (m *Manager) shadowWorker() {
	for {
		select {
		case <-m.stop:
			return
		case j := <-m.shadowCh:
			m.gradeShadow(j)
		}
	}
}

func (m *Manager) gradeShadow(j shadowJob) {
	key := commandKey(j.device, j.rec.TraceID)
	if done, _ := m.st.shadowGraded(key); done {
		m.mShadow.With("duplicate").Inc()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.ShadowTimeout)
	defer cancel()
	go func() { // a Close stops grading in progress
		select {
		case <-m.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	req := &llm.Request{ID: "shadow-" + j.rec.TraceID, Tenant: j.device, MaxTokens: max(j.rec.MaxTokens, 1)}
	for _, msg := range j.rec.Messages {
		req.Messages = append(req.Messages, llm.Message{Role: msg.Role, Content: msg.Content})
	}
	var cloud strings.Builder
	g := fleetwire.ShadowGrade{TraceID: j.rec.TraceID, CloudProb: j.rec.CloudProb, Path: j.rec.Path, Router: j.rec.Router}
	if _, err := m.cfg.Shadow.Generate(ctx, req, func(t llm.Token) error { cloud.WriteString(t.Text); return nil }); err != nil {
		g.Error = err.Error()
	} else {
		v := grade.Against(j.rec.Answer, cloud.String())
		g.OK, g.Score, g.Why, g.Cloud = v.OK, v.Score, v.Why, cloud.String()
	}
	if ctx.Err() != nil && g.Error != "" {
		select {
		case <-m.stop:
			return // shutting down: the device's record stays, a later ingest may bring it again
		default:
		}
	}
	dev, changed, stale, err := m.st.storeShadowGrade(j.device, key, g, m.now())
	if err != nil {
		m.log.Error("store shadow grade", "device", j.device, "err", err)
		return
	}
	if changed { // the calibrated threshold moved: ship it
		m.publishDesired(dev)
	}
	switch {
	case stale:
		m.mShadow.With("stale_router").Inc()
	case g.Error != "":
		m.mShadow.With("cloud_error").Inc()
	case g.OK:
		m.mShadow.With("passed").Inc()
	default:
		m.mShadow.With("failed").Inc()
	}
}

// gradeLine is the export line of a grade (data) stored at now.
func gradeLine(device string, data []byte, now time.Time) ([]byte, error) {
	return json.Marshal(ExportedRecord{DeviceID: device, Record: fleetwire.Record{Time: now, Kind: fleetwire.KindShadowGrade, Data: data}, IngestedAt: now})
}

// countGrade counts g's outcome on its device.
func countGrade(d *Device, g fleetwire.ShadowGrade) {
	switch {
	case g.Error != "":
		d.Telemetry.ShadowErrors++
	case g.OK:
		d.Telemetry.ShadowPassed++
	default:
		d.Telemetry.ShadowFailed++
	}
}

// storeShadowGrade keeps g as a record of its device, in ingest order like
// the device's own, marks the sample graded and recalibrates the device's
// threshold (routercalib.go); changed says whether its desired config got a
// new version, stale whether the grade was left out of the calibration (a
// router before the device's current one scored it).
func (s *store) storeShadowGrade(device string, key []byte, g fleetwire.ShadowGrade, now time.Time) (dev *Device, changed, stale bool, err error) {
	data, err := json.Marshal(g)
	if err != nil {
		return nil, false, false, err
	}
	err = s.db.Batch(func(tx *bolt.Tx) error {
		dev, changed, stale = nil, false, false
		graded := tx.Bucket(bucketShadowGraded)
		if graded.Get(key) != nil {
			return nil
		}
		recs := tx.Bucket(bucketRecords)
		n, err := recs.NextSequence()
		if err != nil {
			return err
		}
		line, err := gradeLine(device, data, now)
		if err != nil {
			return err
		}
		if err := recs.Put(recordKey(now, n), line); err != nil {
			return err
		}
		dt := newDeviceTx(tx, now)
		d, err := dt.get(device, true)
		if err != nil {
			return err
		}
		d.Telemetry.Stored++
		countGrade(d, g)
		if stale, err = calibrateTx(tx, d, g, now); err != nil {
			return err
		}
		if dev, changed, err = remergeTx(tx, d); err != nil {
			return err
		}
		if err := addU64(tx.Bucket(bucketMeta), metaStored, 1); err != nil {
			return err
		}
		if err := graded.Put(key, nil); err != nil {
			return err
		}
		return dt.flush()
	})
	return dev, changed, stale, err
}
