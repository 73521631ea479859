package fleet

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/phaseless/phaseless/cloud/fleetapi"
	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/models/riskcontrol"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// Per-device router calibration (issue 35): each scored shadow grade — the
// router's score for a sampled request and whether the device's answer was
// wrong against the cloud's — joins its device's window of recent outcomes,
// and the device's threshold is recalibrated on the window at once
// (models/riskcontrol, Learn-then-Test at the device's router-alpha and
// fleetapi.RouterDelta). A certified threshold becomes the device's
// route-threshold through the config merge (fleetapi.MergeConfig); with too
// few outcomes the device keeps the fleet's. The shadow sample is drawn by
// a hash of the request id whatever the route (agent/shadow), so the window
// is an unbiased sample of the device's traffic.

// CalibrationWindow is how many recent scored outcomes a device is
// calibrated on: enough for a threshold near the best at α = 0.05 (the
// binomial bound costs about 1.2 points of α at 1000), few enough that a
// shift in traffic leaves the window within a few days of shadow samples.
const CalibrationWindow = 1000

// bucketRouterCalib holds device → calibWindow (JSON), apart from the
// device record, which every status rewrites.
var bucketRouterCalib = []byte("routercalib")

// calibWindow is a device's recent outcomes, oldest first.
type calibWindow struct {
	// Predictor is the router model the device reported running
	// (Status.Artifacts) when the window started: a new model's scores
	// mean something else, so its rollout starts a new window.
	Predictor string    `json:"predictor,omitempty"`
	Scores    []float64 `json:"scores"`
	Wrong     []bool    `json:"wrong"`
	Local     []bool    `json:"local"` // answered locally for the user
}

// routerAlpha is the device's merged router-alpha, or the default.
func routerAlpha(d *Device) (float64, error) {
	if d.Desired != nil {
		if v, ok := d.Desired.Values[fleetapi.ConfigRouterAlpha]; ok {
			a, err := strconv.ParseFloat(v, 64)
			if err != nil || !(a > 0 && a < 1) {
				return 0, fmt.Errorf("%s %q: want a share in (0,1)", fleetapi.ConfigRouterAlpha, v)
			}
			return a, nil
		}
	}
	return fleetapi.DefaultRouterAlpha, nil
}

// runningPredictor is the predictor version the device last reported.
func runningPredictor(d *Device) string {
	if d.Status == nil {
		return ""
	}
	return d.Status.Artifacts[firmware.KindPredictor]
}

// calibrateTx adds g to dev's window and recalibrates dev.Router; the
// caller re-merges dev's config. A grade without a score (an older agent)
// or without a verdict changes nothing.
func calibrateTx(tx *bolt.Tx, dev *Device, g fleetwire.ShadowGrade, now time.Time) error {
	b := tx.Bucket(bucketRouterCalib)
	return calibrateWith(dev, g, now, func() []byte { return b.Get([]byte(dev.ID)) },
		func(v []byte) error { return b.Put([]byte(dev.ID), v) })
}

// calibrateWith is calibrateTx on a window that get loads (nil: none yet)
// and put saves, the same for either store.
func calibrateWith(dev *Device, g fleetwire.ShadowGrade, now time.Time, get func() []byte, put func([]byte) error) error {
	if g.CloudProb == nil || g.Error != "" {
		return nil
	}
	var w calibWindow
	if v := get(); v != nil {
		if err := json.Unmarshal(v, &w); err != nil {
			return fmt.Errorf("router calibration of %s: %w: %v", dev.ID, errCorrupt, err)
		}
	}
	if p := runningPredictor(dev); p != w.Predictor {
		w = calibWindow{Predictor: p}
	}
	w.Scores = append(w.Scores, *g.CloudProb)
	w.Wrong = append(w.Wrong, !g.OK)
	w.Local = append(w.Local, g.Path != "cloud")
	if n := len(w.Scores) - CalibrationWindow; n > 0 {
		w.Scores, w.Wrong, w.Local = w.Scores[n:], w.Wrong[n:], w.Local[n:]
	}
	data, err := json.Marshal(w)
	if err != nil {
		return err
	}
	if err := put(data); err != nil {
		return err
	}
	alpha, err := routerAlpha(dev)
	if err != nil {
		return err
	}
	out := make([]riskcontrol.Outcome, len(w.Scores))
	bad := 0
	for i := range out {
		out[i] = riskcontrol.Outcome{Score: w.Scores[i], Wrong: w.Wrong[i]}
		if w.Wrong[i] && w.Local[i] {
			bad++
		}
	}
	res, err := riskcontrol.Calibrate(out, alpha, fleetapi.RouterDelta)
	if err != nil {
		return err
	}
	dev.Router = &fleetapi.RouterCalibration{Alpha: alpha, Threshold: res.Threshold, Certified: res.OK,
		Outcomes: res.N, Realised: float64(bad) / float64(len(out)), UpdatedAt: now}
	return nil
}
