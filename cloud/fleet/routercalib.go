package fleet

import (
	"encoding/json"
	"fmt"
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
// router-delta). A certified threshold becomes the device's
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
	// Predictor is the router model the window's outcomes were scored by
	// (currentRouter when it started): a new model's scores mean
	// something else, so its rollout starts a new window.
	Predictor string    `json:"predictor,omitempty"`
	Scores    []float64 `json:"scores"`
	Wrong     []bool    `json:"wrong"`
	Local     []bool    `json:"local"` // answered locally for the user
}

// routerShare is the device's merged value of key (router-alpha or
// router-delta), or def.
func routerShare(d *Device, key string, def float64) (float64, error) {
	if d.Desired != nil {
		if v, ok := d.Desired.Values[key]; ok {
			return fleetapi.RouterShare(key, v)
		}
	}
	return def, nil
}

// routerOf is the router model a status reports running: the predictor
// version, or the agent's built-in one.
func routerOf(s *fleetwire.Status) string {
	if v := s.Artifacts[firmware.KindPredictor]; v != "" {
		return v
	}
	return fleetwire.RouterBuiltin
}

// currentRouter is the router model the device runs: the one its last
// "online" status names. An "offline" status is the last will, built at
// the connection's start, so it may name a router replaced since; then
// the calibration's own stands.
func currentRouter(d *Device) string {
	switch {
	case d.Status != nil && d.Status.State == "online":
		return routerOf(d.Status)
	case d.Router != nil && d.Router.Router != "":
		return d.Router.Router
	case d.Status != nil:
		return routerOf(d.Status)
	}
	return fleetwire.RouterBuiltin
}

// restartCalibration drops d's calibrated threshold when d reports a
// router model other than the one it was calibrated for (a rollout
// reached it): the old model's threshold means nothing on the new one's
// scores, so until the new model's own outcomes certify one the device
// runs the fleet's. Called with each status, before the config merge.
func restartCalibration(d *Device, now time.Time) {
	r := d.Router
	if r == nil || r.Router == "" || currentRouter(d) == r.Router {
		return
	}
	d.Router = &fleetapi.RouterCalibration{Alpha: r.Alpha, Delta: r.Delta, Router: currentRouter(d), UpdatedAt: now}
}

// calibrateTx adds g to dev's window and recalibrates dev.Router; the
// caller re-merges dev's config. A grade without a score (an older agent)
// or without a verdict changes nothing, nor does one scored by a router
// other than the device's current one (stale: sampled before a rollout,
// graded after it).
func calibrateTx(tx *bolt.Tx, dev *Device, g fleetwire.ShadowGrade, now time.Time) (stale bool, err error) {
	b := tx.Bucket(bucketRouterCalib)
	return calibrateWith(dev, g, now, func() []byte { return b.Get([]byte(dev.ID)) },
		func(v []byte) error { return b.Put([]byte(dev.ID), v) })
}

// calibrateWith is calibrateTx on a window that get loads (nil: none yet)
// and put saves, the same for either store.
func calibrateWith(dev *Device, g fleetwire.ShadowGrade, now time.Time, get func() []byte, put func([]byte) error) (stale bool, err error) {
	if g.CloudProb == nil || g.Error != "" {
		return false, nil
	}
	router := currentRouter(dev)
	if g.Router != "" && g.Router != router { // "": an agent that predates the field
		return true, nil
	}
	var w calibWindow
	if v := get(); v != nil {
		if err := json.Unmarshal(v, &w); err != nil {
			return false, fmt.Errorf("router calibration of %s: %w: %v", dev.ID, errCorrupt, err)
		}
	}
	if router != w.Predictor {
		w = calibWindow{Predictor: router}
	}
	w.Scores = append(w.Scores, *g.CloudProb)
	w.Wrong = append(w.Wrong, !g.OK)
	w.Local = append(w.Local, g.Path != "cloud")
	if n := len(w.Scores) - CalibrationWindow; n > 0 {
		w.Scores, w.Wrong, w.Local = w.Scores[n:], w.Wrong[n:], w.Local[n:]
	}
	data, err := json.Marshal(w)
	if err != nil {
		return false, err
	}
	if err := put(data); err != nil {
		return false, err
	}
	alpha, err := routerShare(dev, fleetapi.ConfigRouterAlpha, fleetapi.DefaultRouterAlpha)
	if err != nil {
		return false, err
	}
	delta, err := routerShare(dev, fleetapi.ConfigRouterDelta, fleetapi.DefaultRouterDelta)
	if err != nil {
		return false, err
	}
	out := make([]riskcontrol.Outcome, len(w.Scores))
	bad := 0
	for i := range out {
		out[i] = riskcontrol.Outcome{Score: w.Scores[i], Wrong: w.Wrong[i]}
		if w.Wrong[i] && w.Local[i] {
			bad++
		}
	}
	res, err := riskcontrol.Calibrate(out, alpha, delta)
	if err != nil {
		return false, err
	}
	dev.Router = &fleetapi.RouterCalibration{Alpha: alpha, Delta: delta, Router: router, Threshold: res.Threshold, Certified: res.OK,
		Outcomes: res.N, Realised: float64(bad) / float64(len(out)), UpdatedAt: now}
	return false, nil
}
